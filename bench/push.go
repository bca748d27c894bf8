package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// PushOptions configure Push (`sluice bench push`).
type PushOptions struct {
	// URL is the gateway; empty starts a cluster of Brokers for the run.
	// The endpoint listens on 127.0.0.1, so a gateway at URL must run on
	// this machine with --push-allow-private.
	URL string
	// Brokers of a started cluster. Default 1.
	Brokers int
	// Processes runs the started cluster as processes of Binary (default:
	// this process's executable), coordinated through the ZooKeeper at ZK.
	// Default false: in this process.
	Processes bool
	ZK        string
	Binary    string
	// Topic is created (replication factor 1) and filled with Records if
	// it holds fewer; the latency run produces to Topic-latency. Default
	// "bench-push".
	Topic string
	// Partitions of the created topics. Default 8.
	Partitions int
	// Records the throughput rounds deliver, each from the topic's start.
	// Default 50,000.
	Records int
	// Size is bytes per record value, at least 40 (the latency run's
	// values carry their send time). Default 100.
	Size int
	// Batch is batch.max_records of the batched push (format json), in
	// [2, 1000]. Default 100.
	Batch int
	// Connections bounds the group members of the poll baseline (at most
	// one per partition). Default 8.
	Connections int
	// Rounds, each running the poll baseline, the one-record push and the
	// batched push. Default 3.
	Rounds int
	// Rate of the latency run, records per second in (0, 1e6]. Default
	// 1,000.
	Rate float64
	// Duration of the latency run (after a one-second warm-up). Default
	// 10 s.
	Duration time.Duration
	// Acks of the latency run's produce requests. Default "1".
	Acks string
	// Results, when set, is a Markdown file the run appends its rows to.
	Results string
	// Out receives the figures. Default os.Stdout.
	Out io.Writer
}

// DefaultPush returns the defaults of PushOptions.
func DefaultPush() PushOptions {
	return PushOptions{Brokers: 1, Topic: "bench-push", Partitions: 8, Records: 50000, Size: 100, Batch: 100,
		Connections: 8, Rounds: 3, Rate: 1000, Duration: 10 * time.Second, Acks: "1"}
}

// pushVariant is one way of pushing the throughput rounds' records.
type pushVariant struct {
	name   string // the table's target
	format string // api.PushFormat*; "" is the default (binary)
	batch  int    // batch.max_records; 0 is the default (1)
}

