package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// quotaCluster is a cluster that requires tokens, with topic "q" (one
// partition on one broker, so "per broker" is the whole quota) that alice
// may write and read.
type quotaCluster struct {
	*embedtest.Cluster
	alice string
}

// fetchDebt gives alice a fetch quota of 10,000 B/s and puts her in debt
// (and so knows the broker applies the quota): a fetch of all of q's
// partition 0, then refusals.
func (c quotaCluster) fetchDebt(t *testing.T) {
	t.Helper()
	mustStatus(t, c.URL, bootstrapToken, "PUT", "/v1/quotas", api.Quota{Principal: "User:alice", ConsumerByteRate: 10_000}, http.StatusOK)
	testwait.For(t, 10*time.Second, "a fetch refused over the quota", func() bool {
		status, _, _ := send(t, c.URL, c.alice, "", "GET", "/v1/topics/q/partitions/0/records?offset=0&max_bytes=1000000", nil)
		return status == http.StatusTooManyRequests
	})
}

func startQuotaCluster(t *testing.T) quotaCluster {
	t.Helper()
	auth := gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: auth})
	mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/topics", map[string]any{"name": "q", "partitions": 1, "replication_factor": 1}, http.StatusCreated)
	var tok api.Token
	b := mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/tokens", map[string]any{"principal": "User:alice"}, http.StatusCreated)
	if err := json.Unmarshal(b, &tok); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"WRITE", "READ"} {
		mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/acls", map[string]any{"principal": "User:alice", "resource_type": "topic",
			"resource_name": "q", "operation": op, "permission": "allow"}, http.StatusCreated)
	}
	return quotaCluster{Cluster: c, alice: tok.Token}
}

func mustStatus(t *testing.T, base, token, method, path string, body any, want int) []byte {
	t.Helper()
	status, code, b := call(t, base, token, method, path, body)
	if status != want {
		t.Fatalf("%s %s: %d %s, want %d: %s", method, path, status, code, want, b)
	}
	return b
}

