package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The endpoint that `sluice bench push` pushes to runs in a process of its
// own (`sluice bench push --endpoint`, PushEndpoint), so that what it costs
// to take the requests is not charged to the pusher. It listens on
// 127.0.0.1, answers 204 to every request once the target of its path took
// it, and is told by the bench, under /_bench/, which paths to count:
//
//	POST   /_bench/targets?path=P&kind=count|batch|latency&want=N
//	DELETE /_bench/targets?path=P
//	GET    /_bench/counts?path=P      offsetCounts of a count or batch target
//	GET    /_bench/latencies?path=P   the latencies a latency target took since the last GET
//	GET    /_bench/cpu                the process's CPU time so far
//
// Any answer under /_bench/ is 200 with JSON, or 4xx/5xx with the reason
// as text; an error field is the first request the endpoint could not
// count, which fails the bench.

// pushEndpointListening is the line the endpoint process prints first.
const pushEndpointListening = "push endpoint listening on "

// PushEndpoint is the endpoint process of Push: it serves on 127.0.0.1
// until in ends, having written the line "push endpoint listening on
// http://127.0.0.1:PORT" to out.
func PushEndpoint(in io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e := &endpointServer{targets: map[string]pushTarget{}}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(out, "%shttp://%s\n", pushEndpointListening, ln.Addr()); err != nil {
		_ = srv.Close() // nobody is listening to us
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until the bench closes our input (or dies)
	_ = srv.Close()                // the bench is over; open requests are cut
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// pushTarget takes the requests of one path of the endpoint.
type pushTarget interface {
	// receive takes one request that arrived (its body read) at now; an
	// error is a request the bench cannot count, which fails the run.
	receive(now time.Time, h http.Header, body []byte) error
}

// endpointServer is the endpoint process's handler.
type endpointServer struct {
	mu      sync.Mutex // guards targets and first
	targets map[string]pushTarget
	first   error // the first request a target could not count

	bufs sync.Pool // *bytes.Buffer, one per request being read
}

func (e *endpointServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_bench/") {
		e.control(w, r)
		return
	}
	buf, _ := e.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer e.bufs.Put(buf)
	buf.Reset()
	_, rerr := buf.ReadFrom(r.Body)
	now := time.Now()
	e.mu.Lock()
	t := e.targets[r.URL.Path]
	e.mu.Unlock()
	if t != nil {
		err := rerr
		if err == nil {
			err = t.receive(now, r.Header, buf.Bytes())
		}
		if err != nil {
			e.fail(fmt.Errorf("the endpoint could not count a request to %s: %w", r.URL.Path, err))
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *endpointServer) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		e.first = err
	}
}

// failure is the first request the endpoint could not count, as text.
func (e *endpointServer) failure() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		return ""
	}
	return e.first.Error()
}

// countsWire is offsetCounts as the endpoint sends it.
type countsWire struct {
	Distinct     int64  `json:"distinct"`
	Bytes        int64  `json:"bytes"`
	Dups         int64  `json:"dups"`
	Requests     int64  `json:"requests"`
	Counted      int64  `json:"counted"`
	CountedBytes int64  `json:"counted_bytes"`
	FirstNs      int64  `json:"first_ns"`
	LastNs       int64  `json:"last_ns"`
	Error        string `json:"error,omitempty"`
}

// latenciesWire is what a latency target took since the last GET.
type latenciesWire struct {
	Ns    []int64 `json:"ns"`
	Error string  `json:"error,omitempty"`
}

