package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// The tests in this file play careless and hostile clients against the
// produce path and the JSON routes: each asserts the status and error code,
// and, where the attack is about memory or goroutines, that they stay
// bounded.

// startGateway starts one more gateway on c's coordinator with opts (the
// listener and coordinator filled in). The function it returns closes it;
// the test's end does too, if it is still open.
func startGateway(t *testing.T, c *embedtest.Cluster, opts gateway.Options) (client, func() error) {
	t.Helper()
	sess := c.Store.Session()
	opts.Addr, opts.Coord = "127.0.0.1:0", sess
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	gw, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	var once sync.Once
	var closeErr error
	closeGW := func() error {
		once.Do(func() {
			closeErr = gw.Close()
			_ = sess.Close() // a session's Close never fails
		})
		return closeErr
	}
	t.Cleanup(func() { _ = closeGW() }) // tests that judge the close call closeGW themselves
	base := "http://" + gw.Addr()
	embedtest.WaitReady(t, base, 10*time.Second)
	return client{t: t, base: base}, closeGW
}

// wantError checks an error answer's status, code (body and header) and,
// for 429 and retriable 503s, Retry-After.
func wantError(t *testing.T, status int, h http.Header, body []byte, wantStatus int, code api.Code) {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("status %d, body is not an error envelope: %.200s", status, body)
	}
	if status != wantStatus || eb.Error.Code != code || h.Get(api.HeaderErrorCode) != string(code) {
		t.Fatalf("got %d %s (%s), want %d %s", status, eb.Error.Code, eb.Error.Message, wantStatus, code)
	}
	if spec := api.Lookup(code); spec.Retriable && (spec.Status == 429 || spec.Status == 503) && h.Get("Retry-After") == "" {
		t.Fatalf("%s without Retry-After", code)
	}
}

// metric reads one unlabelled sample from the gateway's /metrics.
func (c client) metric(name string) float64 {
	c.t.Helper()
	status, _, b := c.do("GET", "/metrics", "", nil)
	if status != 200 {
		c.t.Fatalf("/metrics: %d", status)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				c.t.Fatal(err)
			}
			return f
		}
	}
	c.t.Fatalf("/metrics has no %s", name)
	return 0
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, d, what, cond)
}

// allocatedDuring is how many bytes the process allocated while f ran.
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// emptyRecords is a JSON body of n empty records, {"records":[{},{},...]}.
func emptyRecords(n int) []byte {
	b := make([]byte, 0, 14+3*n)
	b = append(b, `{"records":[`...)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "{}"...)
	}
	return append(b, "]}"...)
}

// Millions of empty records are refused while the body is scanned, before a
// record table is built for them; the allocation during the request stays
// near the body's size (it was over a gigabyte).
func TestHostileRecordCount(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 3)
	const n = 3_000_000
	tests := []struct {
		name, ctype string
		body        []byte
	}{
		{"json", "application/json", emptyRecords(n)},
		{"ndjson", "application/x-ndjson", bytes.Repeat([]byte("{}\n"), n)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var status int
			var h http.Header
			var b []byte
			alloc := allocatedDuring(func() { status, h, b = c.do("POST", "/v1/topics/t/records?acks=1", tt.ctype, tt.body) })
			wantError(t, status, h, b, 413, api.CodeTooManyRecords)
			t.Logf("%d empty records (%d bytes): %d MiB allocated", n, len(tt.body), alloc>>20)
			if alloc > 192<<20 {
				t.Fatalf("%d MiB allocated for a %d-byte body refused for its record count", alloc>>20, len(tt.body))
			}
		})
	}
	t.Run("at the limit", func(t *testing.T) {
		status, _, b := c.do("POST", "/v1/topics/t/records?acks=1", "application/json", emptyRecords(api.DefaultMaxRecordsPerRequest))
		if status != 200 {
			t.Fatalf("%d %.200s", status, b)
		}
		var pr api.ProduceResponse
		if err := json.Unmarshal(b, &pr); err != nil || len(pr.Offsets) != api.DefaultMaxRecordsPerRequest {
			t.Fatalf("%d offsets, %v", len(pr.Offsets), err)
		}
	})
}

