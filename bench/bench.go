// Package bench is what `sluice bench` runs: scenarios that measure a Sluice
// cluster through its gateway, each against a baseline measured in the same
// run (rounds alternate the two, so slow spells of a shared machine hit both,
// and medians keep one bad round from deciding), with the machine's and this
// process's CPU per megabyte beside each figure, and a row for the Markdown
// table that `make bench` collects.
//
// A scenario drives the gateway at URL, or starts a cluster for the run: in
// this process (package embedded, on a temporary directory), or with
// Processes as `sluice broker` and `sluice gateway` processes of the sluice
// binary coordinated through a ZooKeeper. Every field of an options struct
// is the `sluice bench` flag of the same name; the Default functions give
// the flags' defaults. Figures go to Out, the clusters' warnings to stderr.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-io/sluice/tier"
)

// ThroughputOptions configure Produce and Consume (`sluice bench produce`
// and `sluice bench consume`).
type ThroughputOptions struct {
	// URL is the gateway; empty starts a cluster of Brokers for the run.
	URL string
	// Brokers of a started cluster. Default 1.
	Brokers int
	// ReplicationFactor of a created topic. Default 1.
	ReplicationFactor int
	// Rate, for Produce, is requests per second over all connections; 0
	// (the default) is as fast as possible.
	Rate float64
	// Topic is created if missing. Default "bench".
	Topic string
	// Partitions of a created topic. Default 8.
	Partitions int
	// Connections is how many HTTP connections run at once. Default 8.
	Connections int
	// Batch is records per produce request. Default 1,000.
	Batch int
	// Size is bytes per record value, at least 2. Default 100.
	Size int
	// Duration of each round. Default 5 s.
	Duration time.Duration
	// Acks of Produce: 0, 1 or all. Default "1".
	Acks string
	// Baseline is what to compare with. Produce: append (a plain net/http
	// server that only appends bodies to a file, the ceiling), rf1 (acks=1
	// on a replication-factor-1 topic of the same cluster) or none. Consume:
	// sendfile (with Raw: a plain HTTP server sending the same segment files
	// with sendfile), redis (Redis XREAD COUNT 1000 of the same records) or
	// none. Default "": append for Produce, none for Consume.
	Baseline string
	// Rounds, each running the baseline and then sluice. Default 3.
	Rounds int
	// Raw, for Consume, reads raw batches (/batches) instead of decoded JSON
	// records. Default false.
	Raw bool
	// Configs are topic configs of a created topic. Default none.
	Configs map[string]string
	// Records is how many records Consume's Cold, Group, sendfile and redis
	// runs write to each topic. Default 300,000.
	Records int
	// Cold, for Consume, produces Records into a tiered topic and a plain
	// one, waits until the tiered one is in the object store, then reads
	// both from offset 0 in alternating rounds. Default false.
	Cold bool
	// Group, for Consume, reads the topic through a consumer group (members
	// committing every poll) and with plain partition fetches, in
	// alternating rounds. Default false.
	Group bool
	// Processes runs the started cluster as processes of Binary,
	// coordinated through the ZooKeeper at ZK. Default false: in this
	// process.
	Processes bool
	ZK        string
	// Binary is the sluice binary Processes runs. Default: this process's
	// executable.
	Binary string
	// Redis is the URL of the Redis the redis baseline reads from; keys go
	// under sluice-bench:. Default "redis://127.0.0.1:6379/0".
	Redis string
	// Bucket is the object store of a cluster started in this process
	// (Cold reads from it); Produce and Consume do not close it. Default
	// nil: a local directory in the cluster's temporary directory.
	Bucket tier.Bucket
	// RemoteCacheBytes bounds each started broker's disk cache of remote
	// segments (broker.Options.RemoteCacheBytes): Cold's rounds after the
	// first read the tiered topic from it. Default 1 GiB, as `sluice
	// broker`'s; 0: off, every cold round reads the object store.
	RemoteCacheBytes int64
	// Results, when set, is a Markdown file the run appends its row to.
	Results string
	// Out receives the figures. Default os.Stdout.
	Out io.Writer

	// out is Out, keeping the first failed write (set by runThroughput).
	out *figures

	// fetchRecords is max_records of a JSON consume's fetches; 0: 10,000.
	fetchRecords int
}

// DefaultThroughput returns the defaults of ThroughputOptions.
func DefaultThroughput() ThroughputOptions {
	return ThroughputOptions{Brokers: 1, ReplicationFactor: 1, Topic: "bench", Partitions: 8, Connections: 8,
		Batch: 1000, Size: 100, Duration: 5 * time.Second, Acks: "1", Rounds: 3, Records: 300000,
		Redis: "redis://127.0.0.1:6379/0", RemoteCacheBytes: 1 << 30}
}

// Produce is `sluice bench produce`: records posted as NDJSON from
// Connections goroutines for Duration, round after round, against the
// baseline.
func Produce(ctx context.Context, o ThroughputOptions) error { return runThroughput(ctx, "produce", o) }

// Consume is `sluice bench consume`: every partition read from its start,
// as JSON records or raw batches, plain or through a group, hot or cold,
// against the baseline.
func Consume(ctx context.Context, o ThroughputOptions) error { return runThroughput(ctx, "consume", o) }

