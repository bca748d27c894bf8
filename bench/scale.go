package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// ScaleOptions configure Scale (`sluice bench scale`).
type ScaleOptions struct {
	// Topics to create, one after another. Default 30.
	Topics int
	// Partitions of each topic. Default 100.
	Partitions int
	// ReplicationFactor of each topic, 2 to Brokers. Default 3.
	ReplicationFactor int
	// Brokers is how many `sluice broker` processes run, at least 2.
	// Default 3.
	Brokers int
	// ZK is the ZooKeeper host:port the processes coordinate through, under
	// a chroot of their own. Required.
	ZK string
	// SessionTimeout is every process's ZooKeeper session timeout. Default
	// 6 s (the brokers' own default).
	SessionTimeout time.Duration
	// DrainTimeout is the brokers' --drain-timeout: how long a SIGTERMed
	// broker waits for its leaderships to move. Default 30 s (the brokers'
	// own default).
	DrainTimeout time.Duration
	// IdleWindow is how long the brokers' CPU is measured over once every
	// partition has its leader and full ISR. Default 20 s.
	IdleWindow time.Duration
	// ClusterCalls is how many GET /v1/cluster calls are timed, one after
	// another. Default 20.
	ClusterCalls int
	// ProducePartitions is how many partitions of the SIGTERMed broker get
	// an acks=all producer during its controlled shutdown (one produce of
	// one record at a time each). Default 4.
	ProducePartitions int
	// Timeout bounds each wait on the cluster's state; a state not reached
	// in time is reported as timed out. Default 5 min.
	Timeout time.Duration
	// Binary is the sluice binary the processes run. Default: this
	// process's executable.
	Binary string
	// Results, when set, is a Markdown file each row is appended to.
	Results string
	// Out receives the figures. Default os.Stdout; progress goes to stderr.
	Out io.Writer
}

// DefaultScale returns the defaults of ScaleOptions.
func DefaultScale() ScaleOptions {
	return ScaleOptions{Topics: 30, Partitions: 100, ReplicationFactor: 3, Brokers: 3,
		SessionTimeout: 6 * time.Second, DrainTimeout: 30 * time.Second, IdleWindow: 20 * time.Second,
		ClusterCalls: 20, ProducePartitions: 4, Timeout: 5 * time.Minute}
}

// Scale is `sluice bench scale`: what thousands of partitions cost brokers
// at rest and how long their leaderships take to move, measured from
// outside the processes. It runs Brokers `sluice broker` processes and a
// `sluice gateway` over the ZooKeeper at ZK, creates Topics × Partitions
// partitions through the gateway, and, once every partition has its leader
// and a full ISR, measures each broker's idle CPU, RSS, Go heap and file
// descriptors (from /proc and its /metrics) and GET /v1/cluster's latency;
// then a controlled shutdown (SIGTERM) of a broker with acks=all producers
// on some of its partitions, its restart, a kill -9 of a broker and of the
// controller. Every wait is on the cluster's state as GET /v1/cluster shows
// it, bounded by Timeout. It prints one table of what it measured (what
// it could not, with why), also when a step fails.
func Scale(ctx context.Context, o ScaleOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	switch {
	case o.Topics < 1 || o.Partitions < 1:
		return errors.New("--topics and --partitions must be >= 1")
	case o.Brokers < 2 || o.ReplicationFactor < 2 || o.ReplicationFactor > o.Brokers:
		return errors.New("--brokers must be >= 2 and --rf between 2 and --brokers: leaderships need somewhere to move")
	case o.IdleWindow <= 0 || o.Timeout <= 0 || o.ClusterCalls < 1 || o.ProducePartitions < 1:
		return errors.New("--idle-window, --timeout, --cluster-calls and --produce-partitions must be positive")
	}
	total := o.Topics * o.Partitions
	perBroker := (total*o.ReplicationFactor + o.Brokers - 1) / o.Brokers
	var brokerFlags []string
	if perBroker > api.DefaultMaxPartitionsPerBroker {
		// The limit is not what is measured.
		brokerFlags = append(brokerFlags, "--limit", fmt.Sprintf("%s=%d", api.LimitMaxPartitionsPerBroker, perBroker))
	}
	loadBefore := loadAverage()
	progressf("starting %d brokers and a gateway", o.Brokers)
	pc, err := startProcesses(ctx, processOptions{binary: o.Binary, brokers: o.Brokers, zk: o.ZK,
		sessionTimeout: o.SessionTimeout, drainTimeout: o.DrainTimeout, brokerFlags: brokerFlags})
	if err != nil {
		return err
	}
	defer pc.stop()
	cl, err := client.New(pc.url, client.WithUserAgent("sluice-bench"), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		return err
	}
	defer cl.Close()
	s := &scaleRun{o: o, pc: pc, cl: cl}
	out.printf("scale: %d `sluice broker` processes and a `sluice gateway` over ZooKeeper, %d topics × %d partitions, RF %d: %d partitions, %d replicas per broker\n",
		o.Brokers, o.Topics, o.Partitions, o.ReplicationFactor, total, perBroker)
	out.printf("brokers: --zk-session-timeout %s --drain-timeout %s; open files limit %s; %d CPUs; load average before: %s\n",
		o.SessionTimeout, o.DrainTimeout, fdLimitText(procFDLimit(pc.brokers[1].pid())), runtime.NumCPU(), loadBefore)
	runErr := s.run(ctx)
	switch {
	case runErr != nil && ctx.Err() != nil:
		s.add("remaining steps not run", "", "interrupted", "")
	case runErr != nil:
		s.add("remaining steps not run", "", runErr.Error(), "")
	}
	out.printf("\n%s%s", markdownRow("what", "unit", "measured", "aim"), markdownRow("---", "---", "---", "---"))
	for _, r := range s.rows {
		out.printf("%s", markdownRow(r.what, r.unit, r.measured, r.aim))
	}
	out.printf("\n")
	if s.polls.n > 0 {
		out.printf("state read from GET /v1/cluster, asked every %s on average (longest gap %s); a time is when the first answer that showed the state was asked for. ",
			s.polls.mean().Round(time.Millisecond), s.polls.longest.Round(time.Millisecond))
	}
	out.printf("Load average after: %s\n", loadAverage())
	if s.timedOut {
		pc.printLogs(4000)
	}
	for _, r := range s.rows {
		row := benchRow{scenario: fmt.Sprintf("scale %d partitions RF %d: %s", total, o.ReplicationFactor, r.what), unit: r.unit, sluice: r.measured, aim: r.aim}
		if err := appendBenchRow(o.Results, row); err != nil {
			return errors.Join(runErr, err)
		}
	}
	return runErr
}

