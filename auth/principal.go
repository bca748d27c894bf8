package auth

import "context"

// Anonymous is the principal of a request without credentials where
// authentication is not required.
const Anonymous = "User:ANONYMOUS"

type principalKey struct{}

// WithPrincipal returns ctx carrying the caller's principal.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom returns the principal in ctx, or Anonymous.
func PrincipalFrom(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(string); ok {
		return p
	}
	return Anonymous
}

// PrincipalIn returns the principal in ctx, ok false when there is none.
func PrincipalIn(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}
