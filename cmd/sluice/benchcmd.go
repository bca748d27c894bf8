package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/bench"
)

// benchScenarios are `sluice bench`'s scenarios, as its usage lists them.
var benchScenarios = []struct{ name, summary string }{
	{"produce", "NDJSON produce through the gateway against a plain append-to-file server, or acks=all RF=3 against acks=1 RF=1"},
	{"consume", "JSON or raw consume against Redis XREAD or a plain sendfile server; cold reads; consumer groups"},
	{"e2e", "end-to-end latency from an acks=all producer to WebSocket consumers"},
	{"push", "push subscriptions against group polls of the same records; delivery latency"},
	{"ws", "memory and goroutines per idle WebSocket consumer"},
	{"sink", "the exactly-once sinks (sink redis|s3) against plain writes to their stores"},
	{"broker", "a broker's heap, RSS, goroutines and descriptors per partition and per idle connection"},
	{"scale", "thousands of partitions on broker processes over ZooKeeper: idle cost, controlled shutdown, failover"},
	{"kafka", "franz-go through the Kafka listener against the HTTP door of the same cluster: produce and consume"},
}

// benchUsage is `sluice bench`'s usage: the scenarios, one line each.
func benchUsage() string {
	var b strings.Builder
	b.WriteString("usage: sluice bench <scenario> [flags]\n\nscenarios:\n")
	for _, sc := range benchScenarios {
		fmt.Fprintf(&b, "  %-8s %s\n", sc.name, sc.summary)
	}
	b.WriteString("\nRun 'sluice bench <scenario> --help' for its flags.")
	return b.String()
}

// runBench is `sluice bench`: the flags of each scenario, read into its
// options; the scenarios themselves are package bench.
func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(benchUsage())
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(os.Stderr, benchUsage())
		return nil
	case "produce", "consume":
		return benchThroughputCmd(ctx, args[0], args[1:])
	case "e2e":
		return benchE2ECmd(ctx, args[1:])
	case "push":
		return benchPushCmd(ctx, args[1:])
	case "ws":
		return benchWSCmd(ctx, args[1:])
	case "sink":
		return benchSinkCmd(ctx, args[1:])
	case "broker":
		return benchBrokerCmd(ctx, args[1:])
	case "scale":
		return benchScaleCmd(ctx, args[1:])
	case "kafka":
		return benchKafkaCmd(ctx, args[1:])
	}
	return fmt.Errorf("unknown scenario %q\n%s", args[0], benchUsage())
}

// benchThroughputCmd is `sluice bench produce|consume`.
func benchThroughputCmd(ctx context.Context, mode string, args []string) error {
	fs := flag.NewFlagSet("bench "+mode, flag.ContinueOnError)
	c := bench.DefaultThroughput()
	fs.StringVar(&c.URL, "url", "", "gateway base URL; empty starts an embedded cluster (--brokers) in a temporary directory")
	fs.IntVar(&c.Brokers, "brokers", c.Brokers, "brokers of the embedded cluster")
	fs.IntVar(&c.ReplicationFactor, "replication-factor", c.ReplicationFactor, "replication factor of a created topic")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "produce: requests per second over all connections (0: as fast as possible); use it to measure latency at a fixed load")
	fs.StringVar(&c.Topic, "topic", c.Topic, "topic (created if missing)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of a created topic")
	fs.IntVar(&c.Connections, "connections", c.Connections, "concurrent HTTP connections")
	fs.IntVar(&c.Batch, "batch", c.Batch, "records per request")
	fs.IntVar(&c.Size, "size", c.Size, "bytes per record value")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to produce in each round")
	fs.StringVar(&c.Acks, "acks", c.Acks, "acks for produce: 0, 1 or all")
	fs.StringVar(&c.Baseline, "baseline", c.Baseline, "what to compare with, run in alternating rounds in the same process; produce: append (the default: a plain net/http server that only appends bodies to a file, the ceiling), rf1 (acks=1 on a replication-factor-1 topic of the same cluster) or none; consume: sendfile (with --raw: a plain HTTP server sending the same segment files with sendfile) or redis (Redis XREAD COUNT 1000 of the same records, --redis)")
	fs.BoolVar(&c.Processes, "processes", false, "run the cluster as processes of this binary: --brokers `sluice broker` processes and a `sluice gateway`, coordinated through the ZooKeeper at --zk")
	fs.StringVar(&c.ZK, "zk", envOr("SLUICE_TEST_ZK", ""), "--processes: ZooKeeper host:port (env SLUICE_TEST_ZK)")
	fs.StringVar(&c.Redis, "redis", redisBenchURL(c.Redis), "consume --baseline redis: the Redis to read from (env SLUICE_REDIS_URL, else SLUICE_TEST_REDIS); keys under sluice-bench:")
	addResultsFlag(fs, &c.Results)
	c.Configs = map[string]string{}
	fs.Func("config", "topic config key=value for a created topic (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return errors.New("want key=value")
		}
		c.Configs[k] = val
		return nil
	})
	s3 := addS3Flags(fs)
	fs.BoolVar(&c.Cold, "cold", false, "consume: produce --records into a tiered topic and a plain one, wait until the tiered one is in the object store, then read both from offset 0 in alternating rounds (embedded cluster: objects in a temporary directory, or the --s3-* store)")
	fs.IntVar(&c.Records, "records", c.Records, "consume --cold and --group: records to write to each topic (--cold: 2000000 unless given, so that most of them are in closed 4 MiB segments)")
	fs.Int64Var(&c.RemoteCacheBytes, "remote-cache-bytes", c.RemoteCacheBytes, "consume --cold (started cluster): each broker's disk cache of remote segments, as `sluice broker --remote-cache-bytes`; rounds after the first read the tiered topic from it; 0: off, every round reads the object store")
	fs.BoolVar(&c.Group, "group", false, "consume: read the topic through a consumer group (members committing every poll) and with plain partition fetches, in alternating rounds; report the ratio and commit latency")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process (load generator included) to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a profile of mutex contention in the whole process (embedded cluster included) to this file: where goroutines waited on locks others held")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "produce: rounds, each running the baseline then sluice for --duration")
	fs.BoolVar(&c.Raw, "raw", false, "consume: read raw batches (/batches) instead of decoded JSON records")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Cold && !flagSet(fs, "records") {
		c.Records = 2000000
	}
	stop, err := bench.Profile(*cpuProfile, *mutexProfile)
	defer stop()
	if err != nil {
		return err
	}
	if c.URL == "" && !c.Processes {
		bucket, err := s3.open(ctx)
		if err != nil {
			return err
		}
		if bucket != nil {
			defer closeLogged(slog.Default(), "the S3 bucket", bucket)
			c.Bucket = bucket
		}
	}
	if mode == "produce" {
		return bench.Produce(ctx, c)
	}
	return bench.Consume(ctx, c)
}

