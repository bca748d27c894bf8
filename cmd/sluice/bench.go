package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/recordbatch"
	"github.com/sluice-io/sluice/tier"
)

// benchConfig is what one bench run drives.
type benchConfig struct {
	url         string
	topic       string
	partitions  int
	connections int
	batch       int
	size        int
	duration    time.Duration
	acks        string
	baseline    string
	brokers     int
	rf          int
	rate        float64
	raw         bool
	rounds      int
	configs     map[string]string
	// fetchRecords is max_records of a JSON consume's fetches; 0: 10,000.
	fetchRecords int
}

func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "ws" {
		return benchWS(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "sink" {
		return benchSink(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "e2e" {
		return benchE2E(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "broker" {
		return benchBroker(ctx, args[1:])
	}
	if len(args) == 0 || (args[0] != "produce" && args[0] != "consume") {
		return errors.New("usage: sluice bench produce|consume|e2e|ws|sink|broker [flags]")
	}
	mode := args[0]
	fs := flag.NewFlagSet("bench "+mode, flag.ContinueOnError)
	var c benchConfig
	fs.StringVar(&c.url, "url", "", "gateway base URL; empty starts an embedded cluster (--brokers) in a temporary directory")
	fs.IntVar(&c.brokers, "brokers", 1, "brokers of the embedded cluster")
	fs.IntVar(&c.rf, "replication-factor", 1, "replication factor of a created topic")
	fs.Float64Var(&c.rate, "rate", 0, "produce: requests per second over all connections (0: as fast as possible); use it to measure latency at a fixed load")
	fs.StringVar(&c.topic, "topic", "bench", "topic (created if missing)")
	fs.IntVar(&c.partitions, "partitions", 8, "partitions of a created topic")
	fs.IntVar(&c.connections, "connections", 8, "concurrent HTTP connections")
	fs.IntVar(&c.batch, "batch", 1000, "records per request")
	fs.IntVar(&c.size, "size", 100, "bytes per record value")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long to produce in each round")
	fs.StringVar(&c.acks, "acks", "1", "acks for produce: 0, 1 or all")
	fs.StringVar(&c.baseline, "baseline", "", "what to compare with, run in alternating rounds in the same process; produce: append (the default: a plain net/http server that only appends bodies to a file, the ceiling), rf1 (acks=1 on a replication-factor-1 topic of the same cluster) or none; consume: sendfile (with --raw: a plain HTTP server sending the same segment files with sendfile) or redis (Redis XREAD COUNT 1000 of the same records, --redis)")
	processes := fs.Bool("processes", false, "run the cluster as processes of this binary: --brokers `sluice broker` processes and a `sluice gateway`, coordinated through the ZooKeeper at --zk")
	zk := fs.String("zk", envOr("SLUICE_TEST_ZK", ""), "--processes: ZooKeeper host:port (env SLUICE_TEST_ZK)")
	redisURL := fs.String("redis", redisBenchURL(), "consume --baseline redis: the Redis to read from (env SLUICE_REDIS_URL, else SLUICE_TEST_REDIS); keys under sluice-bench:")
	resultsPath := addResultsFlag(fs)
	c.configs = map[string]string{}
	fs.Func("config", "topic config key=value for a created topic (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return errors.New("want key=value")
		}
		c.configs[k] = val
		return nil
	})
	s3 := addS3Flags(fs)
	cold := fs.Bool("cold", false, "consume: produce --records into a tiered topic and a plain one, wait until the tiered one is in the object store, then read both from offset 0 in alternating rounds (embedded cluster: objects in a temporary directory, or the --s3-* store)")
	records := fs.Int("records", 300000, "consume --cold and --group: records to write to each topic (--cold: 2000000 unless given, so that most of them are in closed 4 MiB segments)")
	group := fs.Bool("group", false, "consume: read the topic through a consumer group (members committing every poll) and with plain partition fetches, in alternating rounds; report the ratio and commit latency")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process (load generator included) to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a profile of mutex contention in the whole process (embedded cluster included) to this file: where goroutines waited on locks others held")
	fs.IntVar(&c.rounds, "rounds", 3, "produce: rounds, each running the baseline then sluice for --duration")
	fs.BoolVar(&c.raw, "raw", false, "consume: read raw batches (/batches) instead of decoded JSON records")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		defer func() {
			if err := writeProfile("mutex", *mutexProfile); err != nil {
				fmt.Fprintln(os.Stderr, "mutex profile:", err)
			}
		}()
	}
	if c.size < 2 || c.batch < 1 || c.connections < 1 || c.rounds < 1 {
		return errors.New("--size must be >= 2, --batch, --connections and --rounds >= 1")
	}
	switch {
	case c.baseline == "" && mode == "produce":
		c.baseline = "append"
	case c.baseline == "":
		c.baseline = "none"
	case mode == "produce" && c.baseline != "append" && c.baseline != "rf1" && c.baseline != "none":
		return fmt.Errorf("--baseline %q: produce compares with append, rf1 or none", c.baseline)
	case mode == "consume" && c.baseline != "sendfile" && c.baseline != "redis" && c.baseline != "none":
		return fmt.Errorf("--baseline %q: consume compares with sendfile (--raw), redis or none", c.baseline)
	case c.baseline == "sendfile" && (!c.raw || c.url != "" || *processes):
		return errors.New("--baseline sendfile reads the embedded cluster's segment files: it needs --raw, and neither --url nor --processes")
	}
	if c.baseline == "sendfile" && c.brokers != 1 {
		return errors.New("--baseline sendfile: one broker (its files are the ones served)")
	}
	var dataDir string
	if c.url == "" && *processes {
		url, stop, err := startProcessCluster(ctx, c.brokers, *zk)
		if err != nil {
			return err
		}
		defer stop()
		c.url = url
	} else if c.url == "" {
		bucket, err := s3.open(ctx)
		if err != nil {
			return err
		}
		url, dir, stop, err := startEmbedded(c.brokers, bucket)
		if err != nil {
			return err
		}
		defer stop()
		c.url, dataDir = url, dir
	}
	if err := ensureTopic(c.url, c.topic, c.partitions, c.rf, c.configs); err != nil {
		return err
	}
	rf1Topic := c.topic + "-rf1"
	if c.baseline == "rf1" {
		if err := ensureTopic(c.url, rf1Topic, c.partitions, 1, nil); err != nil {
			return err
		}
	}
	if mode == "consume" && *cold {
		n := *records
		if !flagSet(fs, "records") {
			n = 2000000
		}
		return benchCold(ctx, c, n, *resultsPath)
	}
	if mode == "consume" && *group {
		return benchGroup(ctx, c, *records, *resultsPath)
	}
	if mode == "consume" && c.baseline == "sendfile" {
		return benchSendfile(ctx, c, *records, dataDir, *resultsPath)
	}
	if mode == "consume" && c.baseline == "redis" {
		return benchConsumeRedis(ctx, c, *records, *redisURL, *resultsPath)
	}
	fmt.Printf("%s: %d connections, %d records of %d bytes per request, %s per round, acks=%s, replication factor %d\n", mode, c.connections, c.batch, c.size, c.duration, c.acks, c.rf)
	fmt.Printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	if mode == "consume" {
		res, err := benchConsume(ctx, c)
		if err != nil {
			return err
		}
		res.print("sluice")
		return nil
	}
	body := ndjsonBody(c.batch, c.size)
	var bases, results []float64
	for round := 0; round < c.rounds; round++ {
		switch c.baseline {
		case "append":
			url, stop, err := startAppendServer()
			if err != nil {
				return err
			}
			base, err := benchProduce(ctx, c, url+"/append", body)
			stop()
			if err != nil {
				return err
			}
			base.print("baseline")
			bases = append(bases, base.recordsPerSec)
		case "rf1":
			base, err := benchProduce(ctx, c, c.url+"/v1/topics/"+rf1Topic+"/records?acks=1", body)
			if err != nil {
				return err
			}
			base.print("acks1-rf1")
			bases = append(bases, base.recordsPerSec)
		}
		res, err := benchProduce(ctx, c, c.url+"/v1/topics/"+c.topic+"/records?acks="+c.acks, body)
		if err != nil {
			return err
		}
		res.print("sluice")
		results = append(results, res.recordsPerSec)
	}
	if c.baseline != "none" {
		// Rounds alternate the two targets, so slow spells of a shared
		// machine hit both; medians keep one bad round from deciding.
		fmt.Printf("median records/s: baseline %.0f, sluice %.0f; ratio sluice/baseline: %.2f\n",
			median(bases), median(results), median(results)/median(bases))
		row := benchRow{scenario: "produce", unit: "records/s", baseline: fmt.Sprintf("append-to-file HTTP server %.0f", median(bases)),
			sluice: fmt.Sprintf("%.0f", median(results)), ratio: ratioCell(median(results), median(bases))}
		if c.baseline == "rf1" {
			where := "in one process"
			if *processes {
				where = "processes + ZooKeeper"
			}
			row.scenario = fmt.Sprintf("produce acks=%s RF=%d, %d brokers (%s)", c.acks, c.rf, c.brokers, where)
			row.baseline = fmt.Sprintf("acks=1 RF=1 %.0f", median(bases))
			row.aim = "≥ 0.6"
		} else {
			row.scenario = fmt.Sprintf("produce acks=%s RF=%d", c.acks, c.rf)
		}
		return appendBenchRow(*resultsPath, row)
	}
	return nil
}

// redisBenchURL is the Redis a bench compares with: SLUICE_REDIS_URL, else
// the test services' SLUICE_TEST_REDIS, else the default port.
func redisBenchURL() string {
	if u := os.Getenv("SLUICE_REDIS_URL"); u != "" {
		return u
	}
	if a := os.Getenv("SLUICE_TEST_REDIS"); a != "" {
		return "redis://" + a + "/0"
	}
	return "redis://127.0.0.1:6379/0"
}

// startCPUProfile writes a CPU profile to path until the returned stop is
// called; stop reports a profile that did not reach the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // the profile's error is the one to report
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "cpu profile:", err)
		}
	}, nil
}