func (e *endpointServer) control(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	e.mu.Lock()
	t := e.targets[path]
	e.mu.Unlock()
	var out any
	switch r.Method + " " + r.URL.Path {
	case "POST /_bench/targets":
		var nt pushTarget
		switch kind := r.URL.Query().Get("kind"); kind {
		case "count", "batch":
			want, err := strconv.ParseInt(r.URL.Query().Get("want"), 10, 64)
			if err != nil || want < 1 {
				http.Error(w, "want: a count of records", http.StatusBadRequest)
				return
			}
			nt = &countTarget{set: newOffsetSet(want), batched: kind == "batch"}
		case "latency":
			nt = &latencyTarget{}
		default:
			http.Error(w, "kind: count, batch or latency", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.targets[path] = nt
		e.mu.Unlock()
		out = struct{}{}
	case "DELETE /_bench/targets":
		e.mu.Lock()
		delete(e.targets, path)
		e.mu.Unlock()
		out = struct{}{}
	case "GET /_bench/counts":
		ct, ok := t.(*countTarget)
		if !ok {
			http.Error(w, "no count target at "+path, http.StatusNotFound)
			return
		}
		c := ct.set.snapshot()
		out = countsWire{Distinct: c.distinct, Bytes: c.bytes, Dups: c.dups, Requests: c.requests, Counted: c.counted, CountedBytes: c.countedBytes,
			FirstNs: unixNano(c.first), LastNs: unixNano(c.last), Error: e.failure()}
	case "GET /_bench/latencies":
		lt, ok := t.(*latencyTarget)
		if !ok {
			http.Error(w, "no latency target at "+path, http.StatusNotFound)
			return
		}
		out = latenciesWire{Ns: lt.take(), Error: e.failure()}
	case "GET /_bench/cpu":
		out = selfCPU().Nanoseconds()
	default:
		http.Error(w, "no such control", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out) // a control answer the bench failed to read fails the bench there
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// countTarget counts a throughput round's records: from the sluice-*
// headers of one-record requests, from the JSON array of a batch (read by
// scanBatch, which decodes only the members counted).
type countTarget struct {
	set     *offsetSet
	batched bool
	recs    sync.Pool // *[]pushedRecord, one per batch being counted
}

func (t *countTarget) receive(now time.Time, h http.Header, body []byte) error {
	if t.batched {
		buf, _ := t.recs.Get().(*[]pushedRecord)
		if buf == nil {
			buf = new([]pushedRecord)
		}
		defer t.recs.Put(buf)
		pr, err := scanBatch((*buf)[:0], body)
		*buf = pr
		if err != nil {
			return err
		}
		return t.set.add(now, pr)
	}
	p, err := strconv.ParseInt(h.Get("sluice-partition"), 10, 32)
	if err != nil {
		return fmt.Errorf("sluice-partition: %w", err)
	}
	off, err := strconv.ParseInt(h.Get("sluice-offset"), 10, 64)
	if err != nil {
		return fmt.Errorf("sluice-offset: %w", err)
	}
	return t.set.add(now, []pushedRecord{{partition: int32(p), offset: off, bytes: len(body)}})
}

// latencyTarget is the latency run's receiver: each request is one record
// whose value (the body, in binary format) carries its send time.
type latencyTarget struct {
	mu  sync.Mutex // guards lat
	lat []int64    // ns, since the last take
}

func (t *latencyTarget) receive(now time.Time, _ http.Header, body []byte) error {
	sent, ok := sentAtValue(body)
	if !ok {
		return fmt.Errorf("a body without a send time: %.60q", body)
	}
	t.mu.Lock()
	t.lat = append(t.lat, now.UnixNano()-sent)
	t.mu.Unlock()
	return nil
}

func (t *latencyTarget) take() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.lat
	t.lat = nil
	return out
}

// pushEndpoint is the bench's side of the endpoint process: it started the
// process, and stops it (close) by ending its input.
type pushEndpoint struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	hc    *http.Client // for /_bench/
}

// startPushEndpoint runs exe's `sluice bench push --endpoint` (default:
// this process's executable) and waits for its address.
func startPushEndpoint(ctx context.Context, exe string) (*pushEndpoint, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(exe, "bench", "push", "--endpoint")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &pushEndpoint{cmd: cmd, stdin: stdin, hc: benchClient(4)}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n') // the process's only line; the rest of its output, none, is left
		line <- s
	}()
	select {
	case s := <-line:
		u, ok := strings.CutPrefix(strings.TrimSpace(s), pushEndpointListening)
		if !ok {
			e.close()
			return nil, fmt.Errorf("the endpoint process (%s bench push --endpoint) printed %q", exe, s)
		}
		e.url = u
		return e, nil
	case <-ctx.Done():
		e.close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		e.close()
		return nil, errors.New("the endpoint process printed no address in 30 s")
	}
}

// close ends the endpoint process and waits for it.
func (e *pushEndpoint) close() {
	_ = e.stdin.Close() // the process ends at the end of its input
	done := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-done
	}
	e.hc.CloseIdleConnections()
}

