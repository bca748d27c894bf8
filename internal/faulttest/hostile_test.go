package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// The hostile-input suite against the real binary: one `sluice dev`
// process (a gateway and three brokers) meets each careless or hostile
// client in turn. Every attack asserts the answers a client gets (status
// and error code), and that the process's resident memory (VmRSS from
// /proc) and goroutines (go_goroutines from /metrics) come back to within
// a small margin of where they were before it. The peak of each is logged
// as a table at the end: `go test -v -run TestHostileProcess ./internal/faulttest`
// prints the figures.
//
// The process runs with GOMEMLIMIT, as README advises for production: Go
// returns freed memory to the system lazily, and the limit is what makes
// it do so within seconds of a burst instead of minutes.

const (
	hostileMemLimit = "GOMEMLIMIT=48MiB"
	// rssMargin and goroutineMargin are how far above its pre-attack
	// level the process may stay once an attack is over.
	rssMargin       = 24 << 20
	goroutineMargin = 25
	// hostileBudget is gateway.produce.memory.bytes for the suite.
	hostileBudget = 128 << 20
)

// hostileProc is a `sluice dev` process watched from outside.
type hostileProc struct {
	*DevProcess
	pid     int
	results []attackResult
}

// attackResult is what one attack did to the process.
type attackResult struct {
	name                       string
	baseRSS, peakRSS, afterRSS int64
	baseG, peakG, afterG       int
}

// rss is the process's resident set size in bytes.
func (h *hostileProc) rss(t *testing.T) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.pid))
	if err != nil {
		t.Fatalf("sluice dev is gone: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// goroutines reads go_goroutines from the gateway's /metrics (the whole
// process: the gateway and brokers share one runtime).
func (h *hostileProc) goroutines() (int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(h.URL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, errors.New("no go_goroutines in /metrics")
}

// attack runs f as a subtest, sampling the process's RSS (every 5 ms) and
// goroutines (every 100 ms) while it runs; then it waits for both to come
// back within the margins of their levels before f.
func (h *hostileProc) attack(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		select {
		case <-h.Done():
			t.Fatal("sluice dev is gone")
		default:
		}
		r := attackResult{name: name}
		var err error
		testwait.For(t, 30*time.Second, "a goroutine count", func() bool { r.baseG, err = h.goroutines(); return err == nil })
		r.baseRSS = h.rss(t)
		var peakRSS, peakG atomic.Int64
		peakRSS.Store(r.baseRSS)
		peakG.Store(int64(r.baseG))
		stop, sampled := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.pid)); err == nil {
					if i := bytes.Index(b, []byte("VmRSS:")); i >= 0 {
						var kb int64
						if _, err := fmt.Sscanf(string(b[i+6:]), "%d", &kb); err == nil && kb<<10 > peakRSS.Load() {
							peakRSS.Store(kb << 10)
						}
					}
				}
				if n%20 == 0 {
					if g, err := h.goroutines(); err == nil && int64(g) > peakG.Load() {
						peakG.Store(int64(g))
					}
				}
			}
		}()
		defer func() {
			if t.Failed() {
				r.name += " (FAILED)"
				r.peakRSS, r.peakG = peakRSS.Load(), int(peakG.Load())
				h.results = append(h.results, r)
			}
		}()
		f(t)
		// The attacker leaves: its idle keep-alive connections go too.
		http.DefaultClient.CloseIdleConnections()
		close(stop)
		<-sampled
		r.peakRSS, r.peakG = peakRSS.Load(), int(peakG.Load())
		back := func() bool {
			r.afterRSS = h.rss(t)
			g, err := h.goroutines()
			r.afterG = g
			return err == nil && r.afterRSS <= r.baseRSS+rssMargin && g <= r.baseG+goroutineMargin
		}
		// The gateway's idle connections to brokers (a burst of produces
		// leaves some) close after 30 s.
		for deadline := time.Now().Add(90 * time.Second); !back(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				// The process's goroutines go to the log with its stderr.
				_ = h.Signal(syscall.SIGQUIT)
				<-h.Done()
				t.Fatalf("90 s after the attack: RSS %d MiB (%d before), %d goroutines (%d before)",
					r.afterRSS>>20, r.baseRSS>>20, r.afterG, r.baseG)
			}
		}
		t.Logf("RSS %d → peak %d → %d MiB; goroutines %d → peak %d → %d",
			r.baseRSS>>20, r.peakRSS>>20, r.afterRSS>>20, r.baseG, r.peakG, r.afterG)
		h.results = append(h.results, r)
	})
}