// Push is `sluice bench push`: a push subscription delivering a filled
// topic from its start to an HTTP endpoint in this process (127.0.0.1,
// answering 204 at once, counting the distinct records it received),
// one record a request (the default) and batched, against group polls of
// the same records, in alternating rounds; then the delivery latency from
// a paced producer to the endpoint, with the default settings, and to
// WebSocket streams of the same topic for reference.
func Push(ctx context.Context, o PushOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	switch {
	case o.Size < 40 || o.Records < 1 || o.Rounds < 1 || o.Partitions < 1 || o.Connections < 1:
		return errors.New("--size must be >= 40, --records, --rounds, --partitions and --connections >= 1")
	case o.Batch < 2 || o.Batch > 1000:
		return errors.New("--batch must be in [2, 1000]")
	case o.Rate <= 0 || o.Rate > 1e6 || o.Duration <= 0:
		return errors.New("--rate must be in (0, 1e6] and --duration > 0")
	}
	cl, err := startCluster(ctx, clusterSpec{url: o.URL, brokers: o.Brokers, processes: o.Processes, zk: o.ZK, binary: o.Binary})
	if err != nil {
		return err
	}
	defer cl.stop()
	where := "in one process"
	switch {
	case o.URL != "":
		where = o.URL
		out.printf("note: the endpoint listens on 127.0.0.1; the gateway at %s must run on this machine, started with --push-allow-private\n", o.URL)
	case o.Processes:
		where = "processes + ZooKeeper"
	}
	ep, err := startPushEndpoint()
	if err != nil {
		return err
	}
	defer ep.close()
	sc, err := newClient(cl.url)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }() // the client holds no state to lose
	tc := DefaultThroughput()
	tc.URL, tc.Topic, tc.Partitions, tc.Connections, tc.Size, tc.out = cl.url, o.Topic, o.Partitions, o.Connections, o.Size, out
	if err := ensureTopic(cl.url, o.Topic, o.Partitions, 1, nil); err != nil {
		return err
	}
	if err := fillTopic(ctx, tc, o.Topic, o.Records); err != nil {
		return err
	}
	var t api.Topic
	if err := getJSON(cl.url+"/v1/topics/"+o.Topic, &t); err != nil {
		return err
	}
	var want int64
	for _, p := range t.Partitions {
		want += p.HighWatermark - p.LogStartOffset
	}
	members := min(o.Connections, len(t.Partitions))
	dlt := o.Topic + ".dlt"
	variants := []pushVariant{{name: "push-1"}, {name: fmt.Sprintf("push-%d", o.Batch), format: api.PushFormatJSON, batch: o.Batch}}
	out.printf("push: %d records of %d bytes in %d partitions (%s); poll: %d group members (polls of up to 10,000, committing beside them); "+
		"push: a subscription from earliest, ordering partition, to an endpoint on 127.0.0.1 answering 204: %s one record a request, binary (the default), %s batches of %d, json\n",
		want, o.Size, len(t.Partitions), where, members, variants[0].name, variants[1].name, o.Batch)
	out.printf("%-10s %12s %10s %10s %8s %8s %6s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "rec/req", "start", "dup", "cpu ms/MB", "own")
	polls := []float64{}
	pushes := make([][]float64, len(variants))
	for round := 0; round < o.Rounds; round++ {
		poll, _, err := benchGroupRound(ctx, tc, fmt.Sprintf("bench-push-poll-%d-%d", time.Now().UnixNano(), round), members, want)
		if err != nil {
			return err
		}
		printPushRow(out, "poll", poll, "-", 0)
		polls = append(polls, poll.recordsPerSec)
		for i, v := range variants {
			res, err := pushRound(ctx, sc, ep, o.Topic, dlt, v, round, want)
			if err != nil {
				return err
			}
			printPushRow(out, v.name, res.benchResult, ms(res.start)+"ms", res.dups)
			pushes[i] = append(pushes[i], res.recordsPerSec)
		}
	}
	lat, ws, err := pushLatency(ctx, out, sc, ep, cl.url, o)
	if err != nil {
		return err
	}
	return pushSummary(out, o, variants, len(t.Partitions), where, polls, pushes, lat, ws)
}

// pushSummary prints the medians, ratios and latencies, and appends the
// rows of the results table.
func pushSummary(out *figures, o PushOptions, variants []pushVariant, partitions int, where string, polls []float64, pushes [][]float64, lat, ws benchResult) error {
	poll := median(polls)
	out.printf("median records/s: poll %.0f, %s %.0f, %s %.0f; ratio push/poll: %s %.2f (the default), %s %.2f (aim ≥ 0.7)\n",
		poll, variants[0].name, median(pushes[0]), variants[1].name, median(pushes[1]),
		variants[0].name, median(pushes[0])/poll, variants[1].name, median(pushes[1])/poll)
	maxLat := lat.latencies[len(lat.latencies)-1]
	out.printf("delivery latency at %.0f records/s over %d partitions: push p50 %s, p99 %s, max %s ms (aim p99 ≤ 20 ms); WebSocket p50 %s, p99 %s ms\n",
		o.Rate, o.Partitions, ms(lat.pct(0.5)), ms(lat.pct(0.99)), ms(maxLat), ms(ws.pct(0.5)), ms(ws.pct(0.99)))
	rows := []benchRow{
		{scenario: fmt.Sprintf("push to a loopback endpoint, one record a request (the default), %d partitions (%s)", partitions, where),
			unit: "records/s", baseline: fmt.Sprintf("group polls %.0f", poll), sluice: fmt.Sprintf("%.0f", median(pushes[0])),
			ratio: ratioCell(median(pushes[0]), poll), aim: "≥ 0.7"},
		{scenario: fmt.Sprintf("push to a loopback endpoint, batches of %d (json), %d partitions (%s)", o.Batch, partitions, where),
			unit: "records/s", baseline: fmt.Sprintf("group polls %.0f", poll), sluice: fmt.Sprintf("%.0f", median(pushes[1])),
			ratio: ratioCell(median(pushes[1]), poll), aim: "≥ 0.7"},
		{scenario: fmt.Sprintf("push delivery latency, produce acks=%s → endpoint, %.0f records/s, %d partitions (%s)", o.Acks, o.Rate, o.Partitions, where),
			unit: "ms", baseline: fmt.Sprintf("WebSocket p50 %s, p99 %s", ms(ws.pct(0.5)), ms(ws.pct(0.99))),
			sluice: fmt.Sprintf("p50 %s, p99 %s, max %s", ms(lat.pct(0.5)), ms(lat.pct(0.99)), ms(maxLat)),
			aim:    "p99 ≤ 20 ms"},
	}
	for _, r := range rows {
		if err := appendBenchRow(o.Results, r); err != nil {
			return err
		}
	}
	return nil
}