// An NDJSON body of nothing but newlines costs no record slot per line.
func TestHostileNewlines(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 1)
	body := bytes.Repeat([]byte("\n"), api.DefaultMaxRequestBytes-1)
	var status int
	var h http.Header
	var b []byte
	alloc := allocatedDuring(func() { status, h, b = c.do("POST", "/v1/topics/t/records", "application/x-ndjson", body) })
	wantError(t, status, h, b, 400, api.CodeInvalidRequest)
	t.Logf("%d newlines: %d MiB allocated", len(body), alloc>>20)
	if alloc > 192<<20 {
		t.Fatalf("%d MiB allocated for %d newlines", alloc>>20, len(body))
	}
}

func headersJSON(n int, dup bool) string {
	var b strings.Builder
	b.WriteString(`{"records":[{"value":1,"headers":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"h%d":"v"`, i)
	}
	if dup {
		b.WriteString(`,"h0":"again"`)
	}
	b.WriteString(`}}]}`)
	return b.String()
}

// Strict produce bodies: unknown fields (field names are case-sensitive),
// repeated fields and header names, too many headers; nothing of a refused
// request is written.
func TestHostileStrictProduceJSON(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 2)
	tests := []struct {
		name, ctype, body string
		status            int
		code              api.Code
	}{
		{"unknown record field", "application/json", `{"records":[{"Value":1}]}`, 400, api.CodeInvalidRecord},
		{"unknown body field", "application/json", `{"records":[{"value":1}],"Records":[]}`, 400, api.CodeInvalidRequest},
		{"records twice", "application/json", `{"records":[{"value":1}],"records":[{"value":2}]}`, 400, api.CodeInvalidRequest},
		{"value twice", "application/json", `{"records":[{"value":1,"value":2}]}`, 400, api.CodeInvalidRecord},
		{"value twice, escaped", "application/json", `{"records":[{"value":1,"\u0076alue":2}]}`, 400, api.CodeInvalidRecord},
		{"key twice", "application/json", `{"records":[{"key":"a","value":1,"key":"b"}]}`, 400, api.CodeInvalidRecord},
		{"producer_id twice", "application/json", `{"records":[{"value":1}],"producer_id":1,"producer_id":2}`, 400, api.CodeInvalidRequest},
		{"sequence twice", "application/json", `{"records":[{"value":1,"partition":0}],"producer_id":1,"producer_epoch":0,"sequences":{"0":0,"0":1}}`, 400, api.CodeInvalidRequest},
		{"more sequences than partitions", "application/json", `{"records":[{"value":1,"partition":0}],"producer_id":1,"producer_epoch":0,"sequences":{"0":0,"1":0,"2":0}}`, 400, api.CodeInvalidRequest},
		{"ndjson unknown field", "application/x-ndjson", "{\"value\":1}\n{\"Value\":1}\n", 400, api.CodeInvalidRecord},
		{"ndjson value twice", "application/x-ndjson", "{\"value\":1,\"value\":2}\n", 400, api.CodeInvalidRecord},
		{"header twice", "application/json", headersJSON(2, true), 400, api.CodeInvalidRecord},
		{"header not a string", "application/json", `{"records":[{"value":1,"headers":{"a":1}}]}`, 400, api.CodeInvalidRecord},
		{"too many headers", "application/json", headersJSON(api.DefaultMaxHeadersPerRecord+1, false), 400, api.CodeInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, b := c.do("POST", "/v1/topics/t/records", tt.ctype, []byte(tt.body))
			wantError(t, status, h, b, tt.status, tt.code)
		})
	}
	for p := 0; p < 2; p++ {
		if r := c.fetch("t", p, "offset=0"); len(r.Records) != 0 {
			t.Fatalf("partition %d holds %d records after refused produces", p, len(r.Records))
		}
	}
	if status, _, b := c.do("POST", "/v1/topics/t/records", "application/json", []byte(headersJSON(api.DefaultMaxHeadersPerRecord, false))); status != 200 {
		t.Fatalf("a record with max.headers.per.record headers: %d %.200s", status, b)
	}
}

