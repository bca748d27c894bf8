package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// Careless and hostile WebSocket and fetch clients: idle connections by the
// thousand, bad credit frames, clients that never read or never answer a
// ping, too many connections, and a gateway shutting down under them.

// streamGateway starts a second gateway with the given stream limits on a
// cluster that has the topic "hostile" (4 partitions); it is closed when
// the test ends unless the test closed it.
func streamGateway(t *testing.T, lim gateway.StreamLimits) (client, *gateway.Gateway) {
	t.Helper()
	c := embedtest.Start(t, embedtest.Options{})
	cl := client{t: t, base: c.URL}
	cl.createTopic("hostile", 4)
	sess := c.Store.Session()
	gw, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: sess, Streams: lim, OffsetsTopicPartitions: 4,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	t.Cleanup(func() {
		_ = gw.Close()
		_ = sess.Close()
	})
	base := "http://" + gw.Addr()
	embedtest.WaitReady(t, base, 10*time.Second)
	return client{t: t, base: base}, gw
}

// testLog sends the gateway's log lines to t.Log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func wsURL(base, path string) string { return "ws" + strings.TrimPrefix(base, "http") + path }

// dialStream opens a WebSocket with coder/websocket and keeps reading it in
// the background (so pings are answered), until the test ends.
func dialStream(t *testing.T, base, path string) (*websocket.Conn, <-chan error) {
	t.Helper()
	c, ended, err := openStream(base, path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, ended
}

// openStream is dialStream without the cleanup: the caller closes c; ended
// gets the error that ended reading.
func openStream(base, path string) (c *websocket.Conn, ended <-chan error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err = websocket.Dial(ctx, wsURL(base, path), nil)
	if err != nil {
		return nil, nil, err
	}
	e := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				e <- err
				return
			}
		}
	}()
	return c, e, nil
}

// gauge reads one unlabelled sample from the gateway's /metrics.
func gauge(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, d, what, cond)
}

// settle runs the collector until goroutines stop falling and returns their
// count and the live heap.
func settle() (goroutines int, heap uint64) {
	var ms runtime.MemStats
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

// waitGoroutines waits for the goroutine count to come back within slack
// of base.
func waitGoroutines(t *testing.T, base, slack int, d time.Duration) {
	t.Helper()
	err := testwait.Until(d, func() error {
		if n := runtime.NumGoroutine(); n > base+slack {
			return fmt.Errorf("%d goroutines, %d before (slack %d)", n, base, slack)
		}
		return nil
	})
	if err != nil {
		buf := make([]byte, 1<<20)
		t.Fatalf("%v\n%s", err, buf[:runtime.Stack(buf, true)])
	}
}

// 1,000 idle WebSockets, half with credit at the partitions' end and half
// with none, cost a bounded amount each; once closed, goroutines and heap
// come back to where they started.
func TestWSIdleThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a thousand WebSockets; the full lane runs it")
	}
	const n = 1000
	cl, _ := streamGateway(t, gateway.StreamLimits{MaxConnectionsPerIP: n})
	g0, h0 := settle()

	conns := make([]*websocket.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close(websocket.StatusNormalClosure, "")
		}
		conns = nil
	}
	defer closeAll()
	for i := range n {
		credit := 0
		if i%2 == 0 {
			credit = 100
		}
		c, _, err := openStream(cl.base, fmt.Sprintf("/v1/topics/hostile/partitions/%d/ws?offset=latest&credit=%d", i%4, credit))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	waitFor(t, 10*time.Second, "1,000 connections counted", func() bool { return gauge(t, cl.base, "sluice_gateway_ws_connections") == n })
	g1, h1 := settle()
	// Both ends are in this process: the figure is an upper bound for the
	// gateway's share (cmd/sluice bench ws measures the gateway alone).
	t.Logf("%d idle WebSockets (client and server ends, and the brokers' long polls for the half with credit): %d goroutines, %.1f KiB heap per connection",
		n, g1-g0, float64(int64(h1)-int64(h0))/n/1024)

	closeAll()
	waitFor(t, 10*time.Second, "connections gone", func() bool { return gauge(t, cl.base, "sluice_gateway_ws_connections") == 0 })
	waitGoroutines(t, g0, 20, 40*time.Second)
	_, h2 := settle()
	t.Logf("heap: %d KiB before, %d KiB with %d connections, %d KiB after they closed", h0>>10, h1>>10, n, h2>>10)
	// What stays is the runtime's free goroutine descriptors (it keeps
	// them for reuse) and idle broker connections: under 4 KiB for each
	// connection that was open.
	if h2 > h0+4<<20 {
		t.Fatalf("heap %d KiB after closing, %d KiB before", h2>>10, h0>>10)
	}
}

