package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/push"
)

// PushOptions configure Push (`sluice bench push`).
type PushOptions struct {
	// URL is the gateway; empty starts a cluster of Brokers for the run.
	// The endpoint listens on 127.0.0.1, so a gateway at URL must run on
	// this machine with --push-allow-private.
	URL string
	// Brokers of a started cluster. Default 1.
	Brokers int
	// Processes runs the started cluster as processes of Binary,
	// coordinated through the ZooKeeper at ZK. Default false: in this
	// process.
	Processes bool
	ZK        string
	// Binary is the sluice binary of the endpoint process (`sluice bench
	// push --endpoint`) and of a cluster's processes. Default: this
	// process's executable.
	Binary string
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
	// Batches are the batch.max_records of the batched pushes (format
	// json), each in [2, 1000]. Default 100, 500 and 1,000.
	Batches []int
	// Connections bounds the group members of the poll baseline (at most
	// one per partition). Default 8.
	Connections int
	// Targets the rounds run, in this order: poll, http, http-headers,
	// push-1 and push-<batch> for each of Batches. Default all of them.
	// Without poll or http the ratios to them are not printed.
	Targets []string
	// Rounds, each running every target once. Default 3.
	Rounds int
	// Rate of the latency run, records per second in (0, 1e6]; 0 skips the
	// latency run. Default 1,000.
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
	return PushOptions{Brokers: 1, Topic: "bench-push", Partitions: 8, Records: 50000, Size: 100, Batches: []int{100, 500, 1000},
		Connections: 8, Rounds: 3, Rate: 1000, Duration: 10 * time.Second, Acks: "1"}
}

// pushVariant is one way of pushing the throughput rounds' records.
type pushVariant struct {
	name   string // the table's target
	format string // api.PushFormat*; "" is the default (binary)
	batch  int    // batch.max_records; 0 is the default (1)
}

// The baselines' target names.
const (
	targetPoll = "poll"
	targetHTTP = "http"
	// targetHTTPHeaders is the plain POSTs with the headers a one-record
	// push carries, set as constants: what the HTTP stack costs with them.
	targetHTTPHeaders = "http-headers"
)

