package faulttest

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/sink"
)

// sinkProcess is a `sluice sink` child process. The test's cleanup
// resumes it if stopped and kills it if it still runs.
type sinkProcess struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	ready  chan struct{} // closed when the process prints sinkReadyLine
	exited chan struct{} // closed when the process has been waited for
	err    error         // Wait's result, set before exited is closed
}

// sinkReadyLine starts the line a `sluice sink` process prints on stdout
// once it has joined its group: its signal handlers are installed by then.
const sinkReadyLine = "sink joined group "

// readyTimeout bounds the wait for a sink process to join its group.
const readyTimeout = 30 * time.Second

// startSinkProcess runs `sluice sink redis args...` with env added to the
// environment; its stderr goes to t.Log prefixed with name.
func startSinkProcess(t *testing.T, name string, args []string, env ...string) *sinkProcess {
	t.Helper()
	return startSluiceProcess(t, name, append([]string{"sink", "redis"}, args...), env...)
}

// startSluiceProcess runs `sluice args...` with env added to the
// environment; its stderr goes to t.Log prefixed with name.
func startSluiceProcess(t *testing.T, name string, args []string, env ...string) *sinkProcess {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = LogWriter(t, name+": ")
	ready := make(chan struct{})
	cmd.Stdout = &lineWatcher{t: t, prefix: name + ": ", marker: sinkReadyLine, seen: ready}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sinkProcess{t: t, name: name, cmd: cmd, ready: ready, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	})
	return p
}

// failpointEnv is the environment entry that arms the sink failpoint
// spec (step[:N], see sink.FailpointEnv) in a `sluice` child process. It
// fails the test when the binary has no failpoints (SLUICE_TEST_BINARY
// naming a build without -tags sluice_failpoints): there the variable
// does nothing, and a test that counts on the process dying at its step
// would test less than it says.
func failpointEnv(t *testing.T, spec string) string {
	t.Helper()
	bin := Binary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: reading its build settings: %v", bin, err)
	}
	tags := ""
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			tags = s.Value
		}
	}
	if !slices.Contains(strings.Split(tags, ","), "sluice_failpoints") {
		t.Fatalf("%s was built without -tags sluice_failpoints (tags %q): its sink failpoints are not compiled in", bin, tags)
	}
	return sink.FailpointEnv + "=" + spec
}

func (p *sinkProcess) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits for it.
func (p *sinkProcess) kill() { p.signal(syscall.SIGKILL); <-p.exited }

// waitReady waits until the process has joined its group (it printed
// sinkReadyLine) or exited, up to readyTimeout; it reports whether it
// joined. Before that, the process may not have installed its signal
// handlers yet, and a SIGTERM would kill it instead of stopping it.
func (p *sinkProcess) waitReady() bool {
	select {
	case <-p.ready:
		return true
	case <-p.exited:
		return false
	case <-time.After(readyTimeout):
		return false
	}
}

// stop waits for the process to be ready (see waitReady), sends SIGTERM
// and reports an unclean exit.
func (p *sinkProcess) stop() {
	p.t.Helper()
	if !p.waitReady() {
		select {
		case <-p.exited:
		default:
			p.t.Errorf("%s: not joined %s after its start; sending SIGTERM anyway", p.name, readyTimeout)
		}
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.t.Errorf("%s: still running 15s after SIGTERM", p.name)
		p.kill()
		return
	}
	if p.err != nil {
		p.t.Errorf("%s after SIGTERM: %v", p.name, p.err)
	}
}

// lineWatcher copies a process's output to t.Log, line by line, and
// closes seen at the first line that starts with marker.
type lineWatcher struct {
	t      *testing.T
	prefix string
	marker string
	seen   chan struct{}

	mu    sync.Mutex // guards buf and found
	buf   []byte
	found bool
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		line, rest, ok := strings.Cut(string(w.buf), "\n")
		if !ok {
			break
		}
		w.buf = []byte(rest)
		w.t.Log(w.prefix + line)
		if !w.found && strings.HasPrefix(line, w.marker) {
			w.found = true
			close(w.seen)
		}
	}
	return len(b), nil
}

