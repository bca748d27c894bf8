package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// E2EOptions configure E2E (`sluice bench e2e`).
type E2EOptions struct {
	// URL is the gateway; empty starts a cluster of Brokers for the run.
	URL string
	// Brokers of a started cluster. Default 3.
	Brokers int
	// ReplicationFactor of the created topic. Default 3.
	ReplicationFactor int
	// Acks of the produce requests: 0, 1 or all. Default "all".
	Acks string
	// Topic is created if missing. Default "bench-e2e".
	Topic string
	// Partitions of a created topic; one WebSocket consumer each. Default 4.
	Partitions int
	// Configs are a created topic's configs (flush.ms, …). Default none.
	Configs map[string]string
	// Rates are the records per second to produce, each in (0, 1e6].
	// Default 1,000 and 50,000.
	Rates []float64
	// Size is bytes per record value (a JSON object holding its send
	// time), at least 40. Default 100.
	Size int
	// Connections is how many produce requests are in flight at most.
	// Default 32.
	Connections int
	// Duration is how long each rate runs in a round. Default 5 s.
	Duration time.Duration
	// Rounds, each running every rate. Default 3.
	Rounds int
	// Processes runs the started cluster as processes of Binary (default:
	// this process's executable), coordinated through the ZooKeeper at ZK.
	// Default false: in this process.
	Processes bool
	ZK        string
	Binary    string
	// Results, when set, is a Markdown file the run appends its rows to.
	Results string
	// Out receives the figures. Default os.Stdout.
	Out io.Writer
}

// DefaultE2E returns the defaults of E2EOptions.
func DefaultE2E() E2EOptions {
	return E2EOptions{Brokers: 3, ReplicationFactor: 3, Acks: "all", Topic: "bench-e2e", Partitions: 4,
		Rates: []float64{1000, 50000}, Size: 100, Connections: 32, Duration: 5 * time.Second, Rounds: 3}
}

// E2E is `sluice bench e2e`: end-to-end latency from a paced producer
// (acks=all) to WebSocket consumers of every partition, in one process, so
// the produce time written into each record and the time it arrives come
// from one clock. Each rate runs for Duration per round; rounds alternate
// the rates, and each record's latency is counted from the time it was
// scheduled to leave, so a producer held up by a slow answer does not hide
// the wait (no coordinated omission).
func E2E(ctx context.Context, o E2EOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	for _, v := range o.Rates {
		if v <= 0 || v > 1e6 {
			return fmt.Errorf("--rates: %v is not a rate in (0, 1e6]", v)
		}
	}
	if len(o.Rates) == 0 {
		return errors.New("--rates: no rate")
	}
	if o.Size < 40 || o.Connections < 1 || o.Rounds < 1 || o.Partitions < 1 || o.Duration <= 0 {
		return errors.New("--size must be >= 40, --connections, --rounds and --partitions >= 1, --duration > 0")
	}
	rates := o.Rates
	bc, err := startCluster(ctx, clusterSpec{url: o.URL, brokers: o.Brokers, processes: o.Processes, zk: o.ZK, binary: o.Binary})
	if err != nil {
		return err
	}
	defer bc.stop()
	base := bc.url
	where := "in one process"
	switch {
	case o.URL != "":
		where = o.URL
	case o.Processes:
		where = "processes + ZooKeeper"
	}
	if err := ensureTopic(base, o.Topic, o.Partitions, o.ReplicationFactor, o.Configs); err != nil {
		return err
	}
	cl, err := newClient(base)
	if err != nil {
		return err
	}
	defer cl.Close()
	rcv, err := startE2EReceivers(ctx, cl, o.Topic, o.Partitions)
	if err != nil {
		return err
	}
	defer rcv.close()
	p := &e2eProducer{url: base + "/v1/topics/" + o.Topic + "/records?acks=" + o.Acks, size: o.Size, conns: o.Connections}
	out.printf("e2e: produce acks=%s, replication factor %d, %d brokers (%s) → %d WebSocket consumers; %s per rate per round, %d rounds\n",
		o.Acks, o.ReplicationFactor, o.Brokers, where, o.Partitions, o.Duration, o.Rounds)
	// A warm-up at the first rate: connections, the first segment's pages.
	if _, err := p.run(ctx, rcv, rates[0], time.Second); err != nil {
		return err
	}
	out.printf("%-6s %10s %10s %10s %10s %10s %10s %12s %12s\n", "round", "rate", "records", "p50 ms", "p99", "p999", "max", "produce p50", "produce p99")
	all := make([][]time.Duration, len(rates))
	p99s := make([][]float64, len(rates))
	for round := 0; round < o.Rounds; round++ {
		for i, rate := range rates {
			lat, err := p.run(ctx, rcv, rate, o.Duration)
			if err != nil {
				return err
			}
			r := benchResult{latencies: lat}
			r.finish()
			out.printf("%-6d %10.0f %10d %10s %10s %10s %10s %12s %12s\n", round+1, rate, len(lat), ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.pct(0.999)), ms(r.latencies[len(r.latencies)-1]), ms(p.reqP50), ms(p.reqP99))
			all[i] = append(all[i], lat...)
			p99s[i] = append(p99s[i], float64(r.pct(0.99)))
		}
	}
	for i, rate := range rates {
		r := benchResult{latencies: all[i]}
		r.finish()
		out.printf("at %.0f records/s over all rounds: p50 %s, p99 %s, p999 %s ms; median of the rounds' p99 %s ms\n",
			rate, ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.pct(0.999)), ms(time.Duration(median(p99s[i]))))
		aim := "—"
		if rate <= 1000 {
			aim = "p99 ≤ 5 ms"
		}
		if err := appendBenchRow(o.Results, benchRow{
			scenario: fmt.Sprintf("end to end, produce acks=%s RF=%d → WebSocket, %.0f records/s (%s)", o.Acks, o.ReplicationFactor, rate, where),
			unit:     "ms", sluice: fmt.Sprintf("p50 %s, p99 %s, p999 %s", ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.pct(0.999))),
			aim: aim}); err != nil {
			return err
		}
	}
	return nil
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

