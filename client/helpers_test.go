package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// fastRetry keeps tests that exercise retries quick.
var fastRetry = client.RetryPolicy{MaxAttempts: 5, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}

// startCluster starts a one-broker in-process cluster and a Client of it.
func startCluster(t *testing.T) (*embedtest.Cluster, *client.Client) {
	t.Helper()
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	cl, err := client.New(c.URL, client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, cl
}

// testCtx is a context bounded well below the test binary's timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createTopic(t *testing.T, cl *client.Client, name string, partitions int) api.Topic {
	t.Helper()
	tp, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: name, Partitions: partitions})
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return tp
}

// fetchAll reads partition p from offset 0 up to its high watermark.
func fetchAll(t *testing.T, cl *client.Client, topic string, p int32) []api.FetchedRecord {
	t.Helper()
	var out []api.FetchedRecord
	next := int64(0)
	for {
		fr, err := cl.Fetch(testCtx(t), topic, p, client.At(next), client.FetchOptions{MaxRecords: 10000})
		if err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", topic, p, next, err)
		}
		out = append(out, fr.Records...)
		next = fr.NextOffset
		if next >= fr.HighWatermark {
			return out
		}
	}
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if !errors.Is(err, &api.Error{Code: code}) {
		t.Fatalf("error %v: want code %s", err, code)
	}
}

// answerDropper is a reverse proxy to a gateway that loses the answers of
// the first n requests matching match: each is relayed and answered by the
// gateway in full, then the client's connection is closed without a byte of
// the answer (a client that cannot tell whether its request took effect).
type answerDropper struct {
	srv     *httptest.Server
	left    atomic.Int32
	dropped atomic.Int32
}

func newAnswerDropper(t *testing.T, target string, n int32, match func(*http.Request) bool) *answerDropper {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	d := &answerDropper{}
	d.left.Store(n)
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !match(r) || d.left.Add(-1) < 0 {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		d.dropped.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// tcpRelay is a TCP proxy in front of an address whose connections a test
// can cut all at once (a gateway restart, a load balancer dropping streams).
type tcpRelay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex // guards conns
	conns  map[net.Conn]bool
	wg     sync.WaitGroup // the accept loop and every copy goroutine
}

func newTCPRelay(t *testing.T, targetURL string) *tcpRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{ln: ln, target: strings.TrimPrefix(targetURL, "http://"), conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.cut()
		r.wg.Wait()
	})
	return r
}

func (r *tcpRelay) URL() string { return "http://" + r.ln.Addr().String() }

func (r *tcpRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns[c], r.conns[up] = true, true
		r.mu.Unlock()
		for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				_, _ = io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
			}()
		}
	}
}

// cut closes every relayed connection; new ones are relayed as before.
func (r *tcpRelay) cut() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.conns) / 2
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
	return n
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, d, what, cond)
}