func runThroughput(ctx context.Context, mode string, c ThroughputOptions) (err error) {
	c.out = newFigures(c.Out)
	defer c.out.done(&err)
	if c.Size < 2 || c.Batch < 1 || c.Connections < 1 || c.Rounds < 1 {
		return errors.New("--size must be >= 2, --batch, --connections and --rounds >= 1")
	}
	switch {
	case c.Baseline == "" && mode == "produce":
		c.Baseline = "append"
	case c.Baseline == "":
		c.Baseline = "none"
	case mode == "produce" && c.Baseline != "append" && c.Baseline != "rf1" && c.Baseline != "none":
		return fmt.Errorf("--baseline %q: produce compares with append, rf1 or none", c.Baseline)
	case mode == "consume" && c.Baseline != "sendfile" && c.Baseline != "redis" && c.Baseline != "none":
		return fmt.Errorf("--baseline %q: consume compares with sendfile (--raw), redis or none", c.Baseline)
	case c.Baseline == "sendfile" && (!c.Raw || c.URL != "" || c.Processes):
		return errors.New("--baseline sendfile reads the embedded cluster's segment files: it needs --raw, and neither --url nor --processes")
	}
	if c.Baseline == "sendfile" && c.Brokers != 1 {
		return errors.New("--baseline sendfile: one broker (its files are the ones served)")
	}
	cl, err := startCluster(ctx, clusterSpec{url: c.URL, brokers: c.Brokers, processes: c.Processes, zk: c.ZK, binary: c.Binary, bucket: c.Bucket, remoteCache: c.RemoteCacheBytes})
	if err != nil {
		return err
	}
	defer cl.stop()
	c.URL = cl.url
	if err := ensureTopic(c.URL, c.Topic, c.Partitions, c.ReplicationFactor, c.Configs); err != nil {
		return err
	}
	rf1Topic := c.Topic + "-rf1"
	if c.Baseline == "rf1" {
		if err := ensureTopic(c.URL, rf1Topic, c.Partitions, 1, nil); err != nil {
			return err
		}
	}
	if mode == "consume" && c.Cold {
		return benchCold(ctx, c, c.Records, c.Results)
	}
	if mode == "consume" && c.Group {
		return benchGroup(ctx, c, c.Records, c.Results)
	}
	if mode == "consume" && c.Baseline == "sendfile" {
		// The baseline serves broker 1's segment files.
		return benchSendfile(ctx, c, c.Records, cl.embedded.BrokerDir(1), c.Results)
	}
	if mode == "consume" && c.Baseline == "redis" {
		return benchConsumeRedis(ctx, c, c.Records, c.Redis, c.Results)
	}
	c.out.printf("%s: %d connections, %d records of %d bytes per request, %s per round, acks=%s, replication factor %d\n", mode, c.Connections, c.Batch, c.Size, c.Duration, c.Acks, c.ReplicationFactor)
	c.out.printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	if mode == "consume" {
		res, err := benchConsume(ctx, c)
		if err != nil {
			return err
		}
		res.print(c.out, "sluice")
		return nil
	}
	body := ndjsonBody(c.Batch, c.Size)
	var bases, results []float64
	for round := 0; round < c.Rounds; round++ {
		switch c.Baseline {
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
			base.print(c.out, "baseline")
			bases = append(bases, base.recordsPerSec)
		case "rf1":
			base, err := benchProduce(ctx, c, c.URL+"/v1/topics/"+rf1Topic+"/records?acks=1", body)
			if err != nil {
				return err
			}
			base.print(c.out, "acks1-rf1")
			bases = append(bases, base.recordsPerSec)
		}
		res, err := benchProduce(ctx, c, c.URL+"/v1/topics/"+c.Topic+"/records?acks="+c.Acks, body)
		if err != nil {
			return err
		}
		res.print(c.out, "sluice")
		results = append(results, res.recordsPerSec)
	}
	if c.Baseline != "none" {
		// Rounds alternate the two targets, so slow spells of a shared
		// machine hit both; medians keep one bad round from deciding.
		c.out.printf("median records/s: baseline %.0f, sluice %.0f; ratio sluice/baseline: %.2f\n",
			median(bases), median(results), median(results)/median(bases))
		row := benchRow{scenario: "produce", unit: "records/s", baseline: fmt.Sprintf("append-to-file HTTP server %.0f", median(bases)),
			sluice: fmt.Sprintf("%.0f", median(results)), ratio: ratioCell(median(results), median(bases))}
		if c.Baseline == "rf1" {
			where := "in one process"
			if c.Processes {
				where = "processes + ZooKeeper"
			}
			row.scenario = fmt.Sprintf("produce acks=%s RF=%d, %d brokers (%s)", c.Acks, c.ReplicationFactor, c.Brokers, where)
			row.baseline = fmt.Sprintf("acks=1 RF=1 %.0f", median(bases))
			row.aim = "≥ 0.6"
		} else {
			row.scenario = fmt.Sprintf("produce acks=%s RF=%d", c.Acks, c.ReplicationFactor)
		}
		return appendBenchRow(c.Results, row)
	}
	return nil
}
