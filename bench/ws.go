package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/embedded"
	"github.com/sluice-io/sluice/gateway"
)

// WSOptions configure WS and WSClient (`sluice bench ws`).
type WSOptions struct {
	// Connections is how many idle WebSocket consumers to open. Default
	// 10,000.
	Connections int
	// Credit each consumer grants; with credit an idle stream waits on its
	// partition's shared long poll (one per partition, not one per
	// stream), without it it only answers pings. Default 0.
	Credit int
	// Partitions of the topic the consumers spread over. Default 8.
	Partitions int
	// Groups, when above 0, makes the consumers WebSocket members of that
	// many consumer groups (bench-ws-0 …), each group sharing the
	// partitions among its members, instead of partition streams. Default 0.
	Groups int
	// SSE makes the consumers Server-Sent Events partition streams
	// instead of WebSockets (not with Groups). Default false.
	SSE bool
	// Hold is how long the consumers stay open before memory is measured.
	// Default 3 s.
	Hold time.Duration
	// HeapProfile, when set, is a file the process's heap profile is
	// written to while the consumers are open, after the measurement.
	HeapProfile string
	// URL, when set, is a running gateway (`sluice dev`) to open the
	// consumers against instead of an embedded cluster; PID is its process,
	// whose resident set is read from /proc/PID/status, from outside, as an
	// operator would (no collection forced first), and heap and goroutines
	// from its /metrics. Its WebSocket limits must admit Connections + 1
	// from 127.0.0.1. Default: none, an embedded cluster.
	URL string
	PID int
	// Dev starts `sluice dev` (Binary's) as a child process, with
	// WebSocket limits that admit the consumers, and measures it as URL and
	// PID do: what a user of `make run` would see. Not with URL.
	Dev bool
	// Results, when set, is a Markdown file the run appends its row to:
	// RSS per idle consumer.
	Results string
	// Binary is the sluice binary whose `sluice bench ws --client` opens
	// the consumers in a child process. Default: this process's executable.
	Binary string
	// Out receives the figures (WSClient: its "ready" line). Default
	// os.Stdout.
	Out io.Writer
}

// DefaultWS returns the defaults of WSOptions.
func DefaultWS() WSOptions {
	return WSOptions{Connections: 10_000, Partitions: 8, Hold: 3 * time.Second}
}

