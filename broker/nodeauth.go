package broker

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/tlsfiles"
)

type nodeKey struct{}

// callerNode is the verified node name of an internal request ("" when the
// broker identifies no nodes, or the caller is not one).
func callerNode(ctx context.Context) string {
	n, _ := ctx.Value(nodeKey{}).(string)
	return n
}

// A broker learns which node calls it in one of two ways: the cluster
// secret's signature on each request, or, on a TLS listener with a client
// CA (the cluster CA), the verified client certificate, whose subject
// common name is the node name ("gateway", "broker:<id>"). With neither,
// nothing is verified.

// verifiesNodes reports whether this broker knows its callers' nodes.
func (b *Broker) verifiesNodes() bool {
	return len(b.opts.ClusterSecret) > 0 || nodeCerts(b.opts.TLS)
}

// nodeCerts reports whether a listener with these options identifies nodes
// by certificate: TLS with a client CA.
func nodeCerts(o *tlsfiles.Options) bool { return o != nil && o.ClientCAFile != "" }

// certNode is the node a request's verified client certificate names, ""
// when it has none or its common name is not a node name.
func certNode(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	cn := r.TLS.PeerCertificates[0].Subject.CommonName
	if cn == brokerapi.NodeGateway {
		return cn
	}
	if _, ok := brokerapi.BrokerID(cn); ok {
		return cn
	}
	return ""
}

// nodeAuth refuses internal requests that are not signed with the cluster
// secret (401 UNAUTHENTICATED), or, identifying nodes by certificate, that
// name a principal without a node's certificate, and records the calling
// node and the principal it acts for (callerPrincipal); where the broker
// checks ACLs, a request with no principal is refused too (401), the health
// route aside. Identifying no nodes, it lets everything through. Health
// probes and /metrics stay open. It does not wrap the ResponseWriter
// (sendfile).
func (b *Broker) nodeAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/internal/") {
			next.ServeHTTP(w, r)
			return
		}
		var node string
		switch {
		case len(b.opts.ClusterSecret) > 0:
			var err error
			if node, err = brokerapi.VerifyNode(b.opts.ClusterSecret, r, time.Now()); err != nil {
				apihttp.WriteError(w, b.refused(api.Errorf(api.CodeUnauthenticated, "internal API: %v", err)))
				return
			}
		case nodeCerts(b.opts.TLS):
			// Only a node may speak for a principal: anyone else's header
			// would be a forgery nothing here could detect.
			if node = certNode(r); node == "" && r.Header.Get(brokerapi.HeaderPrincipal) != "" {
				apihttp.WriteError(w, b.refused(api.Errorf(api.CodeUnauthenticated, "internal API: %s from a caller without a cluster node's certificate", brokerapi.HeaderPrincipal)))
				return
			}
		}
		principal, err := requestPrincipal(r, node)
		if err != nil {
			apihttp.WriteError(w, b.refused(err))
			return
		}
		if b.opts.Auth.Required && principal == auth.Anonymous && r.URL.Path != brokerapi.PathHealth {
			apihttp.WriteError(w, b.refused(api.Errorf(api.CodeUnauthenticated, "this broker requires a principal: a gateway names it in %s", brokerapi.HeaderPrincipal)))
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
// but broker id itself, where the broker identifies nodes: a follower
// position moves the high watermark, so a forged one would acknowledge
// acks=all writes that exist on one disk.
func (b *Broker) checkReplicaCaller(ctx context.Context, id int32) error {
	if !b.verifiesNodes() {
		return nil
	}
	if caller, ok := brokerapi.BrokerID(callerNode(ctx)); !ok || caller != id {
		return b.refused(api.Errorf(api.CodeNotAuthorized, "a fetch for replica %d must come from broker %d, not %q", id, id, callerNode(ctx)))
	}
	return nil
}