// Push is `sluice bench push`: a push subscription delivering a filled
// topic from its start to an HTTP endpoint in a process of its own (Binary's
// `sluice bench push --endpoint` on 127.0.0.1, answering 204 at once,
// counting the distinct records it received), one record a request (the
// default) and in batches, in alternating rounds with two baselines: group
// polls of the same records, and plain HTTP POSTs of the same records'
// values to the same endpoint, one request in flight per partition as the
// one-record push has (what the HTTP client and server alone allow),
// without and with the headers a push carries. Then
// the delivery latency from a paced producer to the endpoint, with the
// default settings, and to WebSocket streams of the same topic for
// reference.
func Push(ctx context.Context, o PushOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	switch {
	case o.Size < 40 || o.Records < 1 || o.Rounds < 1 || o.Partitions < 1 || o.Connections < 1:
		return errors.New("--size must be >= 40, --records, --rounds, --partitions and --connections >= 1")
	case o.Rate < 0 || o.Rate > 1e6 || o.Rate > 0 && o.Duration <= 0:
		return errors.New("--rate must be in [0, 1e6] and --duration > 0")
	}
	variants := []pushVariant{{name: "push-1"}}
	for _, b := range o.Batches {
		if b < 2 || b > 1000 {
			return fmt.Errorf("--batch: %d is not in [2, 1000]", b)
		}
		variants = append(variants, pushVariant{name: fmt.Sprintf("push-%d", b), format: api.PushFormatJSON, batch: b})
	}
	all := []string{targetPoll, targetHTTP, targetHTTPHeaders}
	for _, v := range variants {
		all = append(all, v.name)
	}
	targets := o.Targets
	if len(targets) == 0 {
		targets = all
	}
	for _, t := range targets {
		if !slices.Contains(all, t) {
			return fmt.Errorf("--targets: %q is none of %s", t, strings.Join(all, ", "))
		}
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
	ep, err := startPushEndpoint(ctx, o.Binary)
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
	var bodies [][]httpBody
	if slices.Contains(targets, targetHTTP) || slices.Contains(targets, targetHTTPHeaders) {
		if bodies, err = readBodies(ctx, sc, t); err != nil {
			return err
		}
	}
	members := min(o.Connections, len(t.Partitions))
	dlt := o.Topic + ".dlt"
	var batches []string
	for _, v := range variants[1:] {
		batches = append(batches, v.name)
	}
	out.printf("push: %d records of %d bytes in %d partitions (%s); the endpoint is another process on 127.0.0.1 answering 204; "+
		"poll: %d group members (polls of up to 10,000, committing beside them); http: plain POSTs of the records' values to the endpoint, "+
		"%d in flight (one per partition), the pushers' HTTP client; http-headers: the same with a one-record push's headers as constants; push: a subscription from earliest, ordering partition: push-1 one record a request, "+
		"binary (the default), %s batches, json\n", want, o.Size, len(t.Partitions), where, members, len(t.Partitions), strings.Join(batches, ", "))
	out.printf("%-12s %12s %10s %10s %8s %8s %6s %10s %6s %6s\n", "target", "records/s", "MB/s", "req/s", "rec/req", "start", "dup", "cpu ms/MB", "own", "ep")
	rates := map[string][]float64{}
	for round := 0; round < o.Rounds; round++ {
		for _, target := range targets {
			var res pushResult
			switch target {
			case targetPoll: // it measures its own CPU, from its first poll
				e0, err := ep.cpu(ctx)
				if err != nil {
					return err
				}
				res.benchResult, _, err = benchGroupRound(ctx, tc, fmt.Sprintf("bench-push-poll-%d-%d", time.Now().UnixNano(), round), members, want)
				if err != nil {
					return err
				}
				e1, err := ep.cpu(ctx)
				if err != nil {
					return err
				}
				res.epCPU, res.startCell = e1-e0, "-"
			case targetHTTP, targetHTTPHeaders:
				res, err = httpRound(ctx, ep, o.Topic, bodies, round, want, target == targetHTTPHeaders)
			default:
				v := variants[slices.IndexFunc(variants, func(v pushVariant) bool { return v.name == target })]
				res, err = pushRound(ctx, sc, ep, o.Topic, dlt, v, round, want)
			}
			if err != nil {
				return err
			}
			printPushRow(out, target, res)
			rates[target] = append(rates[target], res.recordsPerSec)
		}
	}
	var lat, ws benchResult
	if o.Rate > 0 {
		if lat, ws, err = pushLatency(ctx, out, sc, ep, cl.url, o); err != nil {
			return err
		}
	}
	return pushSummary(out, o, variants, len(t.Partitions), where, rates, lat, ws)
}

// pushSummary prints the medians, ratios and latencies, and appends the
// rows of the results table.
func pushSummary(out *figures, o PushOptions, variants []pushVariant, partitions int, where string, rates map[string][]float64, lat, ws benchResult) error {
	var meds []string
	for _, name := range append([]string{targetPoll, targetHTTP, targetHTTPHeaders}, func() []string {
		var n []string
		for _, v := range variants {
			n = append(n, v.name)
		}
		return n
	}()...) {
		if r := rates[name]; len(r) > 0 {
			meds = append(meds, fmt.Sprintf("%s %.0f", name, median(r)))
		}
	}
	out.printf("median records/s: %s\n", strings.Join(meds, ", "))
	poll, plain, headed := median(rates[targetPoll]), median(rates[targetHTTP]), median(rates[targetHTTPHeaders])
	var rows []benchRow
	if one := median(rates["push-1"]); one > 0 && plain > 0 {
		out.printf("ratio push-1/http: %.2f (one record a request against plain POSTs of the same bodies, the same requests in flight; aim ≥ 0.7)", one/plain)
		if headed > 0 {
			out.printf("; push-1/http-headers %.2f, http-headers/http %.2f", one/headed, headed/plain)
		}
		if poll > 0 {
			out.printf("; push-1/poll %.2f", one/poll)
		}
		out.printf("\n")
		rows = append(rows, benchRow{
			scenario: fmt.Sprintf("push to an endpoint process on loopback, one record a request (the default), %d partitions (%s)", partitions, where),
			unit:     "records/s", baseline: fmt.Sprintf("plain POSTs of the same bodies, %d in flight: %.0f (with a push's headers: %.0f)", partitions, plain, headed),
			sluice: fmt.Sprintf("%.0f", one),
			ratio:  ratioCell(one, plain), aim: "≥ 0.7"})
	}
	if poll > 0 {
		var ratios []string
		for _, v := range variants[1:] {
			b := median(rates[v.name])
			if b <= 0 {
				continue
			}
			ratios = append(ratios, fmt.Sprintf("%s %.2f", v.name, b/poll))
			rows = append(rows, benchRow{
				scenario: fmt.Sprintf("push to an endpoint process on loopback, batches of %d (json), %d partitions (%s)", v.batch, partitions, where),
				unit:     "records/s", baseline: fmt.Sprintf("group polls %.0f", poll), sluice: fmt.Sprintf("%.0f", b), ratio: ratioCell(b, poll), aim: "≥ 0.7"})
		}
		if len(ratios) > 0 {
			out.printf("ratio batched push/poll: %s (aim ≥ 0.7)\n", strings.Join(ratios, ", "))
		}
	}
	if len(lat.latencies) > 0 {
		maxLat := lat.latencies[len(lat.latencies)-1]
		out.printf("delivery latency at %.0f records/s over %d partitions: push p50 %s, p99 %s, max %s ms (aim p99 ≤ 20 ms); WebSocket p50 %s, p99 %s ms\n",
			o.Rate, o.Partitions, ms(lat.pct(0.5)), ms(lat.pct(0.99)), ms(maxLat), ms(ws.pct(0.5)), ms(ws.pct(0.99)))
		rows = append(rows, benchRow{
			scenario: fmt.Sprintf("push delivery latency, produce acks=%s → endpoint process, %.0f records/s, %d partitions (%s)", o.Acks, o.Rate, o.Partitions, where),
			unit:     "ms", baseline: fmt.Sprintf("WebSocket p50 %s, p99 %s", ms(ws.pct(0.5)), ms(ws.pct(0.99))),
			sluice: fmt.Sprintf("p50 %s, p99 %s, max %s", ms(lat.pct(0.5)), ms(lat.pct(0.99)), ms(maxLat)),
			aim:    "p99 ≤ 20 ms"})
	}
	for _, r := range rows {
		if err := appendBenchRow(o.Results, r); err != nil {
			return err
		}
	}
	return nil
}

// printPushRow writes r as a row of the push table.
func printPushRow(w *figures, name string, r pushResult) {
	perReq := 0.0
	if r.requests > 0 {
		perReq = float64(r.records) / float64(r.requests)
	}
	start := r.startCell
	if start == "" {
		start = ms(r.start) + "ms"
	}
	epPerMB := 0.0
	if r.bytes > 0 {
		epPerMB = float64(r.epCPU.Milliseconds()) / (float64(r.bytes) / 1e6)
	}
	w.printf("%-12s %12.0f %10.1f %10.0f %8.1f %8s %6d %10.2f %6.2f %6.2f\n", name, r.recordsPerSec,
		float64(r.bytes)/r.elapsed.Seconds()/1e6, float64(r.requests)/r.elapsed.Seconds(), perReq, start, r.dups, r.cpuPerMB(), r.selfCPUPerMB(), epPerMB)
}

// pushResult is one round of a target: the throughput from the first
// request's arrival to the last record's, what came before and again, and
// the endpoint process's CPU.
type pushResult struct {
	benchResult
	start     time.Duration // from the create request (the first POST) to the first request's arrival
	startCell string        // the start column when start does not apply
	dups      int64         // records that arrived again
	epCPU     time.Duration // the endpoint process's CPU during the round
}

// pushCPU measures a round's host, own and endpoint process CPU.
type pushCPU struct {
	cpuMeter
	ep time.Duration
}

func startPushCPU(ctx context.Context, ep *pushEndpoint) (pushCPU, error) {
	e, err := ep.cpu(ctx)
	return pushCPU{cpuMeter: startCPU(), ep: e}, err
}

func (m pushCPU) stop(ctx context.Context, ep *pushEndpoint, r *pushResult) error {
	m.cpuMeter.stop(&r.benchResult)
	e, err := ep.cpu(ctx)
	r.epCPU = e - m.ep
	return err
}

// pushStall is how long a round waits for the next record before it fails.
const pushStall = 30 * time.Second

// countedRound has the endpoint count the requests to a fresh path name
// until it has want records: send starts sending them (and returns what
// the round's start counts from), finish ends what send started (it runs
// whatever happened).
func countedRound(ctx context.Context, ep *pushEndpoint, name string, batched bool, want int64,
	send func(path string) (time.Time, error), finish func(failed error) error) (pushResult, error) {
	path := "/" + name
	if err := ep.count(ctx, path, batched, want); err != nil {
		return pushResult{}, err
	}
	defer ep.drop(ctx, path)
	cpu, err := startPushCPU(ctx, ep)
	if err != nil {
		return pushResult{}, err
	}
	began, err := send(path)
	var s offsetCounts
	if err == nil {
		s, err = waitAll(ctx, want, 20*time.Millisecond, pushStall, func() (offsetCounts, error) { return ep.counts(ctx, path) })
	}
	var res pushResult
	if cerr := cpu.stop(ctx, ep, &res); err == nil {
		err = cerr
	}
	if ferr := finish(err); ferr != nil {
		return pushResult{}, ferr
	}
	res.records, res.bytes, res.requests, res.elapsed = s.counted, s.countedBytes, s.requests, s.last.Sub(s.first)
	if res.elapsed <= 0 { // everything came in the first request
		res.records, res.bytes, res.elapsed = s.distinct, s.bytes, s.last.Sub(began)
	}
	res.start, res.dups = s.first.Sub(began), s.dups
	res.finish()
	return res, nil
}

// pushRound creates a subscription of topic from earliest pushing to a
// fresh path of ep, waits until ep has every one of want records, and
// deletes it.
func pushRound(ctx context.Context, sc *client.Client, ep *pushEndpoint, topic, dlt string, v pushVariant, round int, want int64) (pushResult, error) {
	name := fmt.Sprintf("bench-%s-%d-%d", v.name, time.Now().UnixNano(), round)
	return countedRound(ctx, ep, name, v.batch > 1, want, func(path string) (time.Time, error) {
		cfg := api.PushConfig{Name: name, Topics: []string{topic}, Endpoint: ep.url + path, Start: api.ResetEarliest,
			Format: v.format, Batch: api.PushBatch{MaxRecords: v.batch}, DeadLetter: api.PushDeadLetter{Topic: dlt}}
		began := time.Now()
		if _, err := sc.CreatePush(ctx, cfg); err != nil {
			return time.Time{}, fmt.Errorf("creating the push subscription: %w", err)
		}
		return began, nil
	}, func(werr error) error {
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
		return werr
	})
}

// httpBody is one record's value and where it came from.
type httpBody struct {
	offset int64
	value  []byte
}

// readBodies reads every record of t, per partition: the bodies of the
// plain POSTs.
func readBodies(ctx context.Context, sc *client.Client, t api.Topic) ([][]httpBody, error) {
	out := make([][]httpBody, len(t.Partitions))
	for i, p := range t.Partitions {
		for off := p.LogStartOffset; off < p.HighWatermark; {
			fctx, cancel := context.WithTimeout(ctx, setupTimeout)
			res, err := sc.Fetch(fctx, t.Name, p.Partition, client.At(off), client.FetchOptions{MaxRecords: 10000, MaxBytes: 16 << 20})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("reading the records for the plain POSTs: %w", err)
			}
			if len(res.Records) == 0 {
				return nil, fmt.Errorf("reading the records for the plain POSTs: partition %d has none at %d", p.Partition, off)
			}
			for _, r := range res.Records {
				v := []byte(r.Value)
				if r.ValueB64 != nil {
					if v, err = base64.StdEncoding.DecodeString(*r.ValueB64); err != nil {
						return nil, err
					}
				}
				out[i] = append(out[i], httpBody{offset: r.Offset, value: v})
			}
			off = res.NextOffset
		}
	}
	return out, nil
}