// scaleRun is one run of Scale: the cluster, and the rows measured so far.
type scaleRun struct {
	o        ScaleOptions
	pc       *processCluster
	cl       *client.Client
	rows     []scaleRow
	polls    pollStats
	timedOut bool // a wait ran out of time: the processes' logs are printed

	created   int                     // partitions whose creation was answered
	preferred map[int32]int           // partitions whose first replica each broker is
	before    map[int32]procSample    // each broker before the topics were created
	beforeRT  map[int32]brokerRuntime // and its Go runtime then
}

// scaleRow is a row of Scale's table.
type scaleRow struct{ what, unit, measured, aim string }

func (s *scaleRun) add(what, unit, measured, aim string) {
	s.rows = append(s.rows, scaleRow{what, unit, measured, aim})
}

// progressf tells the operator where a run of minutes is.
func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
}

func (s *scaleRun) run(ctx context.Context) error {
	var err error
	if s.before, err = s.sampleBrokers(); err != nil {
		return err
	}
	ci, err := s.clusterInfo(ctx)
	if err != nil {
		return err
	}
	s.beforeRT = s.runtimeStats(ctx, ci)
	if err := s.create(ctx); err != nil {
		return err
	}
	if err := s.atRest(ctx); err != nil {
		return err
	}
	if err := s.clusterLatency(ctx); err != nil {
		return err
	}
	// A step that timed out does not end the run: the next one waits for
	// the cluster to be healthy first, or says it did not run.
	victim, err := s.controlledShutdown(ctx)
	if err != nil {
		return err
	}
	if victim != 0 {
		if err := s.restart(ctx, victim, "the SIGTERMed broker restarted: back in every ISR"); err != nil {
			return err
		}
	}
	if victim, err = s.kill(ctx, false); err != nil {
		return err
	}
	if victim != 0 {
		if err := s.restart(ctx, victim, "the killed broker restarted: back in every ISR"); err != nil {
			return err
		}
	}
	_, err = s.kill(ctx, true)
	return err
}

// createAttempts bounds the attempts at one topic: a create that failed
// retriably (REQUEST_TIMED_OUT on a busy controller) is sent again, as a
// client would, and TOPIC_ALREADY_EXISTS then means an earlier attempt
// went through.
const createAttempts = 5