// table is the results as a table.
func (h *hostileProc) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %9s %9s %9s %6s %6s %6s\n", "attack", "RSS MiB", "peak", "after", "gor.", "peak", "after")
	for _, r := range h.results {
		fmt.Fprintf(&b, "%-34s %9.1f %9.1f %9.1f %6d %6d %6d\n", r.name,
			float64(r.baseRSS)/(1<<20), float64(r.peakRSS)/(1<<20), float64(r.afterRSS)/(1<<20), r.baseG, r.peakG, r.afterG)
	}
	return b.String()
}

// hostileAnswer is an HTTP answer.
type hostileAnswer struct {
	status int
	header http.Header
	body   []byte
}

func hostileDo(t *testing.T, method, url, ctype string, body []byte) hostileAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return hostileAnswer{resp.StatusCode, resp.Header, b}
}

// wantCode checks an error answer: status, code in the body and header,
// and Retry-After on a retriable 429 or 503.
func (a hostileAnswer) wantCode(t *testing.T, status int, code api.Code) {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(a.body, &eb); err != nil {
		t.Fatalf("status %d, body is not an error envelope: %.200s", a.status, a.body)
	}
	if a.status != status || eb.Error.Code != code || a.header.Get(api.HeaderErrorCode) != string(code) {
		t.Fatalf("got %d %s (%s), want %d %s", a.status, eb.Error.Code, eb.Error.Message, status, code)
	}
	if spec := api.Lookup(code); spec.Retriable && (status == 429 || status == 503) && a.header.Get("Retry-After") == "" {
		t.Fatalf("%d %s without Retry-After", status, code)
	}
}

// TestHostileProcess is the suite; see the top of the file.
func TestHostileProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev and attacks it for a minute or two")
	}
	const writeTimeout, readTimeout = 2 * time.Second, 15 * time.Second
	// The limits go through the environment, which a binary from before
	// they existed ignores: SLUICE_TEST_BINARY=<an older sluice> runs
	// the same attacks against it (its answers fail the checks, the table
	// still shows what they cost it).
	dataDir := t.TempDir()
	p := StartDevEnv(t, dataDir, []string{hostileMemLimit, "SLUICE_LIMITS=" + strings.Join([]string{
		fmt.Sprintf("%s=%d", api.LimitProduceMemoryBytes, hostileBudget),
		fmt.Sprintf("%s=%d", api.LimitWriteTimeoutMs, writeTimeout.Milliseconds()),
		fmt.Sprintf("%s=%d", api.LimitReadTimeoutMs, readTimeout.Milliseconds()),
	}, ",")})
	h := &hostileProc{DevProcess: p, pid: p.Pid()}
	hostileDo(t, "POST", p.URL+"/v1/topics", "application/json", []byte(`{"name":"t","partitions":4}`))
	waitSettled(t, p.URL, "t")
	// The first group creates __consumer_offsets (8 partitions, their
	// replicas and follower loops): made before the attacks, so that none
	// of them is charged for it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// (A build without group WebSockets, run through SLUICE_TEST_BINARY,
	// has no such topic to make.)
	if wc, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.URL, "http")+"/v1/groups/warm-up/ws?topics=t", nil); err != nil {
		t.Logf("no warm-up group: %v", err)
	} else {
		if _, _, err := wc.Read(ctx); err != nil {
			t.Fatalf("the warm-up member's assignment: %v", err)
		}
		wc.Close(websocket.StatusNormalClosure, "")
		waitSettled(t, p.URL, "__consumer_offsets")
	}
	defer func() { t.Logf("sluice dev under attack:\n%s", h.table()) }()

	h.attack(t, "3,000,000 empty records", func(t *testing.T) { attackRecordCount(t, p.URL) })
	h.attack(t, "strict input", func(t *testing.T) { attackStrictInput(t, p.URL) })
	h.attack(t, "8 concurrent 31 MiB bodies", func(t *testing.T) { attackLargeBodies(t, p.URL) })
	h.attack(t, "slow-loris headers and bodies", func(t *testing.T) { attackSlowLoris(t, h, readTimeout) })

	// 16 MiB in partition 0 of "big": more than the sockets of both ends
	// hold, for the clients that never read.
	hostileDo(t, "POST", p.URL+"/v1/topics", "application/json", []byte(`{"name":"big","partitions":1}`))
	value := strings.Repeat("x", 100<<10)
	for range 16 {
		var body bytes.Buffer
		body.WriteString(`{"records":[`)
		for i := range 10 {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"value":%q}`, value)
		}
		body.WriteString(`]}`)
		if a := hostileDo(t, "POST", p.URL+"/v1/topics/big/records", "application/json", body.Bytes()); a.status != 200 {
			t.Fatalf("producing into big: %d %s", a.status, a.body)
		}
	}
	h.attack(t, "clients that never read", func(t *testing.T) { attackNeverRead(t, h, writeTimeout) })
	h.attack(t, "1,000 idle WebSockets", func(t *testing.T) { attackIdleWebSockets(t, p.URL) })
	h.attack(t, "WebSocket credit -1, 0, 2^63, junk", func(t *testing.T) { attackBadFrames(t, p.URL) })
	h.attack(t, "forged batch to a broker", func(t *testing.T) { attackForgedBatch(t, p.URL) })
	h.attack(t, "acks=0 flood", func(t *testing.T) { attackAcks0(t, p.URL) })
	h.attack(t, "10,000 producer ids", func(t *testing.T) { attackProducerIDs(t, p.URL) })
	rot := prepareRot(t, p.URL, dataDir, 5000)
	h.attack(t, "corrupt objects in the bucket", func(t *testing.T) { attackCorruptObjects(t, p.URL, rot) })
}

// emptyRecordsBody is {"records":[{},{},...]} with n records.
func emptyRecordsBody(n int) []byte {
	b := make([]byte, 0, 14+3*n)
	b = append(b, `{"records":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "{}"...)
	}
	return append(b, "]}"...)
}

