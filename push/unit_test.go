package push

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// The Standard Webhooks specification's example: this secret, id,
// timestamp and body sign to this value.
func TestSignMatchesTheSpecificationExample(t *testing.T) {
	s, err := newSigner([]Secret{{Key: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		t.Fatal(err)
	}
	got := s.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}

// During a rotation's grace both secrets sign; after it only the new one.
func TestRotationSignsWithBothUntilTheGraceEnds(t *testing.T) {
	old, _ := NewSecret()
	fresh, _ := NewSecret()
	now := time.Now()
	secrets := Rotate([]Secret{{Key: old}}, fresh, now, time.Hour)
	s, err := newSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(s.sign("id", now, []byte("b")))); n != 2 {
		t.Fatalf("%d signatures during the grace, want 2", n)
	}
	if n := len(strings.Fields(s.sign("id", now.Add(2*time.Hour), []byte("b")))); n != 1 {
		t.Fatalf("%d signatures after the grace, want 1", n)
	}
	if again := Rotate(secrets, "whsec_AAAA", now.Add(2*time.Hour), time.Hour); len(again) != 2 {
		t.Fatalf("a rotation after the grace keeps %d secrets, want the new and the one before it", len(again))
	}
	if none := Rotate([]Secret{{Key: old}}, fresh, now, 0); len(none) != 1 {
		t.Fatalf("a rotation without grace keeps %d secrets", len(none))
	}
}

// judged is judge of an answer with this status, header and body.
func judged(status int, header http.Header, body string, now time.Time, batch bool) outcome {
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(body))}
	return judge(resp, nil, now, batch) //nolint:bodyclose // judge closes it
}

func TestJudge(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		err    error
		want   verdict
		after  time.Duration
	}{
		{"200", 200, nil, nil, delivered, 0},
		{"204", 204, nil, nil, delivered, 0},
		{"400", 400, nil, nil, refused, 0},
		{"413", 413, nil, nil, refused, 0},
		{"415", 415, nil, nil, refused, 0},
		{"422", 422, nil, nil, refused, 0},
		{"409", 409, nil, nil, refused, 0},
		{"401 is the endpoint's", 401, nil, nil, unreachable, 0},
		{"403 is the endpoint's", 403, nil, nil, unreachable, 0},
		{"404 is the endpoint's", 404, nil, nil, unreachable, 0},
		{"408", 408, nil, nil, unreachable, 0},
		{"500", 500, nil, nil, unreachable, 0},
		{"503 without Retry-After", 503, nil, nil, unreachable, 0},
		{"503 with Retry-After", 503, http.Header{"Retry-After": {"7"}}, nil, throttled, 7 * time.Second},
		{"429", 429, nil, nil, throttled, 0},
		{"429 with a date", 429, http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, nil, throttled, 90 * time.Second},
		{"429 with garbage", 429, http.Header{"Retry-After": {"soon"}}, nil, throttled, 0},
		{"410", 410, nil, nil, gone, 0},
		{"302 is not followed", 302, http.Header{"Location": {"/x"}}, nil, unreachable, 0},
		{"no answer", 0, nil, context.DeadlineExceeded, unreachable, 0},
	} {
		var o outcome
		if tc.err != nil {
			o = judge(nil, tc.err, now, false)
		} else {
			o = judged(tc.status, tc.header, "", now, false)
		}
		if o.verdict != tc.want || o.retryAfter != tc.after {
			t.Errorf("%s: %v after %s, want %v after %s", tc.name, o.verdict, o.retryAfter, tc.want, tc.after)
		}
	}
	o := judged(200, nil, `{"batchItemFailures":[{"itemIdentifier":"7"},{"itemIdentifier":9}]}`, now, true)
	if o.verdict != delivered || !o.failed[7] || !o.failed[9] || len(o.failed) != 2 {
		t.Fatalf("partial batch answer: %+v", o)
	}
	big := judged(500, nil, strings.Repeat("x", 10000), now, false)
	if len(big.excerpt) != excerptBytes {
		t.Fatalf("excerpt of %d bytes, want %d", len(big.excerpt), excerptBytes)
	}
}

