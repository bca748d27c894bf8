package faulttest

import (
	"bytes"
	"context"
	"net"
	"os"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/sink"
)

// holdProxy relays TCP connections to a server (Redis, S3). Once armed
// with a marker, the first connection whose client sends a chunk
// containing it is held: that chunk and everything after it on that
// connection wait until release. It also notes when the server answers
// with a refusal (Redis's FENCED error, or what startHoldProxyFor names).
type holdProxy struct {
	ln      net.Listener
	target  string
	refusal []byte // what a refusing answer contains

	mu      sync.Mutex // guards the fields below and orders writes to a held connection
	marker  []byte     // nil: nothing is held
	holding *holdConn  // the connection being held, nil if none
	buf     []byte     // what holding's client sent since it was held
	held    chan struct{}
	fenced  chan struct{} // closed at the first refusal
	conns   []net.Conn
}

type holdConn struct{ up net.Conn }

// startHoldProxy relays to the Redis at target; a FENCED error reply is a refusal.
func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	return startHoldProxyFor(t, target, "-FENCED ")
}

// startHoldProxyFor relays to target; an answer containing refusal is one.
func startHoldProxyFor(t *testing.T, target, refusal string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, refusal: []byte(refusal), held: make(chan struct{}), fenced: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		hc := &holdConn{up: up}
		go p.toTarget(hc, down)
		go p.toClient(down, up)
	}
}