// benchE2ECmd is `sluice bench e2e`.
func benchE2ECmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	o := bench.DefaultE2E()
	fs.StringVar(&o.URL, "url", "", "gateway base URL; empty starts a cluster (--brokers) in a temporary directory")
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "brokers of the started cluster")
	fs.IntVar(&o.ReplicationFactor, "replication-factor", o.ReplicationFactor, "replication factor of the created topic")
	fs.StringVar(&o.Acks, "acks", o.Acks, "acks of the produce requests: 0, 1 or all")
	fs.StringVar(&o.Topic, "topic", o.Topic, "topic (created if missing)")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of a created topic; one WebSocket consumer each")
	ratesFlag := fs.String("rates", formatRates(o.Rates), "records per second to produce, comma-separated")
	fs.IntVar(&o.Size, "size", o.Size, "bytes per record value (a JSON object holding its send time)")
	fs.IntVar(&o.Connections, "connections", o.Connections, "produce requests in flight at most")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long each rate runs in a round")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds, each running every rate")
	fs.BoolVar(&o.Processes, "processes", false, "run the cluster as processes of this binary (`sluice broker` and `sluice gateway`) coordinated through the ZooKeeper at --zk")
	fs.StringVar(&o.ZK, "zk", envOr("SLUICE_TEST_ZK", ""), "--processes: ZooKeeper host:port (env SLUICE_TEST_ZK)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (producer, consumers and, without --url or --processes, the cluster) to this file")
	addResultsFlag(fs, &o.Results)
	o.Configs = map[string]string{}
	fs.Func("config", "topic config key=value for a created topic (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return errors.New("want key=value")
		}
		o.Configs[k] = val
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Rates = nil
	for _, r := range strings.Split(*ratesFlag, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 || v > 1e6 {
			return fmt.Errorf("--rates: %q is not a rate in (0, 1e6]", r)
		}
		o.Rates = append(o.Rates, v)
	}
	stop, err := bench.Profile(*cpuProfile, "")
	defer stop()
	if err != nil {
		return err
	}
	return bench.E2E(ctx, o)
}

