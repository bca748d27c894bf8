package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/quota"
)

// Client quotas are enforced by the brokers (broker/quota.go), per broker,
// so more gateways do not multiply them. The gateway passes on the caller's
// client id, answers a broker's THROTTLED as it came (429 with Retry-After
// and X-Sluice-Throttle-Ms, nothing retried on the caller's behalf), slows
// WebSocket streams down instead of closing them, and serves the quota
// config under /v1/quotas. A successful answer whose request left the
// caller's quota in debt carries the broker's X-Sluice-Throttle-Ms on
// (setDebt), as Kafka's throttle_time_ms, so a client can pause before it
// is refused.

// setDebt sets X-Sluice-Throttle-Ms on a successful answer (not
// Retry-After: nothing is to be retried) when d > 0.
func setDebt(h http.Header, d time.Duration) {
	if d > 0 {
		h.Set(api.HeaderThrottleMs, strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10))
	}
}

// withClientID puts the caller's client id (X-Client-Id, or on the
// WebSocket routes the query parameter client_id, as browsers cannot send
// headers there) in the request context, which every broker call passes
// on. An id that is not 1 to 255 of [a-zA-Z0-9._-] is refused with 400 on
// the /v1/ routes; the others ignore it.
func (g *Gateway) withClientID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r) // probes, metrics, the spec and the dashboard's files
			return
		}
		id := r.Header.Get(api.HeaderClientID)
		if id == "" && r.URL.RawQuery != "" && strings.HasSuffix(r.URL.Path, "/ws") {
			id = r.URL.Query().Get("client_id")
		}
		if id == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !quota.ValidClientID(id) {
			apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "client id %q: want 1 to %d of [a-zA-Z0-9._-]", truncate(id, 64), quota.MaxClientIDLen))
			return
		}
		next.ServeHTTP(w, r.WithContext(brokerapi.WithClientID(r.Context(), id)))
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// fetchQuotaApplies reports whether the caller of ctx has a fetch quota:
// its WebSocket streams then fetch for themselves instead of taking a
// shared tail poll's batches, so the brokers account every byte it reads.
func (g *Gateway) fetchQuotaApplies(ctx context.Context) bool {
	rate, _ := g.quotas.Config().Resolve(auth.PrincipalFrom(ctx), brokerapi.ClientIDFrom(ctx), quota.Fetch)
	return rate > 0
}

// maxStreamThrottle bounds one wait of a throttled stream, so a stream
// notices its client leaving or the gateway closing in good time even
// when a quota was cut hard.
const maxStreamThrottle = 30 * time.Second

// waitThrottled reports whether err is THROTTLED and, if so, waits its
// throttle time (at least 10 ms, at most maxStreamThrottle) or until ctx
// ends: a stream over its quota is slowed down, never closed.
func (g *Gateway) waitThrottled(ctx context.Context, err error) bool {
	return g.waitThrottledUpTo(ctx, err, maxStreamThrottle)
}

// waitThrottledUpTo is waitThrottled waiting at most limit: a group member
// waits no longer than its heartbeat interval, so its next poll (which
// heartbeats) keeps its session however long the throttle.
func (g *Gateway) waitThrottledUpTo(ctx context.Context, err error, limit time.Duration) bool {
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeThrottled {
		return false
	}
	d := min(max(e.Throttle, 10*time.Millisecond), limit, maxStreamThrottle)
	g.quotaStats.streamWait(auth.PrincipalFrom(ctx), d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}

// quotaStats counts, per principal, the THROTTLED answers brokers gave the
// gateway's calls and the time WebSocket streams waited them off. At most
// quota.MaxStatsPrincipals principals are counted by name, the rest as
// quota.OtherPrincipal, so the metric series stay bounded.
type quotaStats struct {
	mu sync.Mutex // guards m; a leaf
	m  map[string]*principalThrottle

	throttled, throttleSeconds, streamWaitSeconds *prometheus.Desc
}

type principalThrottle struct {
	count             int64
	throttle, waiting time.Duration
}

func newQuotaStats() *quotaStats {
	l := []string{"principal"}
	return &quotaStats{m: map[string]*principalThrottle{},
		throttled: prometheus.NewDesc("sluice_gateway_quota_throttled_total",
			"Broker answers THROTTLED (a quota) to calls made for a principal.", l, nil),
		throttleSeconds: prometheus.NewDesc("sluice_gateway_quota_throttle_seconds_total",
			"Throttle time those answers announced, by principal.", l, nil),
		streamWaitSeconds: prometheus.NewDesc("sluice_gateway_quota_stream_wait_seconds_total",
			"Time WebSocket streams waited off their principal's quota.", l, nil),
	}
}

func (s *quotaStats) rowLocked(principal string) *principalThrottle {
	if r, ok := s.m[principal]; ok {
		return r
	}
	if len(s.m) >= quota.MaxStatsPrincipals {
		principal = quota.OtherPrincipal
		if r, ok := s.m[principal]; ok {
			return r
		}
	}
	r := &principalThrottle{}
	s.m[principal] = r
	return r
}

// onThrottle is the broker client's hook: a broker answered THROTTLED.
func (s *quotaStats) onThrottle(ctx context.Context, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rowLocked(auth.PrincipalFrom(ctx))
	r.count++
	r.throttle += d
}

func (s *quotaStats) streamWait(principal string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rowLocked(principal).waiting += d
}

// Describe implements prometheus.Collector.
func (s *quotaStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.throttled
	ch <- s.throttleSeconds
	ch <- s.streamWaitSeconds
}

// Collect implements prometheus.Collector.
func (s *quotaStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	rows := make(map[string]principalThrottle, len(s.m))
	for p, r := range s.m {
		rows[p] = *r
	}
	s.mu.Unlock()
	for p, r := range rows {
		ch <- prometheus.MustNewConstMetric(s.throttled, prometheus.CounterValue, float64(r.count), p)
		ch <- prometheus.MustNewConstMetric(s.throttleSeconds, prometheus.CounterValue, r.throttle.Seconds(), p)
		ch <- prometheus.MustNewConstMetric(s.streamWaitSeconds, prometheus.CounterValue, r.waiting.Seconds(), p)
	}
}