func (p *holdProxy) toTarget(hc *holdConn, down net.Conn) {
	defer hc.up.Close()
	b := make([]byte, 64<<10)
	for {
		n, err := down.Read(b)
		if n > 0 {
			p.mu.Lock()
			switch {
			case p.holding == hc:
				p.buf = append(p.buf, b[:n]...)
			case p.holding == nil && p.marker != nil && bytes.Contains(b[:n], p.marker):
				p.holding, p.marker = hc, nil
				p.buf = append([]byte(nil), b[:n]...)
				close(p.held)
			default:
				if _, werr := hc.up.Write(b[:n]); werr != nil {
					p.mu.Unlock()
					return
				}
			}
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) toClient(down, up net.Conn) {
	defer down.Close()
	b := make([]byte, 64<<10)
	for {
		n, err := up.Read(b)
		if n > 0 {
			if bytes.Contains(b[:n], p.refusal) {
				p.mu.Lock()
				select {
				case <-p.fenced:
				default:
					close(p.fenced)
				}
				p.mu.Unlock()
			}
			if _, err := down.Write(b[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// arm holds the next connection that sends marker.
func (p *holdProxy) arm(marker string) {
	p.mu.Lock()
	p.marker = []byte(marker)
	p.mu.Unlock()
}

// heldBytes returns what the held connection's client has sent so far.
func (p *holdProxy) heldBytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.buf...)
}

// release sends what was held to Redis and relays the connection again.
func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = nil
	if p.holding != nil {
		_, _ = p.holding.up.Write(p.buf)
		p.holding, p.buf = nil, nil
	}
}

func (p *holdProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// heldWrite is what a held write.lua call carries.
type heldWrite struct {
	field         string
	fence         int64
	first, last   int64
	records       int
	parsedRecords bool
}

// parseHeldWrite reads the EVALSHA command at the start of b (RESP array
// of bulk strings): EVALSHA sha numkeys keys... field fence mode partition
// form, then the records in that form.
func parseHeldWrite(b []byte) (heldWrite, bool) {
	var w heldWrite
	line := func() (string, bool) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return "", false
		}
		s := string(b[:i])
		b = b[i+2:]
		return s, true
	}
	head, ok := line()
	if !ok || len(head) < 2 || head[0] != '*' {
		return w, false
	}
	n, _ := strconv.Atoi(head[1:])
	args := make([]string, 0, n)
	for range n {
		l, ok := line()
		if !ok || len(l) < 2 || l[0] != '$' {
			return w, false
		}
		size, _ := strconv.Atoi(l[1:])
		if len(b) < size+2 {
			return w, false
		}
		args = append(args, string(b[:size]))
		b = b[size+2:]
	}
	if len(args) < 3 {
		return w, false
	}
	numKeys, _ := strconv.Atoi(args[2])
	rest := args[3+numKeys:]
	if len(rest) < 5 {
		return w, false
	}
	w.field = rest[0]
	w.fence, _ = strconv.ParseInt(rest[1], 10, 64)
	// The records' form (write.lua): "kv" and "v" give the first offset and
	// then two arguments or one a record, offsets following one another;
	// "full" gives five a record, the first of them its offset.
	switch form, recs := rest[4], rest[5:]; form {
	case "kv", "v":
		width := map[string]int{"kv": 2, "v": 1}[form]
		if len(recs) < 1 {
			return w, false
		}
		w.first, _ = strconv.ParseInt(recs[0], 10, 64)
		w.records = (len(recs) - 1) / width
		w.last = w.first + int64(w.records) - 1
		w.parsedRecords = w.records > 0
	case "full":
		w.records = len(recs) / 5
		if w.records > 0 {
			w.first, _ = strconv.ParseInt(recs[0], 10, 64)
			w.last, _ = strconv.ParseInt(recs[(w.records-1)*5], 10, 64)
			w.parsedRecords = true
		}
	}
	return w, true
}

// redisSnapshot is the whole state a sink writes for one topic.
type redisSnapshot struct {
	stream  []redis.XMessage
	offsets map[string]string
}

func snapshot(t *testing.T, ctx context.Context, r *sinkRedis, topic string) redisSnapshot {
	t.Helper()
	es, err := r.rdb.XRange(ctx, r.store.DataKey(topic), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	offs, err := r.rdb.HGetAll(ctx, r.store.OffsetsKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return redisSnapshot{stream: es, offsets: offs}
}

// TestSinkZombieProcessRefused: a `sluice sink redis` process (the zombie)
// is caught with a batch on its way to Redis (held by a proxy) and
// SIGSTOPped there, past its group session. A second process takes its
// partitions over and claims them with higher fences; its own first write
// is held too, so the store's next offsets stay where the zombie left them
// and the zombie's batch would land if only offsets were checked. Then the
// zombie's batch reaches Redis and the zombie is resumed: Redis refuses the
// batch (FENCED), nothing in Redis changes, and the zombie's metrics count
// the refusal. Both sinks then run to the end of the log, which the stream
// holds once, in partition order.
func TestSinkZombieProcessRefused(t *testing.T) {
	const partitions = 3
	c, cl, ctx := sinkCluster(t, partitions, 90*time.Second)
	r := newSinkRedis(t, ctx, "zombie", sink.ModeStream)
	writeSHA := redis.NewScript(mustRead(t, "../../sink/write.lua")).Hash()
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)

	args := func(proxy *holdProxy, metrics string) []string {
		return []string{"--url", c.URL, "--group", "zombie", "--topics", "orders",
			"--redis", "redis://" + proxy.addr() + "/0", "--prefix", r.prefix,
			"--session-timeout", "2s", "--max-records", "200", "--metrics-addr", metrics,
			// One write at a time, so that holding one connection holds the process's writes.
			"--parallel-writes", "1"}
	}
	wait := func(what string, ch <-chan struct{}, d time.Duration) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(d):
			t.Fatalf("%s: not within %s", what, d)
		}
	}

	// The zombie writes every partition for a while.
	zProxy := startHoldProxy(t, r.addr)
	zMetrics := freeAddr(t)
	zombie := startSinkProcess(t, "zombie", args(zProxy, zMetrics))
	for p := range partitions {
		for next, _ := r.partitionState(ctx, "orders", p); next <= 0; next, _ = r.partitionState(ctx, "orders", p) {
			if ctx.Err() != nil {
				t.Fatalf("the zombie never wrote partition %d", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	var nexts []int64
	for q := range partitions {
		n, _ := r.partitionState(ctx, "orders", q)
		nexts = append(nexts, n)
	}
	t.Logf("the zombie wrote every partition: next %v, log ends %v", nexts, logEnds(t, ctx, cl, "orders", partitions))

	// Its next batch is held on the way, and the process stopped at once
	// (well inside its Redis client's 3 s read timeout).
	zProxy.arm(writeSHA)
	wait("a zombie write", zProxy.held, 10*time.Second)
	zombie.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	time.Sleep(100 * time.Millisecond) // the rest of the command, if it came in pieces
	hw, ok := parseHeldWrite(zProxy.heldBytes())
	if !ok || !hw.parsedRecords {
		t.Fatalf("the held bytes are not a write.lua call: %q", zProxy.heldBytes())
	}
	p, _ := strconv.Atoi(hw.field[len("orders/"):])
	zNext, zFence := r.partitionState(ctx, "orders", p)
	t.Logf("zombie stopped with %s offsets %d-%d (%d records) at fence %d on its way; the store holds next %d fence %d",
		hw.field, hw.first, hw.last, hw.records, hw.fence, zNext, zFence)

	// The successor takes over once the zombie's session has expired and
	// claims every partition; its first write is held.
	bProxy := startHoldProxy(t, r.addr)
	bProxy.arm(writeSHA)
	bMetrics := freeAddr(t)
	successor := startSinkProcess(t, "successor", args(bProxy, bMetrics))
	for {
		next, fence := r.partitionState(ctx, "orders", p)
		if fence > hw.fence {
			t.Logf("the successor claimed %s at fence %d (next %d), %s after the zombie stopped", hw.field, fence, next, time.Since(stoppedAt).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never claimed above the zombie's fence %d", hw.field, hw.fence)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wait("the successor's first write", bProxy.held, 15*time.Second)
	before := snapshot(t, ctx, r, "orders")
	next, fence := r.partitionState(ctx, "orders", p)
	if hw.last < next {
		t.Fatalf("store next %d is past the zombie's batch (last %d): the test would not need the fence", next, hw.last)
	}
	t.Logf("before the zombie's batch lands: %s at next %d fence %d; %d stream entries", hw.field, next, fence, len(before.stream))

	// The zombie's batch lands; the zombie wakes up.
	zProxy.release()
	wait("Redis refusing the zombie's batch", zProxy.fenced, 5*time.Second)
	after := snapshot(t, ctx, r, "orders")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the zombie's refused batch changed Redis:\nbefore %d entries, offsets %v\nafter  %d entries, offsets %v",
			len(before.stream), before.offsets, len(after.stream), after.offsets)
	}
	zombie.signal(syscall.SIGCONT)
	var (
		refused float64
		err     error
	)
	for {
		refused, err = scrapeMetric(zMetrics, `sluice_sink_batches_total{result="fenced"}`)
		if err == nil && refused >= 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the zombie's metrics never counted the refused batch (last %v, %v)", refused, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Redis unchanged by the zombie's batch; the zombie counts %v fenced batch(es)", refused)

	// Both run on; the stream ends up holding the log once.
	bProxy.release()
	time.Sleep(time.Second)
	prod.stop()
	ends := logEnds(t, ctx, cl, "orders", partitions)
	r.waitCaughtUp(t, ctx, "orders", ends)
	checkStream(t, ctx, r, "orders", readLog(t, ctx, cl, "orders", partitions))
	zWritten, _ := scrapeMetric(zMetrics, `sluice_sink_records_written_total{topic="orders"}`)
	bWritten, _ := scrapeMetric(bMetrics, `sluice_sink_records_written_total{topic="orders"}`)
	zombie.stop()
	successor.stop()
	t.Logf("%d records produced; log ends %v; records written: zombie %v, successor %v", prod.produced.Load(), ends, zWritten, bWritten)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