// benchPushCmd is `sluice bench push`.
func benchPushCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench push", flag.ContinueOnError)
	o := bench.DefaultPush()
	fs.StringVar(&o.URL, "url", "", "gateway base URL, on this machine and started with --push-allow-private (the endpoint listens on 127.0.0.1); empty starts a cluster (--brokers) in a temporary directory")
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "brokers of the started cluster")
	fs.StringVar(&o.Topic, "topic", o.Topic, "topic (created if missing, filled to --records); the latency run produces to <topic>-latency")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the created topics")
	fs.IntVar(&o.Records, "records", o.Records, "records each throughput round delivers from the topic's start")
	fs.IntVar(&o.Size, "size", o.Size, "bytes per record value")
	batches := fs.String("batch", formatInts(o.Batches), "batch.max_records of the batched pushes (format json), each 2 to 1000, comma-separated")
	targets := fs.String("targets", "", "targets each round runs, comma-separated, of poll, http, http-headers, push-1 and push-<batch> (default all, in that order)")
	endpoint := fs.Bool("endpoint", false, "internal: run as the endpoint process, on 127.0.0.1, until stdin ends")
	fs.StringVar(&o.Binary, "binary", "", "the sluice binary of the endpoint process and --processes (default this one)")
	fs.IntVar(&o.Connections, "connections", o.Connections, "group members of the poll baseline (at most one per partition)")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds, each running every target once")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "records per second of the latency run (0: no latency run)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the latency run produces (after a one-second warm-up)")
	fs.StringVar(&o.Acks, "acks", o.Acks, "acks of the latency run's produce requests: 0, 1 or all")
	fs.BoolVar(&o.Processes, "processes", false, "run the cluster as processes of this binary (`sluice broker` and `sluice gateway --push-allow-private`) coordinated through the ZooKeeper at --zk")
	fs.StringVar(&o.ZK, "zk", envOr("SLUICE_TEST_ZK", ""), "--processes: ZooKeeper host:port (env SLUICE_TEST_ZK)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (poller, plain POSTs, producer and, without --url or --processes, the cluster and its pushers; not the endpoint process) to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a profile of mutex contention in this process to this file")
	addResultsFlag(fs, &o.Results)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint {
		return bench.PushEndpoint(os.Stdin, os.Stdout)
	}
	var err error
	if o.Batches, err = parseInts(*batches); err != nil {
		return fmt.Errorf("--batch: %w", err)
	}
	if *targets != "" {
		o.Targets = strings.Split(*targets, ",")
	}
	stop, err := bench.Profile(*cpuProfile, *mutexProfile)
	defer stop()
	if err != nil {
		return err
	}
	return bench.Push(ctx, o)
}

// formatInts writes v comma-separated.
func formatInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// parseInts reads comma-separated integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// formatRates writes rates as --rates takes them.
func formatRates(rates []float64) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = strconv.FormatFloat(r, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

// benchWSCmd is `sluice bench ws`; with --client it is the child process
// that holds the idle consumers.
func benchWSCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench ws", flag.ContinueOnError)
	o := bench.DefaultWS()
	fs.IntVar(&o.Connections, "connections", o.Connections, "idle WebSocket consumers to open")
	fs.IntVar(&o.Credit, "credit", o.Credit, "credit each consumer grants; with credit an idle stream waits on its partition's shared long poll (one per partition, not one per stream), without it it only answers pings")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the topic the consumers spread over")
	fs.IntVar(&o.Groups, "groups", o.Groups, "with N > 0, the consumers are WebSocket members of N consumer groups (bench-ws-0 …), each group sharing the partitions among its members, instead of partition streams")
	fs.BoolVar(&o.SSE, "sse", false, "the consumers are Server-Sent Events partition streams instead of WebSockets")
	fs.DurationVar(&o.Hold, "hold", o.Hold, "how long the consumers stay open before memory is measured")
	fs.StringVar(&o.HeapProfile, "heapprofile", "", "write a heap profile of this process (the gateway and broker) to this file while the consumers are open")
	fs.StringVar(&o.URL, "url", "", "a running gateway (sluice dev) to measure instead of an embedded cluster; needs --pid, and WebSocket limits that admit --connections + 1 from 127.0.0.1")
	fs.IntVar(&o.PID, "pid", 0, "with --url: the gateway's process, whose VmRSS is read from /proc/PID/status")
	fs.BoolVar(&o.Dev, "dev", false, "start `sluice dev` as a child process (WebSocket limits admitting --connections) and measure it from outside, as --url and --pid do")
	addResultsFlag(fs, &o.Results)
	client := fs.String("client", "", "internal: run as the client process against this gateway URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *client != "" {
		return bench.WSClient(*client, o, os.Stdin)
	}
	return bench.WS(ctx, o)
}

