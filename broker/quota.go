package broker

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/quota"
)

// Client quotas (quota package) are enforced here, where the bytes are: a
// principal's rates are per broker, as in Kafka, so the number of gateways
// in front changes nothing. A request over quota is refused before it does
// anything, with THROTTLED (429) and the throttle time, which the gateway
// passes on. Requests no client is behind (replication, other brokers,
// probes) are not accounted.

// quotaCaller is who a request is accounted to: the principal it acts for
// (callerPrincipal, verified by nodeAuth) and the client id the gateway
// passed on (not covered by the node signature: a node that could forge it
// could forge the principal too); ok is false for requests made on no
// client's behalf: node principals, such as a follower's fetches
// (Node:broker:<id>) and the shared tail polls of a gateway's WebSocket
// streams (Node:gateway), whose streams account their own fetches.
func quotaCaller(r *http.Request) (principal, clientID string, ok bool) {
	principal = callerPrincipal(r.Context())
	if brokerapi.IsNodePrincipal(principal) {
		return "", "", false
	}
	clientID = r.Header.Get(api.HeaderClientID)
	if !quota.ValidClientID(clientID) {
		clientID = ""
	}
	return principal, clientID, true
}

// throttleRequests applies request_rate to every internal request made on
// a client's behalf. It does not wrap the ResponseWriter (sendfile).
func (b *Broker) throttleRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/internal/") {
			next.ServeHTTP(w, r)
			return
		}
		if p, c, ok := quotaCaller(r); ok {
			if d := b.quotas.enforcer.Admit(p, c, quota.Request, 1); d > 0 {
				apihttp.WriteError(w, throttled(p, "request_rate", d))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// admitProduce takes n batch bytes from the caller's produce quota, or
// returns THROTTLED with nothing taken.
func (b *Broker) admitProduce(r *http.Request, n int) error {
	p, c, ok := quotaCaller(r)
	if !ok {
		return nil
	}
	if d := b.quotas.enforcer.Admit(p, c, quota.Produce, int64(n)); d > 0 {
		return throttled(p, "producer_byte_rate", d)
	}
	return nil
}

// admitFetch refuses a consumer fetch while the caller's fetch quota is in
// debt. What the fetch serves is charged after (chargeFetch): its size is
// known only then, so one fetch may overdraw the quota, and the next ones
// wait the debt off, Kafka's throttle.
func (b *Broker) admitFetch(r *http.Request) error {
	p, c, ok := quotaCaller(r)
	if !ok {
		return nil
	}
	if d := b.quotas.enforcer.Admit(p, c, quota.Fetch, 0); d > 0 {
		return throttled(p, "consumer_byte_rate", d)
	}
	return nil
}

// chargeFetch takes the bytes a consumer fetch served from its caller's quota.
func (b *Broker) chargeFetch(r *http.Request, n int64) {
	if p, c, ok := quotaCaller(r); ok && n > 0 {
		b.quotas.enforcer.Charge(p, c, quota.Fetch, n)
	}
}

// markDebt sets X-Sluice-Throttle-Ms on a successful answer whose request
// left one of the caller's quotas of kinds in debt: the longest wait before
// it is admitted again. The answer is given in full; the client learns to
// pause before its next request, which would be refused until then.
func (b *Broker) markDebt(h http.Header, r *http.Request, kinds ...quota.Kind) {
	p, c, ok := quotaCaller(r)
	if !ok {
		return
	}
	var d time.Duration
	for _, k := range kinds {
		d = max(d, b.quotas.enforcer.Debt(p, c, k))
	}
	if d > 0 {
		h.Set(api.HeaderThrottleMs, strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10))
	}
}

func throttled(principal, rate string, d time.Duration) error {
	return &api.Error{Code: api.CodeThrottled, Throttle: d,
		Message: principal + " is over its " + rate + " quota on this broker; retry in " + d.String()}
}

// brokerQuotas is a broker's copy of the quotas and their enforcement.
type brokerQuotas struct {
	store    *quota.Store // watched; started by Start, closed by Close
	enforcer *quota.Enforcer
}