// printPushRow writes r as a row of the push table.
func printPushRow(w *figures, name string, r benchResult, start string, dups int64) {
	perReq := 0.0
	if r.requests > 0 {
		perReq = float64(r.records) / float64(r.requests)
	}
	w.printf("%-10s %12.0f %10.1f %10.0f %8.1f %8s %6d %10.2f %6.2f\n", name, r.recordsPerSec,
		float64(r.bytes)/r.elapsed.Seconds()/1e6, float64(r.requests)/r.elapsed.Seconds(), perReq, start, dups, r.cpuPerMB(), r.selfCPUPerMB())
}

// pushResult is one push round: the throughput from the first request's
// arrival to the last record's, and what came before and again.
type pushResult struct {
	benchResult
	start time.Duration // from the create's answer to the first request
	dups  int64         // records that arrived again
}

// pushStall is how long a push round waits for the next record before it
// fails.
const pushStall = 30 * time.Second

// pushRound creates a subscription of topic from earliest pushing to a
// fresh path of ep, waits until ep has every one of want records, and
// deletes it.
func pushRound(ctx context.Context, sc *client.Client, ep *pushEndpoint, topic, dlt string, v pushVariant, round int, want int64) (pushResult, error) {
	name := fmt.Sprintf("bench-%s-%d-%d", v.name, time.Now().UnixNano(), round)
	set := newOffsetSet(want)
	path := "/" + name
	ep.register(path, &countTarget{set: set, batched: v.batch > 1})
	defer ep.register(path, nil)
	cfg := api.PushConfig{Name: name, Topics: []string{topic}, Endpoint: ep.url + path, Start: api.ResetEarliest,
		Format: v.format, Batch: api.PushBatch{MaxRecords: v.batch}, DeadLetter: api.PushDeadLetter{Topic: dlt}}
	cpu := startCPU()
	if _, err := sc.CreatePush(ctx, cfg); err != nil {
		return pushResult{}, fmt.Errorf("creating the push subscription: %w", err)
	}
	created := time.Now()
	werr := set.wait(ctx, pushStall, ep.err)
	var res pushResult
	cpu.stop(&res.benchResult)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setupTimeout)
	defer cancel()
	if werr != nil {
		if st, err := sc.GetPush(dctx, name); err == nil {
			werr = fmt.Errorf("%w (subscription %s: state %s %s)", werr, name, st.State, st.Reason)
		}
	}
	if err := sc.DeletePush(dctx, name); err != nil && werr == nil {
		werr = fmt.Errorf("deleting the push subscription: %w", err)
	}
	if werr != nil {
		return pushResult{}, werr
	}
	s := set.snapshot()
	res.records, res.bytes, res.requests, res.elapsed = s.counted, s.countedBytes, s.requests, s.last.Sub(s.first)
	if res.elapsed <= 0 { // everything came in the first request
		res.records, res.bytes, res.elapsed = s.distinct, s.bytes, s.last.Sub(created)
	}
	res.start, res.dups = s.first.Sub(created), s.dups
	res.finish()
	return res, nil
}