// create creates the topics one after another, then waits until every
// partition has a leader and a full ISR.
func (s *scaleRun) create(ctx context.Context) error {
	o := s.o
	progressf("creating %d topics of %d partitions", o.Topics, o.Partitions)
	var slowest time.Duration
	slowestName, failed := "", ""
	retried := map[string]int{} // failed attempts that were retried, by status and code
	t0 := time.Now()
	for i := range o.Topics {
		name := fmt.Sprintf("scale-%03d", i)
		start := time.Now()
		var err error
		for attempt := 1; ; attempt++ {
			_, err = s.cl.CreateTopic(ctx, api.CreateTopicRequest{Name: name, Partitions: o.Partitions, ReplicationFactor: o.ReplicationFactor})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if attempt > 1 && errors.Is(err, api.ErrTopicExists) {
				err = nil
			}
			if err == nil || !client.IsRetriable(err) || attempt == createAttempts {
				break
			}
			retried[produceErrorCode(err)]++
		}
		if err != nil {
			failed = fmt.Sprintf("%s failed after %s: %v", name, secs(time.Since(start)), err)
			break
		}
		s.created += o.Partitions
		if d := time.Since(start); d > slowest {
			slowest, slowestName = d, name
		}
	}
	all := time.Since(t0)
	what := fmt.Sprintf("creating %d × %d partitions (%d creates, one after another)", o.Topics, o.Partitions, o.Topics)
	measured := secs(all)
	if failed != "" {
		measured = fmt.Sprintf("%d of %d partitions created in %s; %s", s.created, o.Topics*o.Partitions, secs(all), failed)
	}
	if len(retried) > 0 {
		measured += "; attempts that failed and were sent again: " + countsText(retried)
	}
	s.add(what, "s", measured, "≤ 10 in all")
	if slowestName != "" {
		s.add(fmt.Sprintf("the slowest single create (%d partitions; retries included)", o.Partitions), "s", fmt.Sprintf("%s (%s)", secs(slowest), slowestName), "")
	}
	settled := &milestone{name: "settled", reached: s.healthy}
	if _, err := s.waitState(ctx, t0, s.o.Timeout, settled); err != nil {
		return err
	}
	s.add("every partition led with a full ISR, from the first create", "s", s.at(settled), "")
	if settled.at < 0 {
		return fmt.Errorf("the partitions did not all get a leader and a full ISR within %s", s.o.Timeout)
	}
	// Where leadership goes back to once the replicas are in sync: the
	// first replica of each partition.
	topics, err := s.cl.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("listing the topics: %w", err)
	}
	s.preferred = map[int32]int{}
	for _, t := range topics {
		for _, p := range t.Partitions {
			if len(p.Replicas) > 0 {
				s.preferred[p.Replicas[0]]++
			}
		}
	}
	return nil
}

// atRest measures each broker with nothing produced or consumed: CPU over
// the idle window, then memory and descriptors.
func (s *scaleRun) atRest(ctx context.Context) error {
	progressf("every partition led with a full ISR; measuring idle CPU for %s", s.o.IdleWindow)
	ids := s.brokerIDs()
	gw := s.pc.gateway.pid()
	b0, err := s.sampleBrokers()
	if err != nil {
		return err
	}
	g0, err := sampleProc(gw)
	if err != nil {
		return err
	}
	host0, t0 := hostCPU(), time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.o.IdleWindow):
	}
	b1, err := s.sampleBrokers()
	if err != nil {
		return err
	}
	g1, err := sampleProc(gw)
	if err != nil {
		return err
	}
	host1, wall := hostCPU(), time.Since(t0)
	load := loadAverage()
	cores := func(a, b procSample) float64 { return (b.cpu - a.cpu).Seconds() / wall.Seconds() }
	s.add(fmt.Sprintf("CPU with nothing produced or consumed (over %s)", s.o.IdleWindow), "cores",
		perBroker(ids, func(id int32) string { return fmt.Sprintf("%.2f", cores(b0[id], b1[id])) })+
			fmt.Sprintf("; gateway %.2f", cores(g0, g1)), "≤ 0.1 per broker")
	s.add("load average (1, 5, 15 min) at the end of that window", "",
		fmt.Sprintf("%s; the whole machine busy %.2f of %d cores over the window", load, (host1-host0).Seconds()/wall.Seconds(), runtime.NumCPU()), "")

	ci, err := s.clusterInfo(ctx)
	if err != nil {
		return err
	}
	replicas := map[int32]int{}
	for _, b := range ci.Brokers {
		replicas[b.ID] = b.Replicas
	}
	perReplica := func(id int32, v int64) float64 { return float64(v) / float64(max(1, replicas[id])) }
	s.add("RSS per broker after creation", "MiB",
		perBroker(ids, func(id int32) string {
			return fmt.Sprintf("%.0f (%.0f before the topics)", mib(b1[id].rss), mib(s.before[id].rss))
		}), "≤ 256")
	s.add("RSS per replica: all of it (the growth since before the topics)", "KiB",
		perBroker(ids, func(id int32) string {
			return fmt.Sprintf("%.0f (%.0f)", perReplica(id, b1[id].rss)/1024, perReplica(id, b1[id].rss-s.before[id].rss)/1024)
		}), "≤ 64")
	rt := s.runtimeStats(ctx, ci)
	s.add("Go heap in use (per replica, of the growth) and goroutines per broker, from its /metrics", "",
		perBroker(ids, func(id int32) string {
			a, b := s.beforeRT[id], rt[id]
			if a.err != nil || b.err != nil {
				return "unknown (" + errors.Join(a.err, b.err).Error() + ")"
			}
			return fmt.Sprintf("%.0f MiB (%.0f KiB; %.0f MiB before the topics), %.0f goroutines (%.0f before)",
				b.heap/(1<<20), (b.heap-a.heap)/float64(max(1, replicas[id]))/1024, a.heap/(1<<20), b.goroutines, a.goroutines)
		}), "")
	s.add("file descriptors per broker (per replica)", "fds",
		perBroker(ids, func(id int32) string {
			return fmt.Sprintf("%d (%.2f; %d before the topics)", b1[id].fds, perReplica(id, int64(b1[id].fds)), s.before[id].fds)
		}), "≤ 1 per replica")
	return nil
}