// 3,000,000 empty records (9 MB of JSON) once grew the process to over a
// gigabyte; they are refused while the body is scanned.
func attackRecordCount(t *testing.T, base string) {
	const n = 3_000_000
	hostileDo(t, "POST", base+"/v1/topics/t/records", "application/json", emptyRecordsBody(n)).wantCode(t, 413, api.CodeTooManyRecords)
	hostileDo(t, "POST", base+"/v1/topics/t/records", "application/x-ndjson", bytes.Repeat([]byte("{}\n"), n)).wantCode(t, 413, api.CodeTooManyRecords)
}

// The table of careless inputs, each with its answer.
func attackStrictInput(t *testing.T, base string) {
	tests := []struct {
		name, path, ctype, body string
		status                  int
		code                    api.Code
	}{
		{"a topic created as text/plain", "/v1/topics", "text/plain", `{"name":"csrf","partitions":1}`, 415, api.CodeUnsupportedMediaType},
		{"an unknown field", "/v1/topics/t/records", "application/json", `{"records":[{"Value":1}]}`, 400, api.CodeInvalidRecord},
		{"records twice", "/v1/topics/t/records", "application/json", `{"records":[{"value":1}],"records":[{"value":2}]}`, 400, api.CodeInvalidRequest},
		{"a timestamp of 2^62 ms", "/v1/topics/t/records", "application/json", `{"records":[{"value":1,"timestamp":4611686018427387904}]}`, 400, api.CodeInvalidTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hostileDo(t, "POST", base+tt.path, tt.ctype, []byte(tt.body)).wantCode(t, tt.status, tt.code)
		})
	}
	if a := hostileDo(t, "GET", base+"/v1/topics/csrf", "", nil); a.status != 404 {
		t.Fatalf("GET /v1/topics/csrf after a text/plain create: %d", a.status)
	}
}