// pushLatency measures the delivery latency of a subscription with the
// default settings, from latest of Topic-latency, while a paced producer
// writes o.Rate records a second for o.Duration (after a warm-up second
// that also covers the pusher's start); then, as a reference, the same
// producer's records read by a WebSocket stream of every partition (the
// fetch path without the push). It returns the push's latencies and the
// WebSocket's.
func pushLatency(ctx context.Context, out *figures, sc *client.Client, ep *pushEndpoint, base string, o PushOptions) (benchResult, benchResult, error) {
	topic := o.Topic + "-latency"
	if err := ensureTopic(base, topic, o.Partitions, 1, nil); err != nil {
		return benchResult{}, benchResult{}, err
	}
	p := &e2eProducer{url: base + "/v1/topics/" + topic + "/records?acks=" + o.Acks, size: o.Size, conns: 8}
	out.printf("latency: produce acks=%s at %.0f records/s for %s into %d partitions, each target after a one-second warm-up: push (a subscription with the default settings: binary, ordering partition, one record a request; from latest), then WebSocket streams of every partition\n",
		o.Acks, o.Rate, o.Duration, o.Partitions)
	out.printf("%-10s %10s %10s %10s %10s %10s %12s %12s\n", "target", "records", "p50 ms", "p99", "p999", "max", "produce p50", "produce p99")
	row := func(name string, lat []time.Duration) benchResult {
		r := benchResult{latencies: lat}
		r.finish()
		out.printf("%-10s %10d %10s %10s %10s %10s %12s %12s\n", name, len(lat), ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.pct(0.999)), ms(r.latencies[len(r.latencies)-1]), ms(p.reqP50), ms(p.reqP99))
		return r
	}
	lat, err := pushLatencyRun(ctx, sc, ep, p, topic, o)
	if err != nil {
		return benchResult{}, benchResult{}, err
	}
	pr := row("push", lat)
	rcv, err := startE2EReceivers(ctx, sc, topic, o.Partitions)
	if err != nil {
		return benchResult{}, benchResult{}, err
	}
	defer rcv.close()
	if _, err := p.run(ctx, rcv, o.Rate, time.Second); err != nil {
		return benchResult{}, benchResult{}, fmt.Errorf("latency warm-up: %w", err)
	}
	lat, err = p.run(ctx, rcv, o.Rate, o.Duration)
	if err != nil {
		return benchResult{}, benchResult{}, err
	}
	return pr, row("websocket", lat), nil
}