// writeProfile writes the named runtime profile to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ndjsonBody builds one produce body: batch lines {"value":"xxx..."} whose
// stored value (the JSON string with its quotes) is exactly size bytes.
func ndjsonBody(batch, size int) []byte {
	var b bytes.Buffer
	val := strings.Repeat("x", size-2)
	for i := 0; i < batch; i++ {
		b.WriteString(`{"value":"`)
		b.WriteString(val)
		b.WriteString("\"}\n")
	}
	return b.Bytes()
}

type benchResult struct {
	records       int64
	bytes         int64
	requests      int64
	elapsed       time.Duration
	recordsPerSec float64
	latencies     []time.Duration
	hostCPU       time.Duration // busy CPU of the whole machine during the round (hostCPU)
	selfCPU       time.Duration // this process's CPU during the round
}

func (r *benchResult) finish() {
	r.recordsPerSec = float64(r.records) / r.elapsed.Seconds()
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
}

func (r *benchResult) pct(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
}

func (r *benchResult) print(name string) {
	fmt.Printf("%-10s %12.0f %10.1f %10.0f %10s %10s %10.2f %6.2f\n", name, r.recordsPerSec,
		float64(r.bytes)/r.elapsed.Seconds()/1e6, float64(r.requests)/r.elapsed.Seconds(),
		r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.cpuPerMB(), r.selfCPUPerMB())
}