// call sends one control request and decodes its answer into out.
func (e *pushEndpoint) call(ctx context.Context, method, path string, q url.Values, out any) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.url+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return fmt.Errorf("the endpoint process: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the endpoint process: %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// count has the endpoint count the records that requests to path carry
// (one a request from the sluice-* headers, or batched JSON arrays), want
// of them.
func (e *pushEndpoint) count(ctx context.Context, path string, batched bool, want int64) error {
	kind := "count"
	if batched {
		kind = "batch"
	}
	return e.call(ctx, http.MethodPost, "/_bench/targets", url.Values{"path": {path}, "kind": {kind}, "want": {strconv.FormatInt(want, 10)}}, nil)
}

// latency has the endpoint take each request to path as one record whose
// value carries its send time.
func (e *pushEndpoint) latency(ctx context.Context, path string) error {
	return e.call(ctx, http.MethodPost, "/_bench/targets", url.Values{"path": {path}, "kind": {"latency"}}, nil)
}

// drop stops counting path (its requests are still answered).
func (e *pushEndpoint) drop(ctx context.Context, path string) {
	_ = e.call(context.WithoutCancel(ctx), http.MethodDelete, "/_bench/targets", url.Values{"path": {path}}, nil) // a path left counting costs nothing
}

// counts is what the endpoint counted at path, or the request it could
// not count.
func (e *pushEndpoint) counts(ctx context.Context, path string) (offsetCounts, error) {
	var w countsWire
	if err := e.call(ctx, http.MethodGet, "/_bench/counts", url.Values{"path": {path}}, &w); err != nil {
		return offsetCounts{}, err
	}
	if w.Error != "" {
		return offsetCounts{}, errors.New(w.Error)
	}
	return offsetCounts{distinct: w.Distinct, bytes: w.Bytes, dups: w.Dups, requests: w.Requests, counted: w.Counted, countedBytes: w.CountedBytes,
		first: fromUnixNano(w.FirstNs), last: fromUnixNano(w.LastNs)}, nil
}

// cpu is the endpoint process's CPU time so far.
func (e *pushEndpoint) cpu(ctx context.Context) (time.Duration, error) {
	var ns int64
	err := e.call(ctx, http.MethodGet, "/_bench/cpu", nil, &ns)
	return time.Duration(ns), err
}

// remoteLatencies hands what a latency target of the endpoint takes to the
// collector it was given last: a goroutine, started here and ended by
// stop, drains the target every 10 ms.
type remoteLatencies struct {
	cur     atomic.Pointer[e2eCollector]
	mu      sync.Mutex // guards first
	first   error
	cancel  context.CancelFunc
	stopped chan struct{}
}

func startRemoteLatencies(ctx context.Context, e *pushEndpoint, path string) *remoteLatencies {
	ctx, cancel := context.WithCancel(ctx)
	r := &remoteLatencies{cancel: cancel, stopped: make(chan struct{})}
	r.cur.Store(&e2eCollector{})
	go func() {
		defer close(r.stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var w latenciesWire
			err := e.call(ctx, http.MethodGet, "/_bench/latencies", url.Values{"path": {path}}, &w)
			if err == nil && w.Error != "" {
				err = errors.New(w.Error)
			}
			if err != nil {
				if ctx.Err() == nil {
					r.mu.Lock()
					r.first = cmpErr(r.first, err)
					r.mu.Unlock()
				}
				continue
			}
			if len(w.Ns) > 0 {
				lat := make([]time.Duration, len(w.Ns))
				for i, ns := range w.Ns {
					lat[i] = time.Duration(ns)
				}
				r.cur.Load().add(lat)
			}
		}
	}()
	return r
}

func (r *remoteLatencies) collect(c *e2eCollector) { r.cur.Store(c) }

func (r *remoteLatencies) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

func (r *remoteLatencies) stop() {
	r.cancel()
	<-r.stopped
}

// pushedRecord is one record a request carried.
type pushedRecord struct {
	partition int32
	offset    int64
	bytes     int // of its value
}

// offsetSet counts the distinct (partition, offset) pairs a round's
// requests carried, and the records that came again.
type offsetSet struct {
	mu   sync.Mutex         // guards every field below but want
	seen map[int32][]uint64 // a bit per offset of each partition
	offsetCounts
	want int64
}

// offsetCounts is what an offsetSet counted.
type offsetCounts struct {
	distinct, bytes int64 // distinct records, and their value bytes
	dups            int64 // records that came again
	requests        int64
	// counted and countedBytes leave out the first request's records: a
	// rate is what came after it, over last - first.
	counted, countedBytes int64
	first, last           time.Time // the first request's arrival; the want-th distinct record's
}

func newOffsetSet(want int64) *offsetSet {
	return &offsetSet{seen: map[int32][]uint64{}, want: want}
}

// add counts one request's records, arrived at now.
func (s *offsetSet) add(now time.Time, recs []pushedRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	firstReq := s.requests == 0
	if firstReq {
		s.first = now
	}
	s.requests++
	for _, r := range recs {
		if r.offset < 0 {
			return fmt.Errorf("offset %d of partition %d", r.offset, r.partition)
		}
		bits := s.seen[r.partition]
		w := int(r.offset / 64)
		if w >= len(bits) {
			bits = append(bits, make([]uint64, w+1-len(bits)+len(bits)/2)...)
			s.seen[r.partition] = bits
		}
		mask := uint64(1) << (r.offset % 64)
		if bits[w]&mask != 0 {
			s.dups++
			continue
		}
		bits[w] |= mask
		s.distinct++
		s.bytes += int64(r.bytes)
		if !firstReq {
			s.counted++
			s.countedBytes += int64(r.bytes)
		}
		if s.distinct == s.want {
			s.last = now
		}
	}
	return nil
}

// snapshot is what s counted so far.
func (s *offsetSet) snapshot() offsetCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offsetCounts
}

// waitAll polls snap every interval until it counts want distinct
// records, and returns that count; an error when ctx ends, when snap
// fails, or when no new record came for stall.
func waitAll(ctx context.Context, want int64, every, stall time.Duration, snap func() (offsetCounts, error)) (offsetCounts, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	last, since := int64(-1), time.Now()
	for {
		c, err := snap()
		switch {
		case err != nil:
			return c, err
		case c.distinct >= want:
			return c, nil
		case c.distinct != last:
			last, since = c.distinct, time.Now()
		case time.Since(since) > stall:
			return c, fmt.Errorf("the endpoint has %d of %d records, and none came for %s", c.distinct, want, stall)
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-tick.C:
		}
	}
}