// untilClaimed waits until claimed reports true (the process took its
// partitions over: the store holds a fence above any seen before it
// started), the process exits, or 5 s pass, so that a random kill after
// it lands while the process works rather than while it starts (which
// on a loaded machine takes most of a second). It reports whether the
// process exited.
func (p *sinkProcess) untilClaimed(claimed func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !claimed(); {
		select {
		case <-p.exited:
			return true
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// maxFence is the highest fence any partition's entry in a Redis
// offsets hash holds (0: none).
func maxFence(ctx context.Context, rdb *redis.Client, offsetsKey string) int64 {
	var top int64
	for _, v := range rdb.HGetAll(ctx, offsetsKey).Val() {
		var next, fence int64
		if _, err := fmt.Sscanf(v, `{"next":%d,"fence":%d}`, &next, &fence); err == nil {
			top = max(top, fence)
		}
	}
	return top
}

// killedBySignal reports whether the process ended by SIGKILL (a failpoint).
func (p *sinkProcess) killedBySignal() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// sinkRedis is a test's own corner of the shared Redis: a unique key
// prefix and the store that names its keys.
type sinkRedis struct {
	rdb    *redis.Client
	addr   string
	prefix string
	store  *sink.RedisStore
}

func newSinkRedis(t *testing.T, ctx context.Context, group, mode string) *sinkRedis {
	t.Helper()
	addr := testsvc.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	n, err := rdb.Incr(ctx, "test:unique").Result()
	if err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), n)
	store, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: group, Mode: mode, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &sinkRedis{rdb: rdb, addr: addr, prefix: prefix, store: store}
}

// partitionState reads a partition's {"next","fence"}; next is -1 when
// the store has none.
func (r *sinkRedis) partitionState(ctx context.Context, topic string, p int) (next, fence int64) {
	v, err := r.rdb.HGet(ctx, r.store.OffsetsKey(), topic+"/"+strconv.Itoa(p)).Result()
	if err != nil {
		return -1, 0
	}
	if _, err := fmt.Sscanf(v, `{"next":%d,"fence":%d}`, &next, &fence); err != nil {
		return -1, 0
	}
	return next, fence
}

// waitCaughtUp polls until every partition's next offset in the store is
// its log end.
func (r *sinkRedis) waitCaughtUp(t *testing.T, ctx context.Context, topic string, ends []int64) {
	t.Helper()
	for p, end := range ends {
		for {
			next, fence := r.partitionState(ctx, topic, p)
			if next == end {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s/%d: store at next %d fence %d, log end %d", topic, p, next, fence, end)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// logRecord is one record of the log as a sink writes it.
type logRecord struct {
	offset     int64
	key, value []byte // nil: null
}

// readLog reads every partition of topic from offset 0 to its end.
func readLog(t *testing.T, ctx context.Context, cl *client.Client, topic string, partitions int) [][]logRecord {
	t.Helper()
	out := make([][]logRecord, partitions)
	for p := range partitions {
		for off := int64(0); ; {
			fr, err := cl.Fetch(ctx, topic, int32(p), client.At(off), client.FetchOptions{MaxRecords: 1000})
			if err != nil {
				t.Fatalf("fetch %s/%d at %d: %v", topic, p, off, err)
			}
			for _, r := range fr.Records {
				out[p] = append(out[p], logRecord{offset: r.Offset, key: fetchedKey(t, r), value: fetchedValue(t, r)})
			}
			off = fr.NextOffset
			if off >= fr.HighWatermark || len(fr.Records) == 0 {
				break
			}
		}
		for i, r := range out[p] {
			if r.offset != int64(i) {
				t.Fatalf("%s/%d: log record %d has offset %d", topic, p, i, r.offset)
			}
		}
	}
	return out
}

func fetchedKey(t *testing.T, r api.FetchedRecord) []byte {
	switch {
	case r.Key != nil:
		return []byte(*r.Key)
	case r.KeyB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*r.KeyB64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return nil
}

func fetchedValue(t *testing.T, r api.FetchedRecord) []byte {
	switch {
	case r.Value != nil:
		return []byte(r.Value)
	case r.ValueB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*r.ValueB64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return nil
}

// logEnds returns each partition's high watermark.
func logEnds(t *testing.T, ctx context.Context, cl *client.Client, topic string, partitions int) []int64 {
	t.Helper()
	ends := make([]int64, partitions)
	for p := range partitions {
		fr, err := cl.Fetch(ctx, topic, int32(p), client.At(0), client.FetchOptions{MaxRecords: 1})
		if err != nil {
			t.Fatal(err)
		}
		ends[p] = fr.HighWatermark
	}
	return ends
}

// checkStream asserts that the stream holds the log: per partition, every
// offset once, in offset order, each entry's key and value the log's.
func checkStream(t *testing.T, ctx context.Context, r *sinkRedis, topic string, log [][]logRecord) {
	t.Helper()
	es, err := r.rdb.XRange(ctx, r.store.DataKey(topic), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int, len(log))
	for _, e := range es {
		p, err := strconv.Atoi(fmt.Sprint(e.Values["partition"]))
		if err != nil || p < 0 || p >= len(log) {
			t.Fatalf("entry %s: partition %v", e.ID, e.Values["partition"])
		}
		off, _ := strconv.ParseInt(fmt.Sprint(e.Values["offset"]), 10, 64)
		if off != int64(seen[p]) {
			t.Fatalf("%s/%d: entry %s has offset %d, want %d (a record lost, doubled or out of order)", topic, p, e.ID, off, seen[p])
		}
		if seen[p] >= len(log[p]) {
			t.Fatalf("%s/%d: entry %s at offset %d is past the log's end %d", topic, p, e.ID, off, len(log[p]))
		}
		want := log[p][off]
		if v, ok := e.Values["value"]; (want.value == nil) == ok || ok && v != string(want.value) {
			t.Fatalf("%s/%d offset %d: stream value %v, log value %q", topic, p, off, v, want.value)
		}
		if k, ok := e.Values["key"]; (want.key == nil) == ok || ok && k != string(want.key) {
			t.Fatalf("%s/%d offset %d: stream key %v, log key %q", topic, p, off, k, want.key)
		}
		seen[p]++
	}
	for p := range log {
		if seen[p] != len(log[p]) {
			t.Errorf("%s/%d: stream holds offsets below %d, the log ends at %d", topic, p, seen[p], len(log[p]))
		}
	}
}

// freeAddr returns a loopback address nothing listens on just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeMetric returns the value of the series named exactly series (name
// and labels as Prometheus prints them) at http://addr/metrics; 0 when
// absent.
func scrapeMetric(addr, series string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// keyedProducer produces keyed records, 20 a request, into topic until
// stopped: record j has key k<j mod keys> and value v<j>, or, with
// tombstones set, a null value for one record in three (spread so that
// about a third of the keys end on a tombstone wherever the producer
// stops). Acknowledged records are counted.
type keyedProducer struct {
	produced atomic.Int64
	quit     chan struct{}
	wg       sync.WaitGroup
}

func startKeyedProducer(t *testing.T, ctx context.Context, cl *client.Client, topic string, keys int, tombstones bool) *keyedProducer {
	kp := &keyedProducer{quit: make(chan struct{})}
	kp.wg.Add(1)
	go func() {
		defer kp.wg.Done()
		for i := 0; ; i += 20 {
			select {
			case <-kp.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			recs := make([]client.Record, 0, 20)
			for j := i; j < i+20; j++ {
				r := client.Record{Key: []byte("k" + strconv.Itoa(j%keys)), Value: []byte("v" + strconv.Itoa(j))}
				if tombstones && (j/keys+j%keys)%3 == 0 {
					r.Value = nil
				}
				recs = append(recs, r)
			}
			if _, err := cl.Produce(ctx, topic, recs, client.ProduceOptions{}); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			kp.produced.Add(int64(len(recs)))
		}
	}()
	t.Cleanup(kp.stop)
	return kp
}

// stop ends the producer and waits for its last request; safe to call twice.
func (kp *keyedProducer) stop() {
	select {
	case <-kp.quit:
	default:
		close(kp.quit)
	}
	kp.wg.Wait()
}

// sinkCluster starts a one-broker in-process cluster with the topic
// "orders" of the given partitions, and a client of its gateway; ctx ends
// after timeout or with the test.
func sinkCluster(t *testing.T, partitions int, timeout time.Duration) (*embedtest.Cluster, *client.Client, context.Context) {
	t.Helper()
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	return c, cl, ctx
}
