package broker

import (
	"context"
	"net/http"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// The principal of an internal request, as verified by nodeAuth:
//   - a gateway's call names it in brokerapi.HeaderPrincipal, which the node
//     signature covers; without the header a gateway calls as
//     User:ANONYMOUS;
//   - a broker calls as itself, "Node:broker:<id>", unless it names a
//     principal;
//   - node principals ("Node:…") are super users: a node holds the cluster
//     secret or a node certificate, so it could name any principal anyway.
//
// With node certificates instead of a secret, the node is the one the
// verified client certificate names, and a caller whose certificate names
// no node may not send the header. With neither nothing is verified: the
// header is taken as sent, as is everything else on such a cluster.

type principalKey struct{}

// callerPrincipal is the verified principal an internal request acts for.
func callerPrincipal(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(string); ok {
		return p
	}
	return auth.Anonymous
}

// requestPrincipal derives the principal of a request from node, the
// verified calling node ("" when it is none or the broker does not
// identify nodes).
func requestPrincipal(r *http.Request, node string) (string, *api.Error) {
	p := r.Header.Get(brokerapi.HeaderPrincipal)
	switch {
	case p == "":
		if _, ok := brokerapi.BrokerID(node); ok {
			return brokerapi.NodePrincipal(node), nil
		}
		return auth.Anonymous, nil
	case brokerapi.IsNodePrincipal(p):
		if p != brokerapi.PrincipalGateway {
			if _, ok := brokerapi.BrokerID(p[len(brokerapi.NodePrincipal("")):]); !ok {
				return "", api.Errorf(api.CodeUnauthenticated, "internal API: %s names no node", brokerapi.HeaderPrincipal)
			}
		}
		return p, nil
	default:
		if err := auth.ValidatePrincipal(p); err != nil {
			return "", api.Errorf(api.CodeUnauthenticated, "internal API: %s: %v", brokerapi.HeaderPrincipal, err)
		}
		return p, nil
	}
}

func withPrincipal(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}