// The gate tells a record's failure from an outage by whether anything
// succeeded since the record was sent, and lets one probe out at a time.
func TestGateOutageAndProbe(t *testing.T) {
	g := newGate(time.Millisecond, 5*time.Millisecond, 0)
	ctx := context.Background()
	a, _ := g.acquire(ctx)
	b, _ := g.acquire(ctx)
	if counts := g.report(a, outcome{verdict: unreachable}, time.Second); counts {
		t.Fatal("a failure with nothing succeeding since counted as an attempt")
	}
	if !g.backingOff() {
		t.Fatal("not backing off after a failure")
	}
	p1, err := g.acquire(ctx)
	if err != nil || !p1.probe {
		t.Fatalf("after the backoff: %+v %v, want a probe", p1, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.acquire(short); err == nil {
		t.Fatal("a second request went out while the probe was in flight")
	}
	g.report(p1, outcome{verdict: delivered}, time.Second)
	if g.backingOff() {
		t.Fatal("still backing off after the probe succeeded")
	}
	// b was sent before the success: its failure now counts.
	if counts := g.report(b, outcome{verdict: unreachable}, time.Second); !counts {
		t.Fatal("a failure after another request succeeded did not count")
	}
	c, _ := g.acquire(ctx)
	if counts := g.report(c, outcome{verdict: refused, status: 422}, time.Second); !counts {
		t.Fatal("a 422 did not count")
	}
	d, _ := g.acquire(ctx)
	if counts := g.report(d, outcome{verdict: throttled, retryAfter: time.Hour}, 50*time.Millisecond); counts {
		t.Fatal("a 429 counted")
	}
	began := time.Now()
	if _, err := g.acquire(ctx); err != nil || time.Since(began) < 40*time.Millisecond {
		t.Fatalf("after Retry-After capped at 50 ms the next request went after %s", time.Since(began))
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	for n := 1; n < 40; n++ {
		d := backoff(100*time.Millisecond, time.Second, n)
		if d < 10*time.Millisecond || d > time.Second {
			t.Fatalf("backoff(%d) = %s", n, d)
		}
	}
}

func TestNormalize(t *testing.T) {
	base := api.PushConfig{Name: "s", Topics: []string{"b", "a", "b"}, Endpoint: "https://fn.example/hook"}
	c, err := Normalize(base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Format != api.PushFormatBinary || c.Ordering != api.PushOrderPartition || c.MaxInFlight != 1 || c.TimeoutMs != 30000 ||
		c.Retry.MaxAttempts != 10 || c.DeadLetter.Topic != "s.dlt" || c.Start != "earliest" || c.Batch.MaxRecords != 1 ||
		c.Outage.DisableAfterMs != 72*3600*1000 || strings.Join(c.Topics, ",") != "a,b" {
		t.Fatalf("defaults: %+v", c)
	}
	for name, mut := range map[string]func(*api.PushConfig){
		"no topics":         func(c *api.PushConfig) { c.Topics = nil },
		"internal topic":    func(c *api.PushConfig) { c.Topics = []string{"__consumer_offsets"} },
		"ftp endpoint":      func(c *api.PushConfig) { c.Endpoint = "ftp://x/" },
		"credentials":       func(c *api.PushConfig) { c.Endpoint = "https://u:p@x/" },
		"no host":           func(c *api.PushConfig) { c.Endpoint = "https:///x" },
		"bad name":          func(c *api.PushConfig) { c.Name = "a/b" },
		"bad format":        func(c *api.PushConfig) { c.Format = "xml" },
		"bad ordering":      func(c *api.PushConfig) { c.Ordering = "global" },
		"bad start":         func(c *api.PushConfig) { c.Start = "yesterday" },
		"raw batches":       func(c *api.PushConfig) { c.Format, c.Batch.MaxRecords = api.PushFormatRaw, 10 },
		"key batches":       func(c *api.PushConfig) { c.Ordering, c.Batch.MaxRecords = api.PushOrderKey, 10 },
		"huge batch":        func(c *api.PushConfig) { c.Batch.MaxRecords = 5000 },
		"tiny timeout":      func(c *api.PushConfig) { c.TimeoutMs = 5 },
		"backoff inverted":  func(c *api.PushConfig) { c.Retry.MinBackoffMs, c.Retry.MaxBackoffMs = 5000, 10 },
		"dlt is a source":   func(c *api.PushConfig) { c.DeadLetter.Topic = "a" },
		"negative rate":     func(c *api.PushConfig) { c.Rate.MaxPerSecond = -1 },
		"in flight too big": func(c *api.PushConfig) { c.Ordering, c.MaxInFlight = api.PushOrderKey, 5000 },
	} {
		c := base
		c.Topics = append([]string(nil), base.Topics...)
		mut(&c)
		if _, err := Normalize(c); api.Classify(err).Code != api.CodeInvalidRequest && api.Classify(err).Code != api.CodeInvalidTopicName {
			t.Errorf("%s: %v, want INVALID_REQUEST", name, err)
		}
	}
	p, err := Patch(c, []byte(`{"ordering":"key","endpoint":"https://other.example/"}`))
	if err != nil || p.Ordering != api.PushOrderKey || p.MaxInFlight != DefaultMaxInFlight || p.Endpoint != "https://other.example/" || p.Topics[0] != "a" {
		t.Fatalf("patch: %+v %v", p, err)
	}
	if _, err := Patch(c, []byte(`{"name":"other"}`)); err == nil {
		t.Fatal("a patch renamed the subscription")
	}
	if _, err := Patch(c, []byte(`{"endpont":"https://typo.example/"}`)); err == nil {
		t.Fatal("a patch with an unknown field was accepted")
	}
	if p, err := Patch(c, []byte(`{"ordering":"key","max_in_flight":4}`)); err != nil || p.MaxInFlight != 4 {
		t.Fatalf("ordering and max_in_flight in one patch: %d %v", p.MaxInFlight, err)
	}
}

func TestAttemptsMetadataRoundTrip(t *testing.T) {
	m := map[int64]attemptState{7: {attempts: 3, firstMs: 1000}, 9: {attempts: 1, firstMs: 2000}}
	s := encodeAttempts(m)
	if len(s) > api.MaxCommitMetadataBytes {
		t.Fatalf("metadata of %d bytes", len(s))
	}
	back := decodeAttempts(s)
	if back[7] != m[7] || back[9] != m[9] || len(back) != 2 || HeadAttempts(s, 7) != 3 || HeadAttempts(s, 8) != 0 {
		t.Fatalf("round trip: %v from %s", back, s)
	}
	many := map[int64]attemptState{}
	for i := range int64(500) {
		many[1_000_000_000_000+i] = attemptState{attempts: 1000, firstMs: 1_700_000_000_000}
	}
	if s := encodeAttempts(many); len(s) > api.MaxCommitMetadataBytes {
		t.Fatalf("500 entries encode to %d bytes, past the commit metadata bound", len(s))
	}
	if len(decodeAttempts("garbage")) != 0 || len(decodeAttempts(`{"v":2,"r":[[1,1,1]]}`)) != 0 {
		t.Fatal("unreadable metadata read as history")
	}
}