func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// benchProduce posts body from c.connections goroutines for c.duration.
func benchProduce(ctx context.Context, c benchConfig, url string, body []byte) (benchResult, error) {
	client := benchClient(c.connections)
	defer client.CloseIdleConnections()
	// Requests end with the command; the run's deadline only stops new
	// ones, so the last of them are measured whole.
	reqCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var (
		mu       sync.Mutex
		res      benchResult
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	start, cpu := time.Now(), startCPU()
	// With a rate, requests leave on a shared schedule; latency is measured
	// from the scheduled time, so a slow server cannot hide its queueing.
	var ticks chan time.Time
	if c.rate > 0 {
		ticks = make(chan time.Time, c.connections)
		go func() {
			interval := time.Duration(float64(time.Second) / c.rate)
			next := time.Now()
			for ctx.Err() == nil {
				select {
				case ticks <- next:
				case <-ctx.Done():
					return
				}
				next = next.Add(interval)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
			}
		}()
	}
	for i := 0; i < c.connections; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var n int64
			for ctx.Err() == nil {
				t0 := time.Now()
				if ticks != nil {
					select {
					case t0 = <-ticks:
					case <-ctx.Done():
						continue
					}
				}
				req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/x-ndjson")
				resp, err := client.Do(req)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err := fmt.Errorf("%s answered %d", url, resp.StatusCode)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat = append(lat, time.Since(t0))
				n++
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.requests += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	if p := firstErr.Load(); p != nil {
		return res, *p
	}
	res.records = res.requests * int64(c.batch)
	res.bytes = res.records * int64(c.size)
	res.finish()
	return res, nil
}

// benchConsume reads every partition from the earliest offset to the HW seen
// at the start, one goroutine per partition (at most c.connections at once).
func benchConsume(ctx context.Context, c benchConfig) (benchResult, error) {
	var t api.Topic
	if err := getJSON(c.url+"/v1/topics/"+c.topic, &t); err != nil {
		return benchResult{}, err
	}
	client := benchClient(c.connections)
	defer client.CloseIdleConnections()
	var (
		mu  sync.Mutex
		res benchResult
		wg  sync.WaitGroup
		sem = make(chan struct{}, c.connections)
		ers []error
	)
	start, cpu := time.Now(), startCPU()
	for _, p := range t.Partitions {
		wg.Add(1)
		go func(p api.PartitionInfo) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			next := p.LogStartOffset
			// One buffer per reader, reused across fetches as a client
			// that streams a partition would: the load generator should
			// not spend the cores on growing and clearing fresh buffers.
			var buf bytes.Buffer
			for next < p.HighWatermark && ctx.Err() == nil {
				t0 := time.Now()
				route := fmt.Sprintf("records?max_records=%d&max_bytes=4194304", cmp.Or(c.fetchRecords, 10000))
				if c.raw {
					route = "batches?max_bytes=4194304"
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/topics/%s/partitions/%d/%s&offset=%d", c.url, c.topic, p.Partition, route, next), nil)
				if err != nil {
					mu.Lock()
					ers = append(ers, err)
					mu.Unlock()
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					ers = append(ers, err)
					mu.Unlock()
					return
				}
				var n, nbytes int64
				buf.Reset()
				_, _ = buf.ReadFrom(resp.Body)
				b := buf.Bytes()
				if c.raw {
					nbytes = int64(len(b))
					var last int64
					_, _ = recordbatch.Scan(b, false, func(h recordbatch.Header, _ []byte) error {
						n += h.NextOffset() - max(h.BaseOffset, next)
						last = h.NextOffset()
						return nil
					})
					next = max(next, last)
				} else {
					// Decoded as the Go client decodes (goccy/go-json).
					var fr api.FetchResponse
					_ = gojson.Unmarshal(b, &fr)
					n = int64(len(fr.Records))
					for _, r := range fr.Records {
						nbytes += int64(len(r.Value))
					}
					next = fr.NextOffset
				}
				resp.Body.Close()
				if n == 0 {
					break
				}
				mu.Lock()
				res.records += n
				res.bytes += nbytes
				res.requests++
				res.latencies = append(res.latencies, time.Since(t0))
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	res.finish()
	return res, errors.Join(ers...)
}

// setupTimeout bounds each call a bench makes to prepare or inspect the
// cluster (topic metadata, creating a topic), so a gateway that stops
// answering fails the bench instead of hanging it.
const setupTimeout = time.Minute

func getJSON(url string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return apihttp.ReadError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func ensureTopic(base, topic string, partitions, rf int, configs map[string]string) error {
	b, _ := json.Marshal(api.CreateTopicRequest{Name: topic, Partitions: partitions, ReplicationFactor: rf, Configs: configs})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/topics", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusConflict {
		return nil
	}
	return apihttp.ReadError(resp)
}

// startEmbedded runs a cluster of n brokers in this process on a temporary
// directory (returned: broker i's data is in broker-i), for benchmarking
// without a separate server.
func startEmbedded(n int, bucket tier.Bucket) (string, string, func(), error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return "", "", nil, err
	}
	if bucket == nil {
		if bucket, err = tier.OpenLocalDir(filepath.Join(dir, "tier")); err != nil {
			return "", "", nil, err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		return "", "", nil, err
	}
	var brokers []*broker.Broker
	for i := 1; i <= n; i++ {
		b, err := broker.New(broker.Options{ID: int32(i), DataDir: filepath.Join(dir, fmt.Sprintf("broker-%d", i)), Coord: store.Session(), Logger: log,
			Bucket: bucket, TierInterval: 200 * time.Millisecond,
			// A cache smaller than the data the cold bench reads, so that it
			// measures the object store and not memory.
			ColdRead: tier.ColdReaderOptions{CacheBytes: 8 << 20}})
		if err != nil {
			return "", "", nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = b.Start(ctx)
		cancel()
		if err != nil {
			return "", "", nil, err
		}
		brokers = append(brokers, b)
	}
	gw, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: store.Session(), OpenAPI: sluice.OpenAPI, Logger: log})
	if err != nil {
		return "", "", nil, err
	}
	gw.Start()
	url := "http://" + gw.Addr()
	ready, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	for i := 0; i < 500; i++ {
		req, err := http.NewRequestWithContext(ready, http.MethodGet, url+"/readyz", nil)
		if err != nil {
			return "", "", nil, err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return url, dir, func() {
		// A throwaway cluster: its data is deleted next, so a failed
		// close changes nothing.
		_ = gw.Close()
		for _, b := range brokers {
			_ = b.Close()
		}
		_ = store.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// startAppendServer is the ceiling: a plain net/http server whose handler only
// appends each body to one file.
func startAppendServer() (string, func(), error) {
	f, err := os.CreateTemp("", "sluice-bench-append-")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		_, err = f.Write(body)
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed once stopped
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		// The file only takes the bodies in and is deleted next.
		_ = f.Close()
		_ = os.Remove(f.Name())
	}, nil
}

// benchCold compares reading the same data from the object store and from
// local disk: two topics get the same records; the tiered one keeps nothing
// locally once it is uploaded (only its active segment stays). Segments are
// 4 MiB (coldSegmentBytes): small enough that a few million records make
// many of them, large enough that a read is not one object-store request
// per few hundred kilobytes, which is the cost of tiny segments, not of
// reading from the store (with 256 KiB segments the ratio was 0.32 against
// 0.46 with these, in one session's runs).
const coldSegmentBytes = "4194304"

func benchCold(ctx context.Context, c benchConfig, records int, results string) error {
	hot, cold := c.topic+"-hot", c.topic+"-cold"
	if err := ensureTopic(c.url, hot, c.partitions, c.rf, map[string]string{"segment.bytes": coldSegmentBytes}); err != nil {
		return err
	}
	if err := ensureTopic(c.url, cold, c.partitions, c.rf, map[string]string{
		"segment.bytes": coldSegmentBytes, "remote.storage.enable": "true", "local.retention.bytes": "1"}); err != nil {
		return err
	}
	body := ndjsonBody(c.batch, c.size)
	client := benchClient(c.connections)
	for _, topic := range []string{hot, cold} {
		for n := 0; n < records; n += c.batch {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/topics/"+topic+"/records?acks=all", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("producing to %s: %d", topic, resp.StatusCode)
			}
		}
	}
	// Wait until the tiered topic's local copies are trimmed.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var t api.Topic
		if err := getJSON(c.url+"/v1/topics/"+cold, &t); err != nil {
			return err
		}
		var remote, total int64
		for _, p := range t.Partitions {
			remote += p.LocalStartOffset - p.LogStartOffset
			total += p.HighWatermark - p.LogStartOffset
		}
		if total > 0 && float64(remote) >= 0.85*float64(total) {
			fmt.Printf("cold topic: %d of %d records only in the object store\n", remote, total)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the tiered topic is still local after 2 minutes (%d of %d remote)", remote, total)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	var hots, colds []float64
	for round := 0; round < c.rounds; round++ {
		for _, topic := range []string{hot, cold} {
			cc := c
			cc.topic = topic
			res, err := benchConsume(ctx, cc)
			if err != nil {
				return err
			}
			if topic == hot {
				res.print("local")
				hots = append(hots, res.recordsPerSec)
			} else {
				res.print("remote")
				colds = append(colds, res.recordsPerSec)
			}
		}
	}
	fmt.Printf("median records/s: local %.0f, remote %.0f; ratio remote/local: %.2f\n", median(hots), median(colds), median(colds)/median(hots))
	kind := "JSON"
	if c.raw {
		kind = "raw"
	}
	return appendBenchRow(results, benchRow{scenario: fmt.Sprintf("consume %s, cold (object store) from offset 0", kind), unit: "records/s",
		baseline: fmt.Sprintf("hot (local disk) %.0f", median(hots)), sluice: fmt.Sprintf("%.0f", median(colds)),
		ratio: ratioCell(median(colds), median(hots)), aim: "≥ 0.7"})
}

// flagSet reports whether the command line gave the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