// httpRound POSTs every record's value to a fresh path of ep, a goroutine
// per partition sending its records one after the other, each once the
// last was answered (as the one-record push does), through the client the
// pushers use; the offset and partition go in the headers the endpoint
// counts by. With pushHeaders each request also carries the other headers
// of a one-record push (binary), as constants of the same length.
func httpRound(ctx context.Context, ep *pushEndpoint, topic string, bodies [][]httpBody, round int, want int64, pushHeaders bool) (pushResult, error) {
	hc := push.NewHTTPClient(true)
	defer hc.CloseIdleConnections()
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return countedRound(ctx, ep, fmt.Sprintf("bench-http-%d-%d", time.Now().UnixNano(), round), false, want, func(path string) (time.Time, error) {
		began := time.Now()
		for p, recs := range bodies {
			part := strconv.Itoa(p)
			var extra http.Header
			if pushHeaders {
				extra = pushLikeHeaders(topic, p)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, b := range recs {
					err := postBody(rctx, hc, ep.url+path, part, b, extra)
					if err != nil {
						if rctx.Err() == nil {
							errMu.Lock()
							firstErr = cmpErr(firstErr, err)
							errMu.Unlock()
							cancel()
						}
						return
					}
				}
			}()
		}
		return began, nil
	}, func(werr error) error {
		cancel()
		wg.Wait()
		if firstErr != nil {
			return fmt.Errorf("a plain POST: %w", firstErr)
		}
		return werr
	})
}

