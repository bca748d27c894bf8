package broker

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

type nodeKey struct{}

// callerNode is the verified node name of an internal request ("" when the
// cluster has no secret).
func callerNode(ctx context.Context) string {
	n, _ := ctx.Value(nodeKey{}).(string)
	return n
}

// nodeAuth refuses internal requests that are not signed with the cluster
// secret (401 UNAUTHENTICATED) and records the calling node and the
// principal it acts for (callerPrincipal); where the broker checks ACLs, a
// request with no principal is refused too (401), the health route aside.
// Without a secret it lets everything through. Health probes and /metrics
// stay open. It does not wrap the ResponseWriter (sendfile).
func (b *Broker) nodeAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/internal/") {
			next.ServeHTTP(w, r)
			return
		}
		var node string
		if len(b.opts.ClusterSecret) > 0 {
			var err error
			if node, err = brokerapi.VerifyNode(b.opts.ClusterSecret, r, time.Now()); err != nil {
				api.WriteError(w, b.refused(api.Errorf(api.CodeUnauthenticated, "internal API: %v", err)))
				return
			}
		}
		principal, err := requestPrincipal(r, node)
		if err != nil {
			api.WriteError(w, b.refused(err))
			return
		}
		if b.opts.Auth.Required && principal == auth.Anonymous && r.URL.Path != brokerapi.PathHealth {
			api.WriteError(w, b.refused(api.Errorf(api.CodeUnauthenticated, "this broker requires a principal: a gateway names it in %s", brokerapi.HeaderPrincipal)))
			return
		}
		ctx := withPrincipal(r.Context(), principal)
		if node != "" {
			ctx = context.WithValue(ctx, nodeKey{}, node)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkReplicaCaller refuses a replication fetch for replica id from anyone
// but broker id itself, where the cluster has a secret: a follower position
// moves the high watermark, so a forged one would acknowledge acks=all
// writes that exist on one disk.
func (b *Broker) checkReplicaCaller(ctx context.Context, id int32) error {
	if len(b.opts.ClusterSecret) == 0 {
		return nil
	}
	if caller, ok := brokerapi.BrokerID(callerNode(ctx)); !ok || caller != id {
		return b.refused(api.Errorf(api.CodeNotAuthorized, "a fetch for replica %d must come from broker %d, not %q", id, id, callerNode(ctx)))
	}
	return nil
}