// Credit frames that are not {"credit":N} with 0 < N <= 2^40 close the
// stream, and the group member, with 1008.
func TestWSBadCreditFrames(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	frames := []struct {
		name string
		typ  websocket.MessageType
		body string
	}{
		{"credit -1", websocket.MessageText, `{"credit":-1}`},
		{"credit 0", websocket.MessageText, `{"credit":0}`},
		{"credit 2^63", websocket.MessageText, `{"credit":9223372036854775808}`},
		{"credit 2^40+1", websocket.MessageText, `{"credit":1099511627777}`},
		{"credit 1.5", websocket.MessageText, `{"credit":1.5}`},
		{"credit as a string", websocket.MessageText, `{"credit":"5"}`},
		{"junk", websocket.MessageText, `hello`},
		{"empty", websocket.MessageText, ``},
		{"binary", websocket.MessageBinary, `{"credit":5}`},
	}
	routes := map[string]string{
		"stream": "/v1/topics/hostile/partitions/0/ws?offset=latest",
		"group":  "/v1/groups/hostile-g/ws?topics=hostile",
	}
	for route, path := range routes {
		for _, f := range frames {
			t.Run(route+"/"+f.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, _, err := websocket.Dial(ctx, wsURL(cl.base, path), nil)
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
	waitFor(t, 10*time.Second, "every connection ended", func() bool { return gauge(t, cl.base, "sluice_gateway_ws_connections") == 0 })
}

// rawConn opens a TCP connection with a small receive buffer, sends req
// and reads the response head; the caller then never reads again.
func rawConn(t *testing.T, base, req string) net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, strings.ReplaceAll(req, "{host}", addr)); err != nil {
		t.Fatal(err)
	}
	return conn
}

const wsUpgrade = "GET %s HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// readHead reads an HTTP response head and returns its status line.
func readHead(t *testing.T, conn net.Conn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()
	var head []byte
	b := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := conn.Read(b); err != nil {
			t.Fatalf("response head %q: %v", head, err)
		}
		head = append(head, b[0])
	}
	line, _, _ := strings.Cut(string(head), "\r\n")
	return line
}