// pushLikeHeaders are the headers of a one-record push of topic's
// partition p in binary mode but the two postBody sets, their values
// constants as long as a push's.
func pushLikeHeaders(topic string, p int) http.Header {
	sub := "bench-push-1-1700000000000000000-0"
	return http.Header{
		"Webhook-Id":        {sub + "." + topic + "." + strconv.Itoa(p) + ".12345"},
		"Webhook-Timestamp": {"1700000000"},
		"Webhook-Signature": {"v1," + strings.Repeat("A", 43) + "="},
		"Sluice-Topic":      {topic},
		"Sluice-Attempt":    {"1"},
		"Sluice-Fence":      {"1"},
		"Ce-Specversion":    {"1.0"},
		"Ce-Id":             {topic + "-" + strconv.Itoa(p) + "-12345"},
		"Ce-Source":         {"sluice://sluice/topics/" + topic},
		"Ce-Type":           {"sluice.record"},
		"Ce-Time":           {"2026-12-02T03:04:05.678Z"},
		"User-Agent":        {"sluice-push/1"},
	}
}

// postBody sends one plain POST, with extra's headers too, and reads its
// answer.
func postBody(ctx context.Context, hc *http.Client, url, partition string, b httpBody, extra http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b.value))
	if err != nil {
		return err
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sluice-Partition", partition)
	req.Header.Set("Sluice-Offset", strconv.FormatInt(b.offset, 10))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the endpoint answered %d", resp.StatusCode)
	}
	return nil
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
	out.printf("latency: produce acks=%s at %.0f records/s for %s into %d partitions, each target after a one-second warm-up: push (a subscription with the default settings: binary, ordering partition, one record a request; from latest) to the endpoint process, then WebSocket streams of every partition\n",
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
	path := "/" + name
	if err := ep.latency(ctx, path); err != nil {
		return nil, err
	}
	defer ep.drop(ctx, path)
	rcv := startRemoteLatencies(ctx, ep, path)
	defer rcv.stop()
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