// send makes one request with a token and optional client id and returns
// the status, headers and body.
func send(t *testing.T, base, token, clientID, method, path string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if clientID != "" {
		req.Header.Set(api.HeaderClientID, clientID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// recordsBody is a produce body of n records of size bytes each.
func recordsBody(n, size int) []byte {
	recs := make([]map[string]string, n)
	for i := range recs {
		recs[i] = map[string]string{"value": strings.Repeat("x", size)}
	}
	b, _ := json.Marshal(map[string]any{"records": recs})
	return b
}

// checkThrottled checks a 429 as a client sees it: THROTTLED in the header
// and body, X-Sluice-Throttle-Ms, and Retry-After that rounds it up.
func checkThrottled(t *testing.T, status int, h http.Header, body []byte) time.Duration {
	t.Helper()
	if status != http.StatusTooManyRequests || h.Get(api.HeaderErrorCode) != string(api.CodeThrottled) {
		t.Fatalf("want 429 THROTTLED, got %d %s: %s", status, h.Get(api.HeaderErrorCode), body)
	}
	var e api.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != api.CodeThrottled || !e.Error.Retriable {
		t.Fatalf("body %s: want a retriable THROTTLED error", body)
	}
	ms, err := strconv.ParseInt(h.Get(api.HeaderThrottleMs), 10, 64)
	if err != nil || ms <= 0 || ms > 60_000 {
		t.Fatalf("%s = %q, want a throttle time in ms", api.HeaderThrottleMs, h.Get(api.HeaderThrottleMs))
	}
	ra, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	if err != nil || ra != (ms+999)/1000 {
		t.Fatalf("Retry-After %q for a throttle of %d ms, want %d", h.Get("Retry-After"), ms, (ms+999)/1000)
	}
	return time.Duration(ra) * time.Second
}

// metric reads one sample from a Prometheus text page (0 when absent).
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok && name == series {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestQuotaBurstThrottledThenAdmitted: a burst over a produce quota gets
// 429 THROTTLED with Retry-After and X-Sluice-Throttle-Ms, nothing of the
// refused requests is written, and a request after Retry-After succeeds;
// the same for a request rate set for one client id of the principal.
func TestQuotaBurstThrottledThenAdmitted(t *testing.T) {
	c := startQuotaCluster(t)
	mustStatus(t, c.URL, bootstrapToken, "PUT", "/v1/quotas", api.Quota{Principal: "User:alice", ProducerByteRate: 4000}, http.StatusOK)

	body := recordsBody(1, 1000)
	produced := 0
	var status int
	var h http.Header
	var b []byte
	// The brokers apply the quota when their watch fires: burst until the
	// first refusal (a 4000 B/s quota admits about four of these at once).
	testwait.For(t, 10*time.Second, "a produce refused over the quota", func() bool {
		status, h, b = send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", body)
		if status == http.StatusOK {
			produced++
		}
		return status != http.StatusOK
	})
	retryAfter := checkThrottled(t, status, h, b)
	var pe api.ProduceResponse
	if err := json.Unmarshal(b, &pe); err != nil || len(pe.Offsets) != 1 || pe.Offsets[0].Error != api.CodeThrottled || pe.Offsets[0].Offset != -1 {
		t.Fatalf("the refused record: %s", b)
	}
	// Still in debt: refused again at once.
	status, h, b = send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", body)
	checkThrottled(t, status, h, b)
	// The admin has no quota: not throttled.
	if status, _, b := send(t, c.URL, bootstrapToken, "", "POST", "/v1/topics/q/records", body); status != http.StatusOK {
		t.Fatalf("the admin's produce: %d %s", status, b)
	}
	time.Sleep(retryAfter) // what a client is told to do
	if status, _, b := send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", body); status != http.StatusOK {
		t.Fatalf("after Retry-After (%v): %d %s", retryAfter, status, b)
	}
	produced++
	// Nothing refused was written: the log holds alice's and the admin's.
	var fr api.FetchResponse
	if err := json.Unmarshal(mustStatus(t, c.URL, bootstrapToken, "GET", "/v1/topics/q/partitions/0/records?offset=0&max_records=1000", nil, http.StatusOK), &fr); err != nil {
		t.Fatal(err)
	}
	if len(fr.Records) != produced+1 {
		t.Fatalf("the log holds %d records; %d produces were admitted", len(fr.Records), produced+1)
	}

	// A request rate for alice's client "reader" only: her fetches as
	// "reader" are throttled, the same fetches without it are not.
	mustStatus(t, c.URL, bootstrapToken, "PUT", "/v1/quotas", api.Quota{Principal: "User:alice", ClientID: "reader", RequestRate: 2}, http.StatusOK)
	const fetch = "/v1/topics/q/partitions/0/records?offset=0"
	testwait.For(t, 10*time.Second, "a fetch refused over the request rate", func() bool {
		status, h, b = send(t, c.URL, c.alice, "reader", "GET", fetch, nil)
		return status != http.StatusOK
	})
	retryAfter = checkThrottled(t, status, h, b)
	if status, _, b := send(t, c.URL, c.alice, "", "GET", fetch, nil); status != http.StatusOK {
		t.Fatalf("the same fetch without the client id: %d %s", status, b)
	}
	time.Sleep(retryAfter)
	if status, _, b := send(t, c.URL, c.alice, "reader", "GET", fetch, nil); status != http.StatusOK {
		t.Fatalf("after Retry-After (%v): %d %s", retryAfter, status, b)
	}

	// Both ends count it, per principal.
	if v := metric(t, c.URL+"/metrics", `sluice_gateway_quota_throttled_total{principal="User:alice"}`); v < 3 {
		t.Errorf("gateway: %v throttled answers for alice, want at least 3", v)
	}
	brokerMetrics := "http://" + c.Brokers[0].Addr() + "/metrics"
	if v := metric(t, brokerMetrics, `sluice_broker_quota_throttled_total{kind="produce",principal="User:alice"}`); v < 2 {
		t.Errorf("broker: %v produce refusals for alice, want at least 2", v)
	}
	if v := metric(t, brokerMetrics, `sluice_broker_quota_throttled_total{kind="request",principal="User:alice"}`); v < 1 {
		t.Errorf("broker: %v request refusals for alice, want at least 1", v)
	}
	if v := metric(t, brokerMetrics, `sluice_broker_quota_bytes_total{kind="produce",principal="User:alice"}`); v < float64(produced*1000) {
		t.Errorf("broker: %v produce bytes for alice, want at least %d", v, produced*1000)
	}
}

// TestQuotaNotMultipliedByGateways: two gateways writing for the same
// principal together get no more than its quota, because the broker
// enforces it: the bytes admitted over a window stay within rate × window +
// the burst + one request, where a quota per gateway would admit twice that.
func TestQuotaNotMultipliedByGateways(t *testing.T) {
	c := startQuotaCluster(t)
	gw2, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: c.Store.Session(), Version: "test", OpenAPI: sluice.OpenAPI,
		Auth: gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}})
	if err != nil {
		t.Fatal(err)
	}
	gw2.Start()
	t.Cleanup(func() { gw2.Close() })
	gateways := []string{c.URL, "http://" + gw2.Addr()}
	embedtest.WaitReady(t, gateways[1], 10*time.Second)

	const rate, size = 20_000.0, 5000
	mustStatus(t, c.URL, bootstrapToken, "PUT", "/v1/quotas", api.Quota{Principal: "User:alice", ProducerByteRate: rate}, http.StatusOK)
	body := recordsBody(1, size)
	// Wait for the broker to apply it (the first refusal), then for the
	// debt to be paid: the window starts with at most a full bucket.
	var status int
	var h http.Header
	var b []byte
	testwait.For(t, 10*time.Second, "the quota applied", func() bool {
		status, h, b = send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", body)
		return status != http.StatusOK
	})
	time.Sleep(checkThrottled(t, status, h, b))

	const window = 4 * time.Second
	var admitted [2]atomic.Int64
	var refused [2]atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 4 {
		g := i % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < window {
				status, _, b := send(t, gateways[g], c.alice, "", "POST", "/v1/topics/q/records", body)
				switch status {
				case http.StatusOK:
					admitted[g].Add(size)
				case http.StatusTooManyRequests:
					refused[g].Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					t.Errorf("gateway %d: %d %s", g, status, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := admitted[0].Load() + admitted[1].Load()
	// Record values are a lower bound of the batch bytes the broker counts
	// (batches add their headers), so this bound is stricter than the one
	// the broker keeps. A quarter on top for anything unforeseen; a quota
	// per gateway would admit about 2 × rate × window.
	limit := (rate*(elapsed.Seconds()+1) + size + 100) * 1.25
	t.Logf("admitted %d record bytes in %v through two gateways (%d + %d; refused %d + %d); quota %v B/s, limit %.0f",
		total, elapsed, admitted[0].Load(), admitted[1].Load(), refused[0].Load(), refused[1].Load(), rate, limit)
	if float64(total) > limit {
		t.Errorf("two gateways admitted %d bytes in %v under a quota of %v B/s: more than %.0f", total, elapsed, rate, limit)
	}
	for g := range 2 {
		if admitted[g].Load() == 0 || refused[g].Load() == 0 {
			t.Errorf("gateway %d: %d bytes admitted, %d refusals; want both", g, admitted[g].Load(), refused[g].Load())
		}
	}
	if float64(total) < rate*window.Seconds()*0.3 {
		t.Errorf("only %d bytes admitted in %v under a quota of %v B/s", total, elapsed, rate)
	}
}

// TestWebSocketThrottledSlowsDown: a WebSocket consumer over its fetch
// quota keeps receiving every record, in order, more slowly, and its
// stream is never closed.
func TestWebSocketThrottledSlowsDown(t *testing.T) {
	c := startQuotaCluster(t)
	// One record a batch: a fetch serves whole batches, so with bigger
	// ones each frame of a few records would cost a whole batch of quota.
	const n, size = 30, 1000
	for range n {
		mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/topics/q/records", json.RawMessage(recordsBody(1, size)), http.StatusOK)
	}
	c.fetchDebt(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(c.URL, "http") + "/v1/topics/q/partitions/0/ws?offset=0&credit=1000&max_bytes=4096"
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + c.alice}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	next := int64(0)
	for next < n {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records the stream ended: %v", next, n, err)
		}
		var fr api.FetchResponse
		if typ != websocket.MessageText || json.Unmarshal(b, &fr) != nil || len(fr.Records) == 0 {
			t.Fatalf("frame %v %s", typ, b)
		}
		for _, r := range fr.Records {
			if r.Offset != next {
				t.Fatalf("record %d arrived where %d was due", r.Offset, next)
			}
			next++
		}
	}
	// It waited off its quota rather than failing...
	if v := metric(t, c.URL+"/metrics", `sluice_gateway_quota_stream_wait_seconds_total{principal="User:alice"}`); v <= 0 {
		t.Errorf("the stream never waited for the quota (wait seconds %v)", v)
	}
	// ...and is still open: a short read times out instead of seeing a close.
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer rcancel()
	if _, b, err := conn.Read(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after every record the stream gave %s, %v; want it open and silent", b, err)
	}
}

// TestQuotaRoutes: the config API's answers and checks.
func TestQuotaRoutes(t *testing.T) {
	c := startQuotaCluster(t)
	put := func(token string, q any, want int, code api.Code) {
		t.Helper()
		status, got, b := call(t, c.URL, token, "PUT", "/v1/quotas", q)
		if status != want || got != string(code) {
			t.Fatalf("PUT %v: %d %s, want %d %s: %s", q, status, got, want, code, b)
		}
	}
	put(bootstrapToken, api.Quota{Principal: "User:alice", ProducerByteRate: 1e6}, 200, "")
	put(bootstrapToken, api.Quota{Principal: "<default>", ClientID: "<default>", RequestRate: 100}, 200, "")
	put(bootstrapToken, api.Quota{ClientID: "etl", ConsumerByteRate: 5e5}, 200, "")
	put(c.alice, api.Quota{Principal: "User:alice", ProducerByteRate: 1e9}, 403, api.CodeNotAuthorized)
	put(bootstrapToken, api.Quota{ProducerByteRate: 1}, 400, api.CodeInvalidRequest)
	put(bootstrapToken, api.Quota{Principal: "alice", ProducerByteRate: 1}, 400, api.CodeInvalidRequest)
	put(bootstrapToken, api.Quota{Principal: "User:alice"}, 400, api.CodeInvalidRequest)
	put(bootstrapToken, api.Quota{Principal: "User:alice", RequestRate: -1}, 400, api.CodeInvalidRequest)
	put(bootstrapToken, map[string]any{"principal": "User:alice", "request_rat": 1}, 400, api.CodeInvalidRequest)

	list := func(query string) []api.Quota {
		t.Helper()
		var l api.QuotaList
		if err := json.Unmarshal(mustStatus(t, c.URL, bootstrapToken, "GET", "/v1/quotas"+query, nil, 200), &l); err != nil {
			t.Fatal(err)
		}
		return l.Quotas
	}
	if got := list(""); len(got) != 3 || got[0].ClientID != "etl" || got[1] != (api.Quota{Principal: "<default>", ClientID: "<default>", RequestRate: 100}) {
		t.Fatalf("list: %+v", got)
	}
	if got := list("?principal=User:alice"); len(got) != 1 || got[0].ProducerByteRate != 1e6 {
		t.Fatalf("list for alice: %+v", got)
	}
	if got := list("?principal="); len(got) != 1 || got[0].ClientID != "etl" {
		t.Fatalf("list of entities without a principal: %+v", got)
	}
	if status, code, _ := call(t, c.URL, c.alice, "GET", "/v1/quotas", nil); status != 403 || code != string(api.CodeNotAuthorized) {
		t.Fatalf("alice lists quotas: %d %s", status, code)
	}

	del := func(query string, want int, code api.Code) {
		t.Helper()
		status, got, b := call(t, c.URL, bootstrapToken, "DELETE", "/v1/quotas"+query, nil)
		if status != want || got != string(code) {
			t.Fatalf("DELETE %s: %d %s, want %d %s: %s", query, status, got, want, code, b)
		}
	}
	del("?principal=User:alice", 204, "")
	del("?principal=User:alice", 404, api.CodeUnknownQuota)
	del("?principal=%3Cdefault%3E", 404, api.CodeUnknownQuota) // the entity is <default>/<default>
	del("?principal=%3Cdefault%3E&client_id=%3Cdefault%3E", 204, "")
	del("", 400, api.CodeInvalidRequest)
	if got := list(""); len(got) != 1 {
		t.Fatalf("after the deletes: %+v", got)
	}

	// A client id that is not one is refused on any route.
	status, h, b := send(t, c.URL, c.alice, "bad id!", "GET", "/v1/topics/q", nil)
	if status != 400 || h.Get(api.HeaderErrorCode) != string(api.CodeInvalidRequest) {
		t.Fatalf("a bad client id: %d %s", status, b)
	}
	if status, _, b := send(t, c.URL, c.alice, strings.Repeat("a", 256), "GET", "/v1/topics/q", nil); status != 400 {
		t.Fatalf("a 256-byte client id: %d %s", status, b)
	}
	if status, _, b := send(t, c.URL, c.alice, "bad id!", "GET", "/healthz", nil); status != 200 {
		t.Fatalf("a bad client id on a probe: %d %s", status, b)
	}
}

// TestGroupWebSocketThrottledSlowsDown: a WebSocket group member over its
// fetch quota gets every record, slowed down, and stays a member.
func TestGroupWebSocketThrottledSlowsDown(t *testing.T) {
	c := startQuotaCluster(t)
	mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/acls", map[string]any{"principal": "User:alice", "resource_type": "group",
		"resource_name": "qg", "operation": "READ", "permission": "allow"}, http.StatusCreated)
	const n, size = 30, 1000
	for range n {
		mustStatus(t, c.URL, bootstrapToken, "POST", "/v1/topics/q/records", json.RawMessage(recordsBody(1, size)), http.StatusOK)
	}
	c.fetchDebt(t)
	before := metric(t, c.URL+"/metrics", `sluice_gateway_quota_stream_wait_seconds_total{principal="User:alice"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(c.URL, "http") + "/v1/groups/qg/ws?topics=q&credit=1000&auto_offset_reset=earliest&session_timeout_ms=10000"
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + c.alice}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	next := int64(0)
	for next < n {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records the member's stream ended: %v", next, n, err)
		}
		var f groupFrame
		if err := json.Unmarshal(b, &f); err != nil || f.Error != nil {
			t.Fatalf("frame %s", b)
		}
		for _, r := range f.Records {
			if r.Offset != next {
				t.Fatalf("record %d arrived where %d was due", r.Offset, next)
			}
			next++
		}
	}
	if v := metric(t, c.URL+"/metrics", `sluice_gateway_quota_stream_wait_seconds_total{principal="User:alice"}`); v <= before {
		t.Errorf("the member never waited for the quota (wait seconds %v, before %v)", v, before)
	}
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer rcancel()
	if _, b, err := conn.Read(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after every record the stream gave %s, %v; want it open and silent", b, err)
	}
}

// debtMs reads X-Sluice-Throttle-Ms of a successful answer (0 when absent).
func debtMs(t *testing.T, h http.Header) int64 {
	t.Helper()
	v := h.Get(api.HeaderThrottleMs)
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > 60_000 {
		t.Fatalf("%s = %q on a success, want a throttle time in ms", api.HeaderThrottleMs, v)
	}
	if h.Get("Retry-After") != "" {
		t.Fatalf("a success carries Retry-After %q; nothing is to be retried", h.Get("Retry-After"))
	}
	return ms
}

// TestQuotaDebtReportedOnSuccess: a produce or fetch that is admitted and
// overdraws its quota is answered in full with X-Sluice-Throttle-Ms, as
// Kafka's throttle_time_ms, and the next request within that time is the
// one refused. Requests that leave no debt, and callers without a quota,
// get no such header.
func TestQuotaDebtReportedOnSuccess(t *testing.T) {
	c := startQuotaCluster(t)
	if status, h, b := send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", recordsBody(1, 100)); status != 200 || debtMs(t, h) != 0 {
		t.Fatalf("a produce without a quota: %d, throttle %q: %s", status, h.Get(api.HeaderThrottleMs), b)
	}
	mustStatus(t, c.URL, bootstrapToken, "PUT", "/v1/quotas", api.Quota{Principal: "User:alice", ProducerByteRate: 4000, ConsumerByteRate: 10_000}, http.StatusOK)

	// 20 kB against 4000 B/s with a second of burst: about 4 s of debt,
	// once the broker's watch has the quota.
	big := recordsBody(1, 20_000)
	var debt int64
	testwait.For(t, 10*time.Second, "a produce that overdraws reports its debt", func() bool {
		status, h, b := send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", big)
		if status != 200 {
			t.Fatalf("a produce admitted with a full bucket: %d %s", status, b)
		}
		debt = debtMs(t, h)
		return debt > 0
	})
	if debt < 2000 || debt > 6000 {
		t.Errorf("20 kB over a 4000 B/s quota reported %d ms of debt, want about 4000", debt)
	}
	status, h, b := send(t, c.URL, c.alice, "", "POST", "/v1/topics/q/records", recordsBody(1, 10))
	if wait := checkThrottled(t, status, h, b); wait.Milliseconds() < debt-1000 {
		t.Errorf("refused with Retry-After %v after a reported debt of %d ms", wait, debt)
	}
	if status, h, b := send(t, c.URL, bootstrapToken, "", "POST", "/v1/topics/q/records", big); status != 200 || debtMs(t, h) != 0 {
		t.Fatalf("the admin's produce: %d, throttle %q: %s", status, h.Get(api.HeaderThrottleMs), b)
	}

	// The partition holds over 40 kB: one fetch of it all overdraws
	// 10,000 B/s. The JSON and the raw route report the debt alike.
	const records, batches = "/v1/topics/q/partitions/0/records?offset=0&max_bytes=1000000", "/v1/topics/q/partitions/0/batches?offset=0&max_bytes=1000000"
	testwait.For(t, 10*time.Second, "a JSON fetch that overdraws reports its debt", func() bool {
		status, h, b := send(t, c.URL, c.alice, "", "GET", records, nil)
		if status != 200 {
			t.Fatalf("a fetch admitted with a full bucket: %d %s", status, b)
		}
		debt = debtMs(t, h)
		return debt > 0
	})
	status, h, b = send(t, c.URL, c.alice, "", "GET", batches, nil)
	wait := checkThrottled(t, status, h, b)
	time.Sleep(wait)
	status, h, b = send(t, c.URL, c.alice, "", "GET", batches, nil)
	if status != 200 || debtMs(t, h) == 0 || len(b) < 40_000 {
		t.Fatalf("a raw fetch after Retry-After: %d, throttle %q, %d bytes", status, h.Get(api.HeaderThrottleMs), len(b))
	}
}
