package push_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// verifyWebhook checks a delivery as a receiver following the Standard
// Webhooks specification would: the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>", HMAC-SHA256 keyed by the
// base64-decoded part of the secret after "whsec_", sent as
// "v1,<base64>" (several space-separated); the timestamp must be within
// five minutes. Written from the specification, not from the sender.
func verifyWebhook(secret string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q", ts)
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %s is %s off", ts, d)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && subtle.ConstantTimeCompare(got, want) == 1 {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

// request is one request an endpoint received.
type request struct {
	at      time.Time
	header  http.Header
	body    []byte
	status  int
	offset  int64
	part    int32
	attempt int
}

// endpoint is an HTTP server on loopback that records what it gets and
// answers as respond says (200 when respond is nil).
type endpoint struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []request
	respond func(r *http.Request, body []byte) (int, http.Header)
	changed chan struct{}
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{t: t, changed: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	respond := e.respond
	e.mu.Unlock()
	status, hdr := http.StatusOK, http.Header(nil)
	if respond != nil {
		status, hdr = respond(r, body)
	}
	off, _ := strconv.ParseInt(r.Header.Get("sluice-offset"), 10, 64)
	part, _ := strconv.Atoi(r.Header.Get("sluice-partition"))
	att, _ := strconv.Atoi(r.Header.Get("sluice-attempt"))
	e.mu.Lock()
	e.reqs = append(e.reqs, request{at: time.Now(), header: r.Header.Clone(), body: body, status: status, offset: off, part: int32(part), attempt: att})
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
	body = nil
	for k, v := range hdr {
		if k == bodyHeader {
			body = []byte(v[0])
			continue
		}
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// bodyHeader in a respond function's header is the answer's body, not a
// header.
const bodyHeader = "X-Test-Body"

func (e *endpoint) setRespond(f func(r *http.Request, body []byte) (int, http.Header)) {
	e.mu.Lock()
	e.respond = f
	e.mu.Unlock()
}

func (e *endpoint) requests() []request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]request(nil), e.reqs...)
}

// waitFor waits until cond holds of the requests so far.
func (e *endpoint) waitFor(timeout time.Duration, what string, cond func([]request) bool) []request {
	e.t.Helper()
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		reqs := append([]request(nil), e.reqs...)
		ch := e.changed
		e.mu.Unlock()
		if cond(reqs) {
			return reqs
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("endpoint: %s: not after %s (%d requests)", what, timeout, len(reqs))
		}
	}
}

// delivered is the set of (partition, offset) acknowledged with 2xx.
func delivered(reqs []request) map[[2]int64]bool {
	out := map[[2]int64]bool{}
	for _, r := range reqs {
		if r.status/100 == 2 {
			out[[2]int64{int64(r.part), r.offset}] = true
		}
	}
	return out
}

// testCluster is a one-broker cluster and a client of its gateway.
func testCluster(t *testing.T, brokers int) (*embedtest.Cluster, *client.Client) {
	t.Helper()
	tc := embedtest.Start(t, embedtest.Options{Brokers: brokers})
	c, err := client.New(tc.URL)
	if err != nil {
		t.Fatal(err)
	}
	return tc, c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records with values "v<i>" and keys "k<i%keys>"
// (keys 0: no key), and returns how many went to each partition.
func produce(t *testing.T, c *client.Client, topic string, from, n, keys int, value func(i int) []byte) map[int32]int {
	t.Helper()
	counts := map[int32]int{}
	const batch = 500
	for start := from; start < from+n; start += batch {
		var recs []client.Record
		for i := start; i < min(start+batch, from+n); i++ {
			r := client.Record{Value: []byte(fmt.Sprintf("v%d", i))}
			if value != nil {
				r.Value = value(i)
			}
			if keys > 0 {
				r.Key = []byte(fmt.Sprintf("k%d", i%keys))
			}
			recs = append(recs, r)
		}
		offs, err := c.Produce(ctxT(t, 30*time.Second), topic, recs, client.ProduceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offs {
			counts[o.Partition]++
		}
	}
	return counts
}

func createTopic(t *testing.T, c *client.Client, name string, partitions int) {
	t.Helper()
	if _, err := c.CreateTopic(ctxT(t, 30*time.Second), api.CreateTopicRequest{Name: name, Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
}

func createPush(t *testing.T, c *client.Client, cfg api.PushConfig) api.PushSubscription {
	t.Helper()
	sub, err := c.CreatePush(ctxT(t, 30*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sub.Secret, "whsec_") {
		t.Fatalf("create answered secret %q", sub.Secret)
	}
	return sub
}

// waitStatus polls GET /v1/push/{name} until cond holds.
func waitStatus(t *testing.T, c *client.Client, name string, timeout time.Duration, what string, cond func(api.PushStatus) bool) api.PushStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.GetPush(ctxT(t, 10*time.Second), name)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("push %s: %s: not after %s (last: %+v, err %v)", name, what, timeout, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// caughtUp: every partition committed up to its high watermark.
func caughtUp(st api.PushStatus) bool {
	if len(st.Partitions) == 0 {
		return false
	}
	for _, p := range st.Partitions {
		if p.HighWatermark < 0 || p.CommittedOffset != p.HighWatermark {
			return false
		}
	}
	return true
}

// metric reads one sample from the gateway's /metrics (0 when absent).
// series is the name with its labels in sorted order, as Prometheus
// writes them.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
