package broker

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// AuthOptions configure the broker's own authorization: the ACLs checked
// again for the principal a gateway names (callerPrincipal), so a broker
// reached directly enforces the gateway's rules.
type AuthOptions struct {
	// Required checks every internal request's principal against the ACLs
	// in the coordinator (/auth/acls), as the gateway's routes do, and
	// refuses User:ANONYMOUS (401 UNAUTHENTICATED). It needs the cluster
	// secret: without one, anyone could name any principal. Default false:
	// a signed caller may do everything.
	Required bool
	// SuperUsers may do everything whatever the ACLs say; node principals
	// (Node:gateway, Node:broker:<id>) always may. Default none.
	SuperUsers []string
	// BootstrapPrincipal is a super user too: the principal of the gateways'
	// bootstrap token, which a broker never sees. Default "User:admin".
	BootstrapPrincipal string
}

func (o *AuthOptions) validate(verifiesNodes bool) error {
	if !o.Required {
		return nil
	}
	if !verifiesNodes {
		return errors.New("broker: Auth.Required needs a ClusterSecret or TLS with a client CA (TLS.ClientCAFile) whose certificates name the nodes: without either anyone who reaches the internal port could name any principal")
	}
	if o.BootstrapPrincipal == "" {
		o.BootstrapPrincipal = "User:admin"
	}
	o.SuperUsers = append(slices.Clip(o.SuperUsers), o.BootstrapPrincipal)
	for _, p := range o.SuperUsers {
		if err := auth.ValidatePrincipal(p); err != nil {
			return err
		}
	}
	return nil
}

// allowed reports whether the request's principal may perform op on the
// resource; always true when authorization is off, and for nodes.
func (b *Broker) allowed(ctx context.Context, op auth.Operation, rt auth.ResourceType, name string) bool {
	if !b.opts.Auth.Required {
		return true
	}
	p := callerPrincipal(ctx)
	if brokerapi.IsNodePrincipal(p) {
		return true
	}
	z := auth.Authorizer{SuperUsers: b.opts.Auth.SuperUsers, ACLs: b.authStore.ACLs()}
	return z.Allowed(p, op, rt, name)
}

// authorize is allowed as an error: UNAUTHENTICATED for a request that
// names no principal, NOT_AUTHORIZED for one the ACLs refuse.
func (b *Broker) authorize(ctx context.Context, op auth.Operation, rt auth.ResourceType, name string) error {
	if b.allowed(ctx, op, rt, name) {
		return nil
	}
	p := callerPrincipal(ctx)
	if p == auth.Anonymous {
		return b.refused(api.Errorf(api.CodeUnauthenticated, "this broker requires a principal: a gateway names it in %s", brokerapi.HeaderPrincipal))
	}
	if rt == auth.ResourceCluster {
		return b.refused(api.Errorf(api.CodeNotAuthorized, "%s may not %s the cluster", p, op))
	}
	return b.refused(api.Errorf(api.CodeNotAuthorized, "%s may not %s %s %q", p, op, rt, name))
}

// authRefusals count the internal requests this broker refused for their
// caller: not signed, or with no principal where one is required
// (UNAUTHENTICATED); or refused by the ACLs or a node-only route
// (NOT_AUTHORIZED). A gateway checks the same ACLs first, so a refusal of
// a gateway's call means it acts for no principal where it should, or the
// two copies of the ACLs differ for a moment.
type authRefusals struct {
	unauthenticated atomic.Int64
	notAuthorized   atomic.Int64
}

// refused counts e and returns it.
func (b *Broker) refused(e *api.Error) *api.Error {
	if e.Code == api.CodeUnauthenticated {
		b.authRefused.unauthenticated.Add(1)
	} else {
		b.authRefused.notAuthorized.Add(1)
	}
	return e
}

var descAuthRefused = prometheus.NewDesc("sluice_broker_auth_refused_total",
	"Internal requests refused for their caller, by code: UNAUTHENTICATED (unsigned, or no principal where one is required) or NOT_AUTHORIZED (the ACLs, or a route for brokers only).", []string{"code"}, nil)

type authCollector struct{ b *Broker }

func (c authCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descAuthRefused }

func (c authCollector) Collect(ch chan<- prometheus.Metric) {
	for code, n := range map[api.Code]*atomic.Int64{api.CodeUnauthenticated: &c.b.authRefused.unauthenticated, api.CodeNotAuthorized: &c.b.authRefused.notAuthorized} {
		ch <- prometheus.MustNewConstMetric(descAuthRefused, prometheus.CounterValue, float64(n.Load()), string(code))
	}
}

// check is the route-level authorization: op on the resource named by the
// route's URL parameter (the cluster for auth.ResourceCluster). It does not
// wrap the ResponseWriter (sendfile).
func (b *Broker) check(op auth.Operation, rt auth.ResourceType) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := auth.ClusterName
			if rt != auth.ResourceCluster {
				name = chi.URLParam(r, string(rt))
			}
			if err := b.authorize(r.Context(), op, rt, name); err != nil {
				apihttp.WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// brokersOnly refuses a replication route to anyone but a broker, where the
// cluster has a secret.
func (b *Broker) brokersOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(b.opts.ClusterSecret) > 0 {
			if _, ok := brokerapi.BrokerID(callerNode(r.Context())); !ok {
				apihttp.WriteError(w, b.refused(api.Errorf(api.CodeNotAuthorized, "%s is for brokers, not %q", r.URL.Path, callerNode(r.Context()))))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authorizeTopics checks op on every topic named.
func (b *Broker) authorizeTopics(ctx context.Context, op auth.Operation, topics []string) error {
	for _, t := range topics {
		if err := b.authorize(ctx, op, auth.ResourceTopic, t); err != nil {
			return err
		}
	}
	return nil
}

// offsetTopics lists the topics of offsets, each once.
func offsetTopics(offs []api.PartitionOffset) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range offs {
		if !seen[o.Topic] {
			seen[o.Topic] = true
			out = append(out, o.Topic)
		}
	}
	return out
}