// WS is `sluice bench ws`: what an idle WebSocket (or SSE) consumer costs a gateway.
// It runs an embedded cluster (one broker and a gateway) in this process and
// opens Connections idle partition streams from a child process (Binary's
// `sluice bench ws --client`, which runs WSClient), so that the clients'
// memory is not counted; it reports the process's heap and RSS, and
// goroutines, per connection, and the delivery latency of a new record to
// one more consumer while the idle ones are open. With URL and PID it opens
// them against that running gateway instead and reads its resident set
// from outside (/proc/PID/status), as an operator would.
func WS(ctx context.Context, o WSOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	if o.Connections < 1 || o.Partitions < 1 || o.Groups < 0 || (o.SSE && o.Groups > 0) {
		return errors.New("--connections and --partitions must be >= 1, --groups >= 0, and --sse goes without --groups")
	}
	if (o.URL == "") != (o.PID == 0) {
		return errors.New("--url and --pid go together")
	}
	if o.Dev && o.URL != "" {
		return errors.New("--dev starts its own gateway: not with --url")
	}
	exe := o.Binary
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	if o.Dev {
		dev, url, err := startDevProcess(ctx, exe, o.Connections+100)
		if err != nil {
			return err
		}
		defer dev.stop()
		o.URL, o.PID = url, dev.gateway.pid()
	}
	url := o.URL
	measure := measureProcess
	where := "this process (broker and gateway), after a forced collection"
	if url == "" {
		cl, err := startWSBenchCluster(ctx, o.Connections)
		if err != nil {
			return err
		}
		defer func() { _ = cl.Close() }() // a throwaway cluster: its data is deleted with it
		url = cl.URL()
	} else {
		where = fmt.Sprintf("process %d from outside: VmRSS, and heap and goroutines from its /metrics", o.PID)
		measure = func() processMeasure { return measureOutside(ctx, url, o.PID) }
	}
	if err := ensureTopic(url, "bench-ws", o.Partitions, 1, nil); err != nil {
		return err
	}
	// A consumer that is not idle: it measures how soon a new record
	// reaches a stream that waits at the partition's end.
	probe, err := dialProbe(ctx, url)
	if err != nil {
		return err
	}
	defer probe.CloseNow()
	lat0, err := probeLatency(ctx, url, probe, 10)
	if err != nil {
		return err
	}
	before := measure()

	cmd := exec.CommandContext(ctx, exe, "bench", "ws", "--client", url, "--connections", strconv.Itoa(o.Connections),
		"--credit", strconv.Itoa(o.Credit), "--partitions", strconv.Itoa(o.Partitions), "--groups", strconv.Itoa(o.Groups), "--sse="+strconv.FormatBool(o.SSE))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		// On a failure below: end the client; the failure is what is reported.
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("client process: %q %v", line, err)
	}
	opened := time.Since(start)
	open, err := scrapeGauge(ctx, url, "sluice_gateway_ws_connections")
	if err != nil {
		return err
	}
	time.Sleep(o.Hold)
	during := measure()
	if o.HeapProfile != "" && o.URL == "" {
		if err := writeProfile("heap", o.HeapProfile); err != nil {
			return err
		}
	}
	lat, err := probeLatency(ctx, url, probe, 10)
	if err != nil {
		return err
	}

	_ = stdin.Close() // the client exits at the end of its input; Wait says how
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("client process: %w", err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v, err := scrapeGauge(ctx, url, "sluice_gateway_ws_connections"); err == nil && v <= 1 {
			break
		}
	}
	time.Sleep(time.Second)
	after := measure()

	per := func(a, b int64) float64 { return float64(b-a) / float64(o.Connections) / 1024 }
	kind := "WebSocket partition streams"
	if o.SSE {
		kind = "SSE partition streams"
	} else if o.Groups > 0 {
		kind = fmt.Sprintf("WebSocket members of %d groups; the broker's group state is in this process too", o.Groups)
	}
	out.printf("%d idle consumers (%s; credit %d, %d partitions), opened in %s; the gateway counted %.0f (plus the probe)\n",
		o.Connections, kind, o.Credit, o.Partitions, opened.Round(time.Millisecond), open-1)
	out.printf("measured: %s\n", where)
	out.printf("%-8s %12s %12s %11s\n", "", "heap KiB", "RSS KiB", "goroutines")
	for _, m := range []struct {
		name string
		m    processMeasure
	}{{"before", before}, {"open", during}, {"closed", after}} {
		out.printf("%-8s %12d %12d %11d\n", m.name, m.m.heap>>10, m.m.rss>>10, m.m.goroutines)
	}
	out.printf("per idle connection: heap %.1f KiB, RSS %.1f KiB, goroutines %.2f (gateway, and broker long polls when --credit > 0)\n",
		per(before.heap, during.heap), per(before.rss, during.rss), float64(during.goroutines-before.goroutines)/float64(o.Connections))
	out.printf("new-record latency to a waiting stream: p50 %s, max %s alone; p50 %s, max %s beside the idle consumers\n",
		lat0[len(lat0)/2], lat0[len(lat0)-1], lat[len(lat)/2], lat[len(lat)-1])
	scope := "embedded, after a forced collection"
	if o.URL != "" {
		scope = "process RSS from outside"
	}
	if o.Dev {
		scope = "`sluice dev` RSS from outside"
	}
	aim := "—"
	if o.Credit > 0 && o.Groups == 0 && !o.SSE {
		aim = "≤ 32 KiB"
		if o.Connections > 2000 {
			aim = "≤ 64 KiB"
		}
	}
	return appendBenchRow(o.Results, benchRow{
		scenario: fmt.Sprintf("ws: %d idle %s, credit %d, %s", o.Connections, strings.SplitN(kind, ";", 2)[0], o.Credit, scope),
		unit:     "KiB RSS each", baseline: "—", sluice: fmt.Sprintf("%.1f", per(before.rss, during.rss)), ratio: "—", aim: aim})
}

// devListening is the line `sluice dev` prints once it is up.
var devListening = regexp.MustCompile(`is up: gateway (https?://[^\s,]+),`)