// e2eProducer posts NDJSON bodies whose records carry the time they were
// scheduled to leave: {"t":<unix ns>,"p":"xxx..."}.
type e2eProducer struct {
	url   string
	size  int
	conns int
	// The last run's produce request latency (from leaving to the answer).
	reqP50, reqP99 time.Duration
}

// latencyReceiver is where a paced producer's records arrive (WebSocket
// consumers, a push endpoint): each arrival's latency goes to the collector
// it was given last.
type latencyReceiver interface {
	collect(*e2eCollector)
	// err is the first failure of a receiver, or nil.
	err() error
}

// run produces at rate for d, then waits until the receivers have every
// record that was acknowledged, and returns their latencies.
func (p *e2eProducer) run(ctx context.Context, rcv latencyReceiver, rate float64, d time.Duration) ([]time.Duration, error) {
	col := &e2eCollector{}
	rcv.collect(col)
	// A tick every millisecond (or one per record below 1,000/s), each
	// sending the records due by then.
	interval := max(time.Millisecond, time.Duration(float64(time.Second)/rate))
	hc := benchClient(p.conns)
	defer hc.CloseIdleConnections()
	type send struct {
		at time.Time
		n  int
	}
	sends := make(chan send, 1<<16)
	var (
		sent     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
		reqMu    sync.Mutex
		reqLat   []time.Duration
	)
	for range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body bytes.Buffer
			for s := range sends {
				if firstErr.Load() != nil {
					continue
				}
				body.Reset()
				p.fill(&body, s.at, s.n)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body.Bytes()))
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				req.Header.Set("Content-Type", "application/x-ndjson")
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("produce answered %d", resp.StatusCode)
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				sent.Add(int64(s.n))
				reqMu.Lock()
				reqLat = append(reqLat, time.Since(t0))
				reqMu.Unlock()
			}
		}()
	}
	start := time.Now()
	var due float64
	for next := start; next.Sub(start) < d && ctx.Err() == nil && firstErr.Load() == nil; next = next.Add(interval) {
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		due += rate * interval.Seconds()
		if n := int(due); n > 0 {
			due -= float64(n)
			select {
			case sends <- send{at: next, n: n}:
			default:
				close(sends)
				wg.Wait()
				return nil, fmt.Errorf("the producer is more than %d requests behind %.0f records/s", cap(sends), rate)
			}
		}
	}
	close(sends)
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return nil, *e
	}
	want := sent.Load()
	rr := benchResult{latencies: reqLat}
	rr.finish()
	p.reqP50, p.reqP99 = rr.pct(0.5), rr.pct(0.99)
	for deadline := time.Now().Add(30 * time.Second); col.count() < want; time.Sleep(10 * time.Millisecond) {
		if err := rcv.err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("consumers have %d of %d acknowledged records after 30 s", col.count(), want)
		}
	}
	return col.take(), nil
}

