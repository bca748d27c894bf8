package brokerapi

import "context"

type clientIDKey struct{}

// WithClientID returns ctx carrying the client id of the caller a gateway
// acts for; every broker call made with it sends the id (api.HeaderClientID),
// which brokers account quotas to.
func WithClientID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, clientIDKey{}, id)
}

// ClientIDFrom returns the client id in ctx, or "".
func ClientIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(clientIDKey{}).(string)
	return id
}