// benchSinkCmd is `sluice bench sink redis|s3`.
func benchSinkCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "redis" && args[0] != "s3") {
		return errors.New("usage: sluice bench sink redis|s3 [flags]")
	}
	kind := args[0]
	fs := flag.NewFlagSet("bench sink "+kind, flag.ContinueOnError)
	c := bench.DefaultSink()
	fs.StringVar(&c.URL, "url", "", "gateway base URL; empty starts an embedded one-broker cluster in a temporary directory")
	fs.StringVar(&c.Topic, "topic", c.Topic, "topic (created and filled if missing)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of a created topic")
	fs.IntVar(&c.Records, "records", c.Records, "records in the topic")
	fs.IntVar(&c.Size, "size", c.Size, "bytes of each record's value (random letters in a JSON object)")
	fs.IntVar(&c.PollRecords, "poll-records", c.PollRecords, "records per sink poll")
	fs.BoolVar(&c.JSONPolls, "json-polls", false, "sinks poll JSON records instead of raw batches")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds, each running the sink then the baseline")
	fs.StringVar(&c.Redis, "redis", envOr("SLUICE_REDIS_URL", c.Redis), "redis: the Redis to write to (env SLUICE_REDIS_URL); keys under sluice-bench:")
	s3 := addS3Flags(fs)
	fs.IntVar(&c.MaxRecords, "max-records", c.MaxRecords, "s3: records per object")
	fs.StringVar(&c.Compression, "compression", "gzip", "s3: objects' compression, gzip or none")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process (the sink and, without --url, the cluster) to this file")
	addResultsFlag(fs, &c.Results)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	stop, err := bench.Profile(*cpuProfile, "")
	defer stop()
	if err != nil {
		return err
	}
	if kind == "redis" {
		return bench.SinkRedis(ctx, c)
	}
	bkt, err := s3.openS3(ctx)
	if err != nil {
		return err
	}
	defer closeLogged(slog.Default(), "the S3 bucket", bkt)
	c.Bucket = bkt
	return bench.SinkS3(ctx, c)
}

// benchBrokerCmd is `sluice bench broker`.
func benchBrokerCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench broker", flag.ContinueOnError)
	o := bench.DefaultBroker()
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions to create on the one broker")
	fs.IntVar(&o.Connections, "connections", o.Connections, "idle keep-alive connections to open to the broker's internal port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return bench.Broker(ctx, o)
}

// benchScaleCmd is `sluice bench scale`.
func benchScaleCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	o := bench.DefaultScale()
	fs.IntVar(&o.Topics, "topics", o.Topics, "topics to create, one after another")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of each topic")
	fs.IntVar(&o.ReplicationFactor, "rf", o.ReplicationFactor, "replication factor of each topic, 2 to --brokers")
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "how many sluice broker processes run")
	fs.StringVar(&o.ZK, "zk", envOr("SLUICE_TEST_ZK", ""), "ZooKeeper host:port the processes coordinate through, under a chroot of their own (env SLUICE_TEST_ZK)")
	fs.DurationVar(&o.SessionTimeout, "session-timeout", o.SessionTimeout, "the processes' --zk-session-timeout")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "the brokers' --drain-timeout: how long a SIGTERMed broker waits for its leaderships to move")
	fs.DurationVar(&o.IdleWindow, "idle-window", o.IdleWindow, "how long the brokers' idle CPU is measured over, once every partition has its leader and full ISR")
	fs.IntVar(&o.ClusterCalls, "cluster-calls", o.ClusterCalls, "GET /v1/cluster calls to time, one after another")
	fs.IntVar(&o.ProducePartitions, "produce-partitions", o.ProducePartitions, "partitions of the SIGTERMed broker that get an acks=all producer during its controlled shutdown")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long each step waits for the cluster's state before it reports that it timed out")
	addResultsFlag(fs, &o.Results)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return bench.Scale(ctx, o)
}

// addResultsFlag registers --results into path: a Markdown file the
// scenario appends its row to (after the table's header when the file does
// not end in a table row: new, empty, or ending in a line of text).
func addResultsFlag(fs *flag.FlagSet, path *string) {
	fs.StringVar(path, "results", "", "append this run's figures as a row of a Markdown table to this file (make bench collects every scenario in bench-results.md)")
}

// redisBenchURL is the Redis a bench compares with: SLUICE_REDIS_URL, else
// the test services' SLUICE_TEST_REDIS, else def.
func redisBenchURL(def string) string {
	if u := os.Getenv("SLUICE_REDIS_URL"); u != "" {
		return u
	}
	if a := os.Getenv("SLUICE_TEST_REDIS"); a != "" {
		return "redis://" + a + "/0"
	}
	return def
}

// flagSet reports whether the command line gave the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// benchKafkaCmd is `sluice bench kafka`.
func benchKafkaCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench kafka", flag.ContinueOnError)
	o := bench.DefaultKafka()
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "brokers of the embedded cluster, each with a Kafka listener")
	fs.IntVar(&o.ReplicationFactor, "replication-factor", o.ReplicationFactor, "replication factor of the topics")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of each topic")
	fs.IntVar(&o.Records, "records", o.Records, "records produced each way")
	fs.IntVar(&o.Size, "size", o.Size, "bytes of each record's value")
	fs.StringVar(&o.Acks, "acks", o.Acks, "acks of both producers: 1 or all")
	addResultsFlag(fs, &o.Results)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return bench.Kafka(ctx, o)
}