// A client that stops reading is disconnected within the write timeout,
// whether it fetches batches or records or streams over a WebSocket; its
// handler's goroutine and buffers go with it.
func TestClientThatNeverReads(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long fault test; the full lane runs it")
	}
	// Long enough that a loaded machine (the race detector, other builds)
	// still finds the handler blocked in its write after reading the head.
	const writeTimeout = 3 * time.Second
	cl, _ := streamGateway(t, gateway.StreamLimits{WriteTimeout: writeTimeout})
	// 16 MiB in partition 0: more than the socket buffers of both ends hold.
	value := strings.Repeat("x", 100<<10)
	for range 16 {
		recs := make([]map[string]any, 10)
		for i := range recs {
			recs[i] = map[string]any{"value": value, "partition": 0}
		}
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": recs}, nil)
	}
	g0, _ := settle()
	cases := []struct {
		name, req, handler string
	}{
		{"batches", "GET /v1/topics/hostile/partitions/0/batches?offset=0&max_bytes=67108864 HTTP/1.1\r\nHost: {host}\r\n\r\n", "handleFetchBatches"},
		{"records", "GET /v1/topics/hostile/partitions/0/records?offset=0&max_records=10000&max_bytes=67108864 HTTP/1.1\r\nHost: {host}\r\n\r\n", "handleFetchRecords"},
		{"websocket json", fmt.Sprintf(wsUpgrade, "/v1/topics/hostile/partitions/0/ws?offset=0&credit=100000"), "handleWebSocket"},
		{"websocket binary", fmt.Sprintf(wsUpgrade, "/v1/topics/hostile/partitions/0/ws?offset=0&credit=100000&format=binary"), "handleWebSocket"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := rawConn(t, cl.base, tc.req)
			if line := readHead(t, conn); !strings.Contains(line, " 200 ") && !strings.Contains(line, " 101 ") {
				t.Fatalf("status line %q", line)
			}
			// The handler blocks in a write (the client's buffers are
			// full) until the write deadline closes the connection,
			// although the client holds its end open.
			if !handlerRunning(tc.handler) {
				t.Fatalf("%s is not running: the response fit in the socket buffers", tc.handler)
			}
			start := time.Now()
			waitFor(t, 10*writeTimeout, tc.handler+" ended", func() bool { return !handlerRunning(tc.handler) })
			took := time.Since(start)
			t.Logf("%s ended %s after its response head was read", tc.handler, took.Round(time.Millisecond))
			waitGoroutines(t, g0, 5, 10*writeTimeout)
			if got := gauge(t, cl.base, "sluice_gateway_ws_connections"); got != 0 {
				t.Fatalf("%v WebSocket connections open", got)
			}
		})
	}
}

// handlerRunning reports whether a goroutine runs the gateway handler name.
func handlerRunning(name string) bool {
	buf := make([]byte, 16<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "gateway.(*Gateway)."+name+"(")
}

// A client that does not answer pings is disconnected after the idle
// timeout; one that answers stays connected without credit.
func TestWSUnansweredPings(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{PingInterval: 100 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	_, ended := dialStream(t, cl.base, "/v1/topics/hostile/partitions/0/ws?offset=latest")
	deaf := rawConn(t, cl.base, fmt.Sprintf(wsUpgrade, "/v1/topics/hostile/partitions/1/ws?offset=latest"))
	if line := readHead(t, deaf); !strings.Contains(line, " 101 ") {
		t.Fatalf("status line %q", line)
	}
	waitFor(t, 10*time.Second, "the deaf client disconnected", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_unanswered_pings_total") == 1 && gauge(t, cl.base, "sluice_gateway_ws_connections") == 1
	})
	// Several ping intervals later the answering client is still there.
	time.Sleep(time.Second)
	select {
	case err := <-ended:
		t.Fatalf("the answering client was disconnected: %v", err)
	default:
	}
	if got := gauge(t, cl.base, "sluice_gateway_ws_connections"); got != 1 {
		t.Fatalf("%v connections, want 1", got)
	}
	// The deaf client's connection was closed: reading it ends in EOF after
	// whatever pings it never read.
	deaf.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, deaf); err != nil {
		t.Fatalf("deaf connection: %v, want EOF", err)
	}
}

// dialFrom dials the gateway's WebSocket at path from a loopback source
// address ip, returning the HTTP response when the upgrade is refused.
func dialFrom(ip, base, path string) (*websocket.Conn, *http.Response, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return websocket.Dial(ctx, wsURL(base, path), &websocket.DialOptions{HTTPClient: hc})
}

