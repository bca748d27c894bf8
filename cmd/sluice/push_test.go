package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// hookRequest is one request an endpoint received.
type hookRequest struct {
	header http.Header
	body   []byte
}

// hookServer is an endpoint that acknowledges every request (the test
// event with 202 and a body) and keeps them.
type hookServer struct {
	srv *httptest.Server

	mu   sync.Mutex // guards reqs
	reqs []hookRequest
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.reqs = append(h.reqs, hookRequest{header: r.Header.Clone(), body: body})
		h.mu.Unlock()
		if r.Header.Get("ce-type") == "sluice.push.test" {
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "got the test\n")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// last is the last request whose ce-type is typ.
func (h *hookServer) last(typ string) (hookRequest, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.reqs) - 1; i >= 0; i-- {
		if h.reqs[i].header.Get("ce-type") == typ {
			return h.reqs[i], true
		}
	}
	return hookRequest{}, false
}

// signedBy reports whether one of r's webhook-signature entries is the
// Standard Webhooks signature of r under secret (whsec_<base64 key>).
func signedBy(r hookRequest, secret string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.header.Get("webhook-id") + "." + r.header.Get("webhook-timestamp") + "."))
	mac.Write(r.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(r.header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

var secretLine = regexp.MustCompile(`(?m)^secret: (whsec_\S+)  \(shown once: store it now\)$`)

// TestPushFromTheCLI creates a subscription to a real endpoint, waits for
// its records to be delivered, and checks what describe, test and rotate
// print: owners and lag, the endpoint's answer, and secrets that sign the
// requests.
func TestPushFromTheCLI(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	t.Setenv("SLUICE_URL", c.URL)
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := runAs(t, "", stdin, args...)
		if code != 0 {
			t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	hook := newHookServer(t)
	mustRun("", "topics", "create", "orders", "-p", "2")
	mustRun("1\n2\n3\n4\n5\n6\n", "produce", "orders", "--json")

	out := mustRun("", "push", "create", "fn", "--topic", "orders", "--endpoint", hook.srv.URL+"/fn", "--format", "binary")
	m := secretLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("push create printed no secret line:\n%s", out)
	}
	secret := m[1]

	// Every record is delivered: each partition's committed offset
	// reaches its high watermark (6 records in all), and a pusher owns it.
	waitUntil(t, c.URL, func(ctx context.Context, cl *client.Client) error {
		st, err := cl.GetPush(ctx, "fn")
		if err != nil {
			return err
		}
		if len(st.Partitions) != 2 {
			return fmt.Errorf("%d partitions, want 2", len(st.Partitions))
		}
		var records int64
		for _, p := range st.Partitions {
			if p.CommittedOffset != p.HighWatermark || p.Owner == "" {
				return fmt.Errorf("not all delivered yet: %+v", p)
			}
			records += p.HighWatermark
		}
		if records != 6 {
			return fmt.Errorf("%d records in the partitions, want 6", records)
		}
		return nil
	})
	rec, ok := hook.last("sluice.record")
	if !ok || !signedBy(rec, secret) {
		t.Fatalf("the secret push create printed does not sign the deliveries (a delivery: %v)", ok)
	}
	var st api.PushStatus
	if err := json.Unmarshal([]byte(mustRun("", "push", "describe", "fn", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	out = mustRun("", "push", "describe", "fn")
	for _, p := range st.Partitions {
		row := regexp.MustCompile(fmt.Sprintf(`(?m)^orders +%d +%d +%d +0 +0s +0 +0 +- +%s$`, p.Partition, p.CommittedOffset, p.HighWatermark, regexp.QuoteMeta(p.Owner)))
		if !row.MatchString(out) {
			t.Fatalf("push describe has no row for %+v:\n%s", p, out)
		}
	}
	if !strings.HasPrefix(out, "push subscription fn: active\n") {
		t.Fatalf("push describe:\n%s", out)
	}

	// push test: the endpoint's answer, signed with the current secret.
	out = mustRun("", "push", "test", "fn")
	for _, want := range []string{"status:    202\n", "verdict:   delivered\n", "response:  got the test\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("push test: no %q in\n%s", want, out)
		}
	}
	if r, ok := hook.last("sluice.push.test"); !ok || !signedBy(r, secret) {
		t.Fatalf("the test event is not signed with the secret (sent: %v)", ok)
	}

	// push rotate: the new secret signs the next request; the old one too,
	// during the grace.
	out = mustRun("", "push", "rotate", "fn", "--grace-seconds", "60")
	m = secretLine.FindStringSubmatch(out)
	if m == nil || m[1] == secret {
		t.Fatalf("push rotate printed no new secret:\n%s", out)
	}
	var res client.PushTestResult
	if err := json.Unmarshal([]byte(mustRun("", "push", "test", "fn", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusAccepted || res.Verdict != "delivered" {
		t.Fatalf("push test -o json: %+v", res)
	}
	if r, ok := hook.last("sluice.push.test"); !ok || !signedBy(r, m[1]) || !signedBy(r, secret) {
		t.Fatalf("after a rotation the test event is not signed with both secrets (sent: %v)", ok)
	}

	// An endpoint nobody listens at: no answer, unreachable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/gone"
	ln.Close()
	mustRun("", "push", "create", "dead", "--topic", "orders", "--endpoint", closed, "--start", "latest")
	out = mustRun("", "push", "test", "dead")
	if !strings.Contains(out, "status:    none (no answer)\n") || !strings.Contains(out, "verdict:   unreachable\n") {
		t.Fatalf("push test of a closed port:\n%s", out)
	}
	if code, _, errOut := runAs(t, "", "", "push", "test", "nope"); code != 1 || !strings.Contains(errOut, "UNKNOWN_SUBSCRIPTION") {
		t.Fatalf("push test of an unknown subscription: exit %d, %s", code, errOut)
	}
	mustRun("", "push", "delete", "dead")
	mustRun("", "push", "delete", "fn")
}