// fill writes n records stamped at into b, each value p.size bytes.
func (p *e2eProducer) fill(b *bytes.Buffer, at time.Time, n int) {
	head := `{"value":{"t":` + strconv.FormatInt(at.UnixNano(), 10) + `,"p":"`
	pad := strings.Repeat("x", max(1, p.size-len(head)+len(`{"value":`)-len(`"}`)))
	for range n {
		b.WriteString(head)
		b.WriteString(pad)
		b.WriteString("\"}}\n")
	}
}

// e2eCollector gathers one run's latencies.
type e2eCollector struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (c *e2eCollector) add(l []time.Duration) {
	c.mu.Lock()
	c.lat = append(c.lat, l...)
	c.mu.Unlock()
}

func (c *e2eCollector) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.lat))
}

func (c *e2eCollector) take() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.lat
	c.lat = nil
	return out
}

// e2eReceivers are one WebSocket stream per partition, from the end of the
// log; each record's latency goes to the current collector. One goroutine
// per stream, owned here and ended by close.
type e2eReceivers struct {
	cur     atomic.Pointer[e2eCollector]
	streams []*client.Stream
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	errMu   sync.Mutex
	first   error
}

func startE2EReceivers(ctx context.Context, cl *client.Client, topic string, partitions int) (*e2eReceivers, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &e2eReceivers{cancel: cancel}
	r.cur.Store(&e2eCollector{})
	for p := range partitions {
		s, err := cl.Stream(ctx, topic, int32(p), client.StreamOptions{From: client.Latest, Buffer: 20000})
		if err != nil {
			r.close()
			return nil, err
		}
		r.streams = append(r.streams, s)
	}
	for _, s := range r.streams {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			var lat []time.Duration
			for {
				recs, err := s.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						r.errMu.Lock()
						r.first = cmpErr(r.first, err)
						r.errMu.Unlock()
					}
					return
				}
				now := time.Now().UnixNano()
				lat = lat[:0]
				for i := range recs {
					if t, ok := sentAt(recs[i]); ok {
						lat = append(lat, time.Duration(now-t))
					}
				}
				r.cur.Load().add(lat)
			}
		}()
	}
	return r, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (r *e2eReceivers) collect(c *e2eCollector) { r.cur.Store(c) }

func (r *e2eReceivers) err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.first
}

// close ends the streams and waits for their goroutines.
func (r *e2eReceivers) close() {
	r.cancel()
	for _, s := range r.streams {
		_ = s.Close() // a Stream's Close never fails
	}
	r.wg.Wait()
}

// sentAt reads the send time out of a record's value {"t":<ns>,...}.
func sentAt(r api.FetchedRecord) (int64, bool) { return sentAtValue(r.Value) }

// sentAtValue reads the send time out of a value {"t":<ns>,...}.
func sentAtValue(value []byte) (int64, bool) {
	v, ok := bytes.CutPrefix(value, []byte(`{"t":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(v, ',')
	if end < 0 {
		return 0, false
	}
	t, err := strconv.ParseInt(string(v[:end]), 10, 64)
	return t, err == nil
}