// Record timestamps are refused past message.timestamp.after.max.ms (one
// hour ahead by default) and before.max.ms (no limit by default).
func TestHostileTimestamps(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 1)
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "recent", Partitions: 1, Configs: map[string]string{
		api.ConfigTimestampBeforeMaxMs: "3600000", api.ConfigTimestampAfterMaxMs: "60000",
	}}, nil)
	now := time.Now().UnixMilli()
	hour := time.Hour.Milliseconds()
	tests := []struct {
		name, topic string
		ts          int64
		status      int
		code        api.Code
	}{
		{"2^62", "t", 1 << 62, 400, api.CodeInvalidTimestamp},
		{"two hours ahead", "t", now + 2*hour, 400, api.CodeInvalidTimestamp},
		{"ten minutes ahead", "t", now + 10*60_000, 200, ""},
		{"1970", "t", 1, 200, ""},
		{"now", "t", 0, 200, ""},
		{"ten minutes ahead, after.max.ms one minute", "recent", now + 10*60_000, 400, api.CodeInvalidTimestamp},
		{"two hours old, before.max.ms one hour", "recent", now - 2*hour, 400, api.CodeInvalidTimestamp},
		{"a minute old", "recent", now - 60_000, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"records":[{"value":1,"timestamp":%d}]}`, tt.ts)
			status, h, b := c.do("POST", "/v1/topics/"+tt.topic+"/records", "application/json", []byte(body))
			if tt.status == 200 {
				if status != 200 {
					t.Fatalf("%d %s", status, b)
				}
				return
			}
			wantError(t, status, h, b, tt.status, tt.code)
		})
	}
	if got := len(c.fetch("t", 0, "offset=0").Records); got != 3 {
		t.Fatalf("topic t holds %d records, want the 3 accepted", got)
	}
	status, h, b := c.do("POST", "/v1/topics", "application/json", []byte(`{"name":"u","configs":{"message.timestamp.after.max.ms":"-1"}}`))
	wantError(t, status, h, b, 400, api.CodeInvalidConfig)
}

// Every route that takes a JSON body refuses any other media type with 415
// and does nothing: a page on another origin can send a form or text/plain
// body without asking, but not JSON.
func TestHostileMediaTypes(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	c := client{t: t, base: tc.URL}
	c.createTopic("t", 1)
	topic := []byte(`{"name":"csrf","partitions":1}`)
	for _, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		status, h, b := c.do("POST", "/v1/topics", ct, topic)
		wantError(t, status, h, b, 415, api.CodeUnsupportedMediaType)
	}
	if status, _, _ := c.do("GET", "/v1/topics/csrf", "", nil); status != 404 {
		t.Fatalf("GET /v1/topics/csrf after refused creates: %d", status)
	}
	for _, ct := range []string{"text/plain", ""} {
		status, h, b := c.do("POST", "/v1/producers", ct, []byte(`{}`))
		wantError(t, status, h, b, 415, api.CodeUnsupportedMediaType)
		status, h, b = c.do("POST", "/v1/producers", ct, nil)
		wantError(t, status, h, b, 415, api.CodeUnsupportedMediaType)
	}
	if status, _, b := c.do("POST", "/v1/producers", "application/json; charset=utf-8", nil); status != 201 {
		t.Fatalf("POST /v1/producers, JSON, empty: %d %s", status, b)
	}
	status, h, b := c.do("POST", "/v1/producers", "application/json", []byte(`{"producerid":7}`))
	wantError(t, status, h, b, 400, api.CodeInvalidRequest)
	status, h, b = c.do("POST", "/v1/topics", "application/json", []byte(`{"name":"two","partitions":1}{"name":"three"}`))
	wantError(t, status, h, b, 400, api.CodeInvalidRequest)

	// Every POST route the router serves, but the one without a body.
	bodiless := map[string]bool{"/v1/groups/{group}/members/{member}/heartbeat": true}
	params := strings.NewReplacer("{topic}", "t", "{group}", "g", "{member}", "m", "{name}", "n")
	var n int
	err := chi.Walk(tc.Gateway.Routes().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method != "POST" || bodiless[route] {
			return nil
		}
		n++
		t.Run(route, func(t *testing.T) {
			status, h, b := c.do("POST", params.Replace(route), "text/plain", []byte(`{}`))
			wantError(t, status, h, b, 415, api.CodeUnsupportedMediaType)
		})
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("walked %d POST routes: %v", n, err)
	}
}

// pipeRequest starts a produce whose body the test writes, with an optional
// declared length, and returns the writer and the answer's channel.
func pipeRequest(t *testing.T, base, path string, declared int64) (*io.PipeWriter, <-chan *http.Response) {
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", base+path, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = declared
	answer := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // handed over on answer; its receiver closes the body
		if err != nil {
			pr.CloseWithError(err)
			answer <- nil
			return
		}
		answer <- resp
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	return pw, answer
}

// The produce memory budget: a body that could never fit is refused before
// it is read; one that does not fit while another request holds the budget
// is refused with 429 and Retry-After, and fits once that request is done;
// a declared Content-Length is not allocated before the bytes arrive.
func TestHostileProduceMemoryBudget(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	client{t: t, base: tc.URL}.createTopic("t", 1)
	const budget = 10 << 20
	c, _ := startGateway(t, tc, gateway.Options{MaxBodyBytes: 12 << 20, Limits: gateway.Limits{ProduceMemoryBytes: budget}})
	used := func() float64 { return c.metric("sluice_gateway_produce_memory_bytes") }

	t.Run("never fits", func(t *testing.T) {
		pw, answer := pipeRequest(t, c.base, "/v1/topics/t/records", budget+1) //nolint:bodyclose // closed below, once it arrives
		// The write fails once the gateway refuses the body.
		go func() { _, _ = pw.Write([]byte(`{"records":[`)) }()
		resp := <-answer
		if resp == nil {
			t.Fatal("no answer while the body was still owed")
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		wantError(t, resp.StatusCode, resp.Header, b, 413, api.CodeRequestTooLarge)
	})

	t.Run("declared, not sent", func(t *testing.T) {
		pw, answer := pipeRequest(t, c.base, "/v1/topics/t/records", 8<<20) //nolint:bodyclose // closed below, once it arrives
		if _, err := pw.Write([]byte(`{"records":[`)); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "the gateway started reading", func() bool { return used() > 0 })
		for i := 0; i < 20; i++ {
			if u := used(); u > 64<<10 {
				t.Fatalf("%v bytes held for a body that declared 8 MiB and sent 12 bytes", u)
			}
			time.Sleep(5 * time.Millisecond)
		}
		pw.CloseWithError(io.ErrUnexpectedEOF)
		if resp := <-answer; resp != nil {
			resp.Body.Close()
		}
		waitUntil(t, 10*time.Second, "the budget is given back", func() bool { return used() == 0 })
	})

	t.Run("busy", func(t *testing.T) {
		// A holds 8 of the 10 MiB: 5 MiB of white space has arrived, and
		// its buffer doubled to 8 MiB to take it.
		pw, answer := pipeRequest(t, c.base, "/v1/topics/t/records", -1) //nolint:bodyclose // closed below, once it arrives
		go func() {
			// A failed write fails request A, which the test checks.
			_, _ = pw.Write([]byte(`{"records":[{"value":"a"}]`))
			_, _ = pw.Write(bytes.Repeat([]byte(" "), 5<<20))
		}()
		waitUntil(t, 10*time.Second, "request A holds 8 MiB", func() bool { return used() >= 8<<20 })

		b3 := append(append([]byte(`{"records":[{"value":"b"}]`), bytes.Repeat([]byte(" "), 3<<20)...), '}')
		status, h, b := c.do("POST", "/v1/topics/t/records", "application/json", b3)
		wantError(t, status, h, b, 429, api.CodeTooManyRequests)
		if h.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q", h.Get("Retry-After"))
		}

		go func() {
			// A failed write fails request A, which the test checks.
			_, _ = pw.Write([]byte(`}`))
			pw.Close()
		}()
		resp := <-answer
		if resp == nil || resp.StatusCode != 200 {
			t.Fatalf("request A: %v", resp)
		}
		resp.Body.Close()
		waitUntil(t, 10*time.Second, "the budget is given back", func() bool { return used() == 0 })
		if status, _, b := c.do("POST", "/v1/topics/t/records", "application/json", b3); status != 200 {
			t.Fatalf("B once A is done: %d %s", status, b)
		}
		if got := c.metric("sluice_gateway_produce_memory_refused_total"); got < 1 {
			t.Fatalf("refused_total %v", got)
		}
	})
}

// Several large bodies at once: some are refused with 429, the heap stays
// within a bound set by the budget, and the budget is all given back.
func TestHostileConcurrentLargeBodies(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	client{t: t, base: tc.URL}.createTopic("t", 1)
	const budget = 32 << 20
	c, _ := startGateway(t, tc, gateway.Options{Limits: gateway.Limits{ProduceMemoryBytes: budget}})

	// 8 MiB: 8,000 records of 1,000-byte values.
	var body bytes.Buffer
	body.WriteString(`{"records":[`)
	v := strings.Repeat("x", 1000)
	for i := 0; i < 8000; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"value":"%s"}`, v)
	}
	body.WriteString(`]}`)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()

	const n = 12
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, h, b := c.do("POST", "/v1/topics/t/records?acks=1", "application/json", body.Bytes())
			statuses[i] = status
			if status != 200 {
				wantError(t, status, h, b, 429, api.CodeTooManyRequests)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base)
	t.Logf("%d concurrent %d-byte bodies, budget %d MiB: statuses %v, heap grew %d MiB at most", n, body.Len(), budget>>20, statuses, grew>>20)
	ok := 0
	for _, s := range statuses {
		if s == 200 {
			ok++
		}
	}
	if ok == 0 {
		t.Fatal("every request was refused")
	}
	// The body (shared by the clients), the gateway's budget, the broker's
	// copies of admitted batches, and the collector's headroom over all of
	// it (GOGC=100) come to about 170 MiB; without the budget (1 TiB)
	// twelve requests grow the heap by over 500 MiB.
	if grew > 288<<20 {
		t.Fatalf("heap grew by %d MiB with a %d MiB produce budget", grew>>20, budget>>20)
	}
	waitUntil(t, 10*time.Second, "the budget is given back", func() bool { return c.metric("sluice_gateway_produce_memory_bytes") == 0 })
}

// An acks=0 flood: at most gateway.acks0.max.in.flight sends run in the
// background, every record is still written (the rest are sent before the
// answer), and Close waits for the background sends.
func TestHostileAcks0Flood(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	c0 := client{t: t, base: tc.URL}
	c0.createTopic("t", 4)
	const slots = 2
	c, closeGW := startGateway(t, tc, gateway.Options{Limits: gateway.Limits{Acks0MaxInFlight: slots}})

	var maxInFlight atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v := int64(c.metric("sluice_gateway_acks0_sends_in_flight")); v > maxInFlight.Load() {
				maxInFlight.Store(v)
			}
		}
	}()
	const requests = 40
	body := []byte(`{"records":[{"value":0,"partition":0},{"value":1,"partition":1},{"value":2,"partition":2},{"value":3,"partition":3}]}`)
	var wg sync.WaitGroup
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, b := c.do("POST", "/v1/topics/t/records?acks=0", "application/json", body)
			if status != 200 {
				t.Errorf("acks=0: %d %s", status, b)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if m := maxInFlight.Load(); m > slots {
		t.Fatalf("%d acks=0 sends in flight at once, limit %d", m, slots)
	}
	written := func() int {
		n := 0
		for p := 0; p < 4; p++ {
			n += len(c0.fetch("t", p, "offset=0&max_records=1000").Records)
		}
		return n
	}
	waitUntil(t, 20*time.Second, "every acks=0 record is written", func() bool { return written() == 4*requests })

	// Close waits for background sends: none is left running after it.
	// A connection that never sends a request (an HTTP client's spare one)
	// does not hold it past its deadline.
	c.do("POST", "/v1/topics/t/records?acks=0", "application/json", body)
	silent, err := net.Dial("tcp", strings.TrimPrefix(c.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := closeGW(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "sendAcks0") {
		t.Fatalf("an acks=0 send outlived Gateway.Close:\n%s", stacks)
	}
}