// Eight bodies just under max.request.bytes at once: each is written or
// refused with 429 and Retry-After, and the produce budget bounds what the
// process holds.
func attackLargeBodies(t *testing.T, base string) {
	var body bytes.Buffer
	body.WriteString(`{"records":[`)
	v := strings.Repeat("x", 1000)
	for i := 0; body.Len() < 31<<20; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"value":"%s"}`, v)
	}
	body.WriteString(`]}`)
	const n = 8
	answers := make([]hostileAnswer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = hostileDo(t, "POST", base+"/v1/topics/t/records?acks=1", "application/json", body.Bytes())
		}()
	}
	wg.Wait()
	written := 0
	for _, a := range answers {
		if a.status == 200 {
			written++
			continue
		}
		a.wantCode(t, 429, api.CodeTooManyRequests)
	}
	t.Logf("%d of %d bodies of %d bytes written, the rest refused with 429", written, n, body.Len())
	if written == 0 {
		t.Fatal("every body was refused")
	}
}

// Slow-loris clients: 100 that send their headers a byte at a time, and
// 100 that declare a 1 MiB body and send a byte of it every 200 ms. Each is
// cut off within gateway.read.timeout.ms (headers within 10 s at most); a
// body cut off is answered 400 INVALID_REQUEST; the produce memory the
// bodies held is given back.
func attackSlowLoris(t *testing.T, h *hostileProc, readTimeout time.Duration) {
	addr := strings.TrimPrefix(h.URL, "http://")
	head := "POST /v1/topics/t/records HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
	type result struct {
		status string
		err    error
		took   time.Duration
	}
	const n = 100
	results := make(chan result, 2*n)
	slow := func(prefix, trickle string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			results <- result{err: err}
			return
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, prefix); err != nil {
			results <- result{err: err}
			return
		}
		// The trickle: one byte every 200 ms until the server gives up
		// (a write fails) or 30 s pass.
		quit := make(chan struct{})
		defer close(quit)
		go func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := conn.Write([]byte{trickle[i%len(trickle)]}); err != nil {
					return
				}
			}
		}()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		results <- result{status: strings.TrimSpace(line), err: err, took: time.Since(start)}
	}
	for range n {
		go slow("POST /v1/topics/t/records HTTP/1.1\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
		go slow(head+`{"records":[`, ` `)
	}
	var answered, closed int
	var slowest time.Duration
	for range 2 * n {
		r := <-results
		slowest = max(slowest, r.took)
		switch {
		case r.status != "":
			if !strings.HasPrefix(r.status, "HTTP/1.1 400") {
				t.Errorf("a slow body got %q", r.status)
			}
			answered++
		case errors.Is(r.err, io.EOF) || errors.Is(r.err, syscall.ECONNRESET):
			closed++
		default:
			t.Errorf("a slow client was not cut off: %v", r.err)
		}
	}
	t.Logf("slow-loris: %d answered 400, %d closed; the last cut off after %v (read timeout %v)", answered, closed, slowest.Round(time.Millisecond), readTimeout)
	if answered < n {
		t.Errorf("%d slow bodies were answered 400, want %d", answered, n)
	}
	testwait.For(t, 10*time.Second, "the produce memory given back", func() bool {
		v, err := scrapeMetric(strings.TrimPrefix(h.URL, "http://"), "sluice_gateway_produce_memory_bytes")
		return err == nil && v == 0
	})
}

// Clients that fetch and never read: 10 raw fetches of each kind, and 10
// WebSockets with credit, from sockets with small receive buffers. The
// gateway cuts each off within the write timeout while the clients still
// hold their ends open; the goroutines serving them are gone before the
// clients close anything.
func attackNeverRead(t *testing.T, h *hostileProc, writeTimeout time.Duration) {
	addr := strings.TrimPrefix(h.URL, "http://")
	reqs := map[string]string{
		"batches":   "GET /v1/topics/big/partitions/0/batches?offset=0&max_bytes=67108864 HTTP/1.1\r\nHost: {host}\r\n\r\n",
		"records":   "GET /v1/topics/big/partitions/0/records?offset=0&max_records=10000&max_bytes=67108864 HTTP/1.1\r\nHost: {host}\r\n\r\n",
		"websocket": "GET /v1/topics/big/partitions/0/ws?offset=0&credit=100000&format=binary HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
	}
	type namedConn struct {
		net.Conn
		name string
	}
	var conns []namedConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for name, req := range reqs {
		for range 10 {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, namedConn{conn, name})
			if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(conn, strings.ReplaceAll(req, "{host}", addr)); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
			if err != nil || (!strings.Contains(line, " 200 ") && !strings.Contains(line, " 101 ")) {
				t.Fatalf("%s: status line %q, %v", name, line, err)
			}
		}
	}
	// The gateway closes its end of each (its socket leaves ESTABLISHED),
	// though the client holds its own open and reads nothing; the
	// goroutines serving them go (checked when the attack ends).
	start := time.Now()
	_, gwPort, _ := net.SplitHostPort(addr)
	open := func() []string {
		var names []string
		for _, c := range conns {
			_, cPort, _ := net.SplitHostPort(c.LocalAddr().String())
			if tcpState(t, gwPort, cPort) == tcpEstablished {
				names = append(names, c.name)
			}
		}
		return names
	}
	deadline := time.Now().Add(10*writeTimeout + 20*time.Second)
	for still := open(); len(still) > 0; still = open() {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's end of never-reading clients' connections still open: %v", still)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("30 never-reading clients cut off %v after their first bytes (write timeout %v)", time.Since(start).Round(time.Millisecond), writeTimeout)
}

const tcpEstablished = "01"

// tcpState is the state (as /proc/net/tcp writes it: 01 established, 04
// FIN-WAIT-1, ...) of the loopback socket with local port local and remote
// port remote, "" when there is none.
func tcpState(t *testing.T, local, remote string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	hexPort := func(p string) string {
		n, _ := strconv.Atoi(p)
		return fmt.Sprintf("%04X", n)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && strings.HasSuffix(f[1], ":"+hexPort(local)) && f[2] == "0100007F:"+hexPort(remote) {
			return f[3]
		}
	}
	return ""
}

// 1,000 idle WebSockets without credit (the per-IP limit's worth): all
// admitted, the next refused with 429 before the upgrade; closing them
// frees what they held.
func attackIdleWebSockets(t *testing.T, base string) {
	const n = api.DefaultWSMaxConnectionsPerIP
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "ws" + strings.TrimPrefix(base, "http") + "/v1/topics/t/partitions/0/ws?offset=latest"
	conns := make([]*websocket.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	for len(conns) < n {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatalf("WebSocket %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	addr := strings.TrimPrefix(base, "http://")
	if v, err := scrapeMetric(addr, "sluice_gateway_ws_connections"); err != nil || v != n {
		t.Fatalf("sluice_gateway_ws_connections %v, %v; want %d", v, err, n)
	}
	_, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil || resp == nil {
		t.Fatalf("WebSocket %d was admitted: %v", n+1, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hostileAnswer{resp.StatusCode, resp.Header, b}.wantCode(t, 429, api.CodeTooManyRequests)
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	conns = nil
	testwait.For(t, 30*time.Second, "every WebSocket closed", func() bool {
		v, err := scrapeMetric(addr, "sluice_gateway_ws_connections")
		return err == nil && v == 0
	})
}

// Credit frames that are not {"credit":N} with 0 < N <= 2^40 close the
// stream and the group member with 1008.
func attackBadFrames(t *testing.T, base string) {
	frames := []struct {
		name string
		typ  websocket.MessageType
		body string
	}{
		{"credit -1", websocket.MessageText, `{"credit":-1}`},
		{"credit 0", websocket.MessageText, `{"credit":0}`},
		{"credit 2^63", websocket.MessageText, `{"credit":9223372036854775808}`},
		{"junk", websocket.MessageText, "\x00\xffjunk"},
		{"binary", websocket.MessageBinary, `{"credit":5}`},
	}
	routes := map[string]string{
		"stream": "/v1/topics/t/partitions/0/ws?offset=latest",
		"group":  "/v1/groups/hostile/ws?topics=t",
	}
	for route, path := range routes {
		for _, f := range frames {
			t.Run(route+"/"+f.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer c.CloseNow()
				if err := c.Write(ctx, f.typ, []byte(f.body)); err != nil {
					t.Fatal(err)
				}
				for {
					_, b, err := c.Read(ctx)
					if err != nil {
						if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
							t.Fatalf("close status %d (%v), want 1008", got, err)
						}
						return
					}
					if !strings.Contains(string(b), `"assignment"`) {
						t.Fatalf("unexpected frame %s", b)
					}
				}
			})
		}
	}
}

// A batch whose CRC is right but whose record count is not, sent straight
// to the leader's internal produce route: 400 CORRUPT_RECORD, nothing
// appended, and the partition's consumers read on.
func attackForgedBatch(t *testing.T, base string) {
	var tp api.Topic
	if err := getJSON(base+"/v1/topics/t", &tp); err != nil {
		t.Fatal(err)
	}
	var ci api.ClusterInfo
	if err := getJSON(base+"/v1/cluster", &ci); err != nil {
		t.Fatal(err)
	}
	leader := ""
	for _, b := range ci.Brokers {
		if b.ID == tp.Partitions[0].Leader {
			leader = b.Address
		}
	}
	if leader == "" {
		t.Fatalf("no address for leader %d in %+v", tp.Partitions[0].Leader, ci.Brokers)
	}
	batch, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`"a"`)}, {Value: []byte(`"b"`)}, {Value: []byte(`"c"`)}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Record count 4 and last offset delta 3, over three records; the CRC
	// (of everything after it) made to match.
	binary.BigEndian.PutUint32(batch[57:], 4)
	binary.BigEndian.PutUint32(batch[23:], 3)
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
	end := tp.Partitions[0].LogEndOffset
	for range 100 {
		hostileDo(t, "POST", "http://"+leader+"/internal/v1/partitions/t/0/produce?acks=1", api.ContentTypeBatches, batch).wantCode(t, 400, api.CodeCorruptRecord)
	}
	if a := hostileDo(t, "POST", base+"/v1/topics/t/records", "application/json", []byte(`{"records":[{"value":"after","partition":0}]}`)); a.status != 200 {
		t.Fatalf("produce after the forged batches: %d %s", a.status, a.body)
	}
	var fr api.FetchResponse
	if err := getJSON(fmt.Sprintf("%s/v1/topics/t/partitions/0/records?offset=%d", base, end), &fr); err != nil {
		t.Fatal(err)
	}
	if len(fr.Records) != 1 || string(fr.Records[0].Value) != `"after"` || fr.Records[0].Offset != end {
		t.Fatalf("read from %d after the forged batches: %+v", end, fr.Records)
	}
}

// An acks=0 flood: 40 clients each send 50 requests of 4 partitions' worth
// of records without waiting for the cluster. Every request is answered,
// every record is written, and the goroutines come back.
func attackAcks0(t *testing.T, base string) {
	const clients, each = 40, 50
	var tp api.Topic
	if err := getJSON(base+"/v1/topics/t", &tp); err != nil {
		t.Fatal(err)
	}
	before := int64(0)
	for _, p := range tp.Partitions {
		before += p.LogEndOffset
	}
	body := []byte(`{"records":[{"value":0,"partition":0},{"value":1,"partition":1},{"value":2,"partition":2},{"value":3,"partition":3}]}`)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if a := hostileDo(t, "POST", base+"/v1/topics/t/records?acks=0", "application/json", body); a.status != 200 {
					t.Errorf("acks=0: %d %s", a.status, a.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	testwait.For(t, 60*time.Second, "every acks=0 record written", func() bool {
		var tp api.Topic
		if err := getJSON(base+"/v1/topics/t", &tp); err != nil {
			return false
		}
		n := int64(0)
		for _, p := range tp.Partitions {
			n += p.HighWatermark
		}
		return n-before == 4*clients*each
	})
}

// 10,000 producer ids, 16 requests at a time: each is a coordinator write.
func attackProducerIDs(t *testing.T, base string) {
	const n, workers = 10_000, 16
	var next atomic.Int64
	ids := make([]int64, n)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				a := hostileDo(t, "POST", base+"/v1/producers", "application/json", nil)
				var pr api.ProducerIdentity
				if a.status != 201 || json.Unmarshal(a.body, &pr) != nil {
					t.Errorf("POST /v1/producers: %d %s", a.status, a.body)
					return
				}
				ids[i] = pr.ProducerID
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	seen := make(map[int64]bool, n)
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("producer id %d issued twice", id)
		}
		seen[id] = true
	}
	t.Logf("%d producer ids in %v (%.0f a second)", n, took.Round(time.Millisecond), n/took.Seconds())
}