// pushLatencyRun creates the latency run's subscription, produces through
// p for the warm-up and o.Duration, and deletes the subscription.
func pushLatencyRun(ctx context.Context, sc *client.Client, ep *pushEndpoint, p *e2eProducer, topic string, o PushOptions) ([]time.Duration, error) {
	name := fmt.Sprintf("bench-push-latency-%d", time.Now().UnixNano())
	rcv := &latencyTarget{ep: ep}
	rcv.collect(&e2eCollector{})
	path := "/" + name
	ep.register(path, rcv)
	defer ep.register(path, nil)
	if _, err := sc.CreatePush(ctx, api.PushConfig{Name: name, Topics: []string{topic}, Endpoint: ep.url + path, Start: api.ResetLatest,
		DeadLetter: api.PushDeadLetter{Topic: o.Topic + ".dlt"}}); err != nil {
		return nil, fmt.Errorf("creating the push subscription: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setupTimeout)
		defer cancel()
		_ = sc.DeletePush(dctx, name) // a throwaway subscription; the figures are taken
	}()
	if _, err := p.run(ctx, rcv, o.Rate, time.Second); err != nil {
		return nil, fmt.Errorf("latency warm-up: %w", err)
	}
	return p.run(ctx, rcv, o.Rate, o.Duration)
}

// pushTarget takes the requests of one path of the endpoint.
type pushTarget interface {
	// receive takes one request that arrived (its body read) at now; an
	// error is a request the bench cannot count, which fails the run.
	receive(now time.Time, h http.Header, body []byte) error
}

// pushEndpoint is the HTTP server subscriptions push to: on 127.0.0.1,
// answering 204 to every request once its target took it. Serve runs on a
// goroutine started here and waited for by close.
type pushEndpoint struct {
	url    string
	srv    *http.Server
	served chan struct{} // closed when Serve returned

	mu      sync.Mutex // guards targets and first
	targets map[string]pushTarget
	first   error // the first request a target could not count

	bufs sync.Pool // *bytes.Buffer, one per request being read
}

func startPushEndpoint() (*pushEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &pushEndpoint{url: "http://" + ln.Addr().String(), served: make(chan struct{}), targets: map[string]pushTarget{}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(e.served)
		_ = e.srv.Serve(ln) // ends with ErrServerClosed at close
	}()
	return e, nil
}

// register routes path to t; a nil t drops the path (its requests are
// answered and not counted).
func (e *pushEndpoint) register(path string, t pushTarget) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t == nil {
		delete(e.targets, path)
		return
	}
	e.targets[path] = t
}

func (e *pushEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
			e.mu.Lock()
			if e.first == nil {
				e.first = fmt.Errorf("the endpoint could not count a request to %s: %w", r.URL.Path, err)
			}
			e.mu.Unlock()
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// err is the first request a target could not count, or nil.
func (e *pushEndpoint) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.first
}

// close stops the server and waits for it.
func (e *pushEndpoint) close() {
	_ = e.srv.Close() // the bench is over; open requests are cut
	<-e.served
}

// countTarget counts a throughput round's records: from the sluice-*
// headers of one-record requests, from the JSON array of a batch.
type countTarget struct {
	set     *offsetSet
	batched bool
}

func (t *countTarget) receive(now time.Time, h http.Header, body []byte) error {
	if t.batched {
		var recs []api.GroupRecord
		if err := json.Unmarshal(body, &recs); err != nil {
			return err
		}
		pr := make([]pushedRecord, len(recs))
		for i, r := range recs {
			pr[i] = pushedRecord{partition: r.Partition, offset: r.Offset, bytes: len(r.Value)}
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
	ep  *pushEndpoint
	cur atomic.Pointer[e2eCollector]
}

func (t *latencyTarget) collect(c *e2eCollector) { t.cur.Store(c) }

func (t *latencyTarget) err() error { return t.ep.err() }

func (t *latencyTarget) receive(now time.Time, _ http.Header, body []byte) error {
	sent, ok := sentAtValue(body)
	if !ok {
		return fmt.Errorf("a body without a send time: %.60q", body)
	}
	t.cur.Load().add([]time.Duration{now.Sub(time.Unix(0, sent))})
	return nil
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
	mu   sync.Mutex         // guards every field below but want and done
	seen map[int32][]uint64 // a bit per offset of each partition
	offsetCounts
	want int64
	done chan struct{} // closed when distinct reaches want
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
	return &offsetSet{seen: map[int32][]uint64{}, want: want, done: make(chan struct{})}
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
			close(s.done)
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

// wait returns once s holds want distinct records; an error when ctx
// ends, when failed reports one, or when no new record came for stall.
func (s *offsetSet) wait(ctx context.Context, stall time.Duration, failed func() error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, since := int64(-1), time.Now()
	for {
		select {
		case <-s.done:
			return failed()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := failed(); err != nil {
			return err
		}
		n := s.snapshot().distinct
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			return fmt.Errorf("the endpoint has %d of %d records, and none came for %s", n, s.want, stall)
		}
	}
}