// clusterLatency times GET /v1/cluster, one call after another.
func (s *scaleRun) clusterLatency(ctx context.Context) error {
	var lat []time.Duration
	for range s.o.ClusterCalls {
		start := time.Now()
		if _, err := s.clusterInfo(ctx); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	s.add(fmt.Sprintf("GET /v1/cluster through the gateway (%d calls)", len(lat)), "ms",
		fmt.Sprintf("p50 %s, max %s", millis(percentile(lat, 0.5)), millis(percentile(lat, 1))), "≤ 50")
	return nil
}

// sampleBrokers reads every running broker's /proc.
func (s *scaleRun) sampleBrokers() (map[int32]procSample, error) {
	m := map[int32]procSample{}
	for _, id := range s.brokerIDs() {
		p := s.pc.brokers[id]
		if p.exited() {
			continue
		}
		v, err := sampleProc(p.pid())
		if err != nil {
			return nil, fmt.Errorf("broker %d: %w", id, err)
		}
		m[id] = v
	}
	return m, nil
}

func (s *scaleRun) brokerIDs() []int32 {
	ids := make([]int32, 0, len(s.pc.brokers))
	for id := range s.pc.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// perBroker is one cell with a figure of every broker: "b1 x, b2 y".
func perBroker(ids []int32, f func(int32) string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("b%d %s", id, f(id))
	}
	return strings.Join(parts, ", ")
}

// brokerRuntime is a broker's Go heap in use and goroutines, from its
// /metrics.
type brokerRuntime struct {
	heap, goroutines float64
	err              error
}

// runtimeStats reads every broker's /metrics, at the addresses ci lists.
func (s *scaleRun) runtimeStats(ctx context.Context, ci api.ClusterInfo) map[int32]brokerRuntime {
	m := map[int32]brokerRuntime{}
	for _, b := range ci.Brokers {
		if b.Alive {
			m[b.ID] = brokerMetrics(ctx, b.Address)
		}
	}
	for _, id := range s.brokerIDs() {
		if _, ok := m[id]; !ok {
			m[id] = brokerRuntime{err: fmt.Errorf("broker %d is not in the cluster's metadata", id)}
		}
	}
	return m
}

// brokerMetrics reads the Go runtime's heap in use and goroutines from the
// /metrics of the broker at addr.
func brokerMetrics(ctx context.Context, addr string) brokerRuntime {
	b, err := getMetrics(ctx, addr)
	if err != nil {
		return brokerRuntime{err: err}
	}
	heap, ok := promValue(b, "go_memstats_heap_inuse_bytes")
	if !ok {
		return brokerRuntime{err: errors.New("no go_memstats_heap_inuse_bytes in /metrics")}
	}
	g, ok := promValue(b, "go_goroutines")
	if !ok {
		return brokerRuntime{err: errors.New("no go_goroutines in /metrics")}
	}
	return brokerRuntime{heap: heap, goroutines: g}
}

// getMetrics GETs the /metrics of the broker at addr.
func getMetrics(ctx context.Context, addr string) ([]byte, error) {
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		addr = "http://" + addr
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return b, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// secs formats d in seconds, one decimal.
func secs(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// millis formats d in milliseconds.
func millis(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func fdLimitText(n int64) string {
	if n < 0 {
		return "unlimited or unknown"
	}
	return fmt.Sprint(n)
}