// Past gateway.ws.max.connections.per.ip or gateway.ws.max.connections an
// upgrade is refused with 429 TOO_MANY_REQUESTS and Retry-After, before it
// happens (and, for a group, before a member joins); a closed connection
// frees its place.
func TestWSConnectionLimits(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{MaxConnections: 3, MaxConnectionsPerIP: 2})
	stream := "/v1/topics/hostile/partitions/0/ws?offset=latest"
	group := "/v1/groups/limited/ws?topics=hostile"
	var open []*websocket.Conn
	for _, ip := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"} {
		c, _, err := dialFrom(ip, cl.base, stream)
		if err != nil {
			t.Fatalf("from %s: %v", ip, err)
		}
		defer c.CloseNow()
		open = append(open, c)
	}
	refused := []struct {
		name, ip, path, msg string
	}{
		{"per ip, stream", "127.0.0.1", stream, api.LimitWSMaxConnectionsPerIP},
		{"per ip, group", "127.0.0.1", group, api.LimitWSMaxConnectionsPerIP},
		{"per gateway, stream", "127.0.0.3", stream, api.LimitWSMaxConnections},
		{"per gateway, group", "127.0.0.3", group, api.LimitWSMaxConnections},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := dialFrom(tc.ip, cl.base, tc.path)
			if err == nil {
				c.CloseNow()
				t.Fatal("upgraded")
			}
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(api.HeaderErrorCode) != string(api.CodeTooManyRequests) ||
				resp.Header.Get("Retry-After") == "" {
				t.Fatalf("refusal %+v (%v)", resp, err)
			}
		})
	}
	if status, _, b := cl.do("GET", "/v1/groups/limited", "", nil); status != http.StatusNotFound {
		t.Fatalf("a refused WebSocket joined: %d %s", status, b)
	}
	if got := gauge(t, cl.base, "sluice_gateway_ws_refused_total"); got != 4 {
		t.Fatalf("refused_total %v, want 4", got)
	}
	open[0].Close(websocket.StatusNormalClosure, "")
	waitFor(t, 10*time.Second, "a place freed", func() bool {
		c, _, err := dialFrom("127.0.0.1", cl.base, stream)
		if err == nil {
			c.CloseNow()
		}
		return err == nil
	})
}

// Gateway.Close closes every WebSocket, stream and group member, with 1001
// (going away), returns, and leaves none of their goroutines behind.
func TestWSCloseGoingAway(t *testing.T) {
	cl, gw := streamGateway(t, gateway.StreamLimits{})
	g0, _ := settle()
	_, streamEnded := dialStream(t, cl.base, "/v1/topics/hostile/partitions/0/ws?offset=latest&credit=10")
	_, idleEnded := dialStream(t, cl.base, "/v1/topics/hostile/partitions/1/ws?offset=latest")
	_, memberEnded := dialStream(t, cl.base, "/v1/groups/closing/ws?topics=hostile&credit=10")
	waitFor(t, 10*time.Second, "3 connections", func() bool { return gauge(t, cl.base, "sluice_gateway_ws_connections") == 3 })

	start := time.Now()
	if err := gw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	took := time.Since(start)
	t.Logf("Close took %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("Close took %s", took)
	}
	for name, ended := range map[string]<-chan error{"stream": streamEnded, "idle stream": idleEnded, "group member": memberEnded} {
		select {
		case err := <-ended:
			if websocket.CloseStatus(err) != websocket.StatusGoingAway {
				t.Errorf("%s: %v, want close 1001", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s still open after Close", name)
		}
	}
	waitGoroutines(t, g0, 5, 10*time.Second)
}

// A client may send frames right behind its upgrade request, before it has
// read the answer: what the gateway read past the request is the stream's
// first input. Here the only credit comes that way.
func TestWSFramesBehindTheUpgrade(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	payload := []byte(`{"credit":5}`)
	mask := [4]byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(payload))}, mask[:]...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	conn := rawConn(t, cl.base, fmt.Sprintf(wsUpgrade, "/v1/topics/hostile/partitions/3/ws?offset=0")+string(frame))
	if line := readHead(t, conn); !strings.Contains(line, " 101 ") {
		t.Fatalf("status line %q", line)
	}
	cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": "early", "partition": 3}}}, nil)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(conn, hdr); err != nil {
		t.Fatal(err)
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		ext := make([]byte, 2)
		if _, err := io.ReadFull(conn, ext); err != nil {
			t.Fatal(err)
		}
		n = int(ext[0])<<8 | int(ext[1])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 0x81 || !strings.Contains(string(body), `"value":"early"`) {
		t.Fatalf("frame %x %s, want the record as text", hdr, body)
	}
}