// startDevProcess runs exe's `sluice dev` (three brokers and the gateway in
// one process) on a loopback port it chooses, in a temporary directory,
// with WebSocket limits of wsLimit, and returns once it is up. The caller
// ends it with stop.
func startDevProcess(ctx context.Context, exe string, wsLimit int) (*processCluster, string, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-dev-")
	if err != nil {
		return nil, "", err
	}
	pc := &processCluster{dir: dir, exe: exe, brokers: map[int32]*childProcess{}}
	limit := strconv.Itoa(wsLimit)
	pc.gateway, err = pc.start("dev", []string{"dev", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-level", benchLogLevel(),
		"--limit", "gateway.ws.max.connections=" + limit, "--limit", "gateway.ws.max.connections.per.ip=" + limit})
	if err != nil {
		pc.stop()
		return nil, "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url, err := waitLogMatch(wctx, pc.gateway.logPath, devListening)
	if err != nil {
		pc.printLogs(2000)
		pc.stop()
		return nil, "", fmt.Errorf("sluice dev did not come up: %w", err)
	}
	if err := waitBrokers(wctx, url, 3, ""); err != nil {
		pc.stop()
		return nil, "", fmt.Errorf("sluice dev did not come up: %w", err)
	}
	return pc, url, nil
}

// startWSBenchCluster runs one broker and a gateway that admits n
// WebSockets from one address, in this process, on a temporary directory.
func startWSBenchCluster(ctx context.Context, n int) (*embedded.Cluster, error) {
	return embedded.Start(ctx, embedded.Options{
		Logger: warnLogger(),
		Gateway: func(o *gateway.Options) {
			o.Streams = gateway.StreamLimits{MaxConnections: n + 1, MaxConnectionsPerIP: n + 1}
		}})
}

// WSClient is the client process of WS: it opens o.Connections idle
// consumers of the gateway at url, reading each (so pings are answered),
// prints "ready" to o.Out and holds them until in ends.
func WSClient(url string, o WSOptions, in io.Reader) error {
	n, credit, partitions, groups := o.Connections, o.Credit, o.Partitions, o.Groups
	ws := "ws" + strings.TrimPrefix(url, "http")
	if o.SSE {
		return sseClient(url, o, in)
	}
	conns := make([]*websocket.Conn, n)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A group member's dial waits for its join, which a burst of
			// thousands queues at the group coordinators.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// offset=0 is the end of the empty partitions; "latest" would
			// ask the broker, and a burst of those fills the gateway's pool
			// of broker connections (up to 256, ~320 KiB of buffers each),
			// which outlives the consumers and is not theirs.
			u := fmt.Sprintf("%s/v1/topics/bench-ws/partitions/%d/ws?offset=0&credit=%d", ws, i%partitions, credit)
			if groups > 0 {
				u = fmt.Sprintf("%s/v1/groups/bench-ws-%d/ws?topics=bench-ws&credit=%d&auto_offset_reset=earliest&session_timeout_ms=30000", ws, i%groups, credit)
			}
			c, _, err := websocket.Dial(ctx, u, nil)
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("connection %d: %w", i, err)
				}
				errMu.Unlock()
				return
			}
			conns[i] = c
			go func() {
				for {
					if _, _, err := c.Read(context.Background()); err != nil {
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	// The parent waits for this line: a failed write is the run's failure.
	if _, err := fmt.Fprintln(cmp.Or(o.Out, io.Writer(os.Stdout)), "ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	for _, c := range conns {
		c.CloseNow()
	}
	return nil
}

// sseClient is WSClient for SSE partition streams: each a request of its
// own on its own connection, its body read (and dropped) until in ends.
func sseClient(url string, o WSOptions, in io.Reader) error {
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends every stream
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, 64)
	for i := range o.Connections {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fail := func(err error) {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("stream %d: %w", i, err)
				}
				errMu.Unlock()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/topics/bench-ws/partitions/%d/sse?offset=0", url, i%o.Partitions), nil)
			if err != nil {
				fail(err)
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				fail(err)
				return
			}
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				fail(fmt.Errorf("HTTP %d", resp.StatusCode))
				return
			}
			go drainBody(resp)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if _, err := fmt.Fprintln(cmp.Or(o.Out, io.Writer(os.Stdout)), "ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// drainBody reads resp's body until it ends, then closes it.
func drainBody(resp *http.Response) {
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
}

// dialProbe opens the latency probe: a JSON stream on partition 0 with
// plenty of credit.
func dialProbe(ctx context.Context, url string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/v1/topics/bench-ws/partitions/0/ws?offset=latest&credit=1000000", nil)
	return c, err
}

// probeLatency produces rounds single records to partition 0, each after
// the probe's stream has gone back to waiting, and returns the sorted
// times from the produce request's start to the record's arrival.
func probeLatency(ctx context.Context, url string, probe *websocket.Conn, rounds int) ([]time.Duration, error) {
	var out []time.Duration
	body, _ := json.Marshal(map[string]any{"records": []map[string]any{{"value": "probe", "partition": 0}}})
	for range rounds {
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/topics/bench-ws/records", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("produce: HTTP %d", resp.StatusCode)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, b, err := probe.Read(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		var fr api.FetchResponse
		if json.Unmarshal(b, &fr) != nil || len(fr.Records) != 1 {
			return nil, fmt.Errorf("probe frame %s", b)
		}
		out = append(out, time.Since(start))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

type processMeasure struct {
	heap, rss  int64
	goroutines int
}

// measureProcess collects garbage, returns freed memory to the OS and
// reads the live heap, the resident set and the goroutine count.
func measureProcess() processMeasure {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return processMeasure{heap: int64(ms.HeapAlloc), goroutines: runtime.NumGoroutine(), rss: readVmRSS("/proc/self/status")}
}

// measureOutside reads another process's resident set from /proc and the
// gateway's heap and goroutines from its /metrics, without forcing a
// collection: what an operator watching the process sees. A figure it
// cannot read is 0.
func measureOutside(ctx context.Context, url string, pid int) processMeasure {
	var m processMeasure
	m.rss = readVmRSS(fmt.Sprintf("/proc/%d/status", pid))
	if v, err := scrapeGauge(ctx, url, "go_memstats_heap_alloc_bytes"); err == nil {
		m.heap = int64(v)
	}
	if v, err := scrapeGauge(ctx, url, "go_goroutines"); err == nil {
		m.goroutines = int(v)
	}
	return m
}

// readVmRSS returns the VmRSS of a /proc/…/status file in bytes, 0 when
// it cannot be read.
func readVmRSS(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// scrapeGauge reads one unlabelled sample from a gateway's /metrics.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s/metrics", name, url)
}
