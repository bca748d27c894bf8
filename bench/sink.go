package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// SinkOptions configure SinkRedis and SinkS3 (`sluice bench sink redis|s3`).
type SinkOptions struct {
	// URL is the gateway; empty starts a one-broker cluster in this process.
	URL string
	// Topic is created and filled if missing. Default "bench-sink".
	Topic string
	// Partitions of a created topic. Default 4.
	Partitions int
	// Records in the topic. Default 200,000.
	Records int
	// Size is bytes of each record's value (random letters in a JSON
	// object), at least 8. Default 100.
	Size int
	// PollRecords is records per sink poll. Default 2,000.
	PollRecords int
	// JSONPolls makes the sinks poll JSON records instead of raw batches
	// (sink.Options.JSONPolls), to compare the two.
	JSONPolls bool
	// Rounds, each running the sink and then the baseline. Default 3.
	Rounds int
	// Redis, for SinkRedis, is the URL of the Redis to write to; keys go
	// under sluice-bench:. Default "redis://127.0.0.1:6379/0".
	Redis string
	// Bucket, for SinkS3, is the S3 bucket to write to; required, not
	// closed.
	Bucket *tier.S3
	// MaxRecords, for SinkS3, is records per object. Default 20,000.
	MaxRecords int
	// Compression, for SinkS3, of the objects: sink.CompressionGzip (the
	// default) or sink.CompressionNone.
	Compression string
	// Results, when set, is a Markdown file the run appends its row to.
	Results string
	// Out receives the figures. Default os.Stdout.
	Out io.Writer

	// out is Out, keeping the first failed write (set by runSink).
	out *figures
}

// DefaultSink returns the defaults of SinkOptions.
func DefaultSink() SinkOptions {
	return SinkOptions{Topic: "bench-sink", Partitions: 4, Records: 200000, Size: 100, PollRecords: 2000, Rounds: 3,
		Redis: "redis://127.0.0.1:6379/0", MaxRecords: 20000}
}

// SinkRedis is `sluice bench sink redis`: a topic is filled once; then, in
// alternating rounds of one run, the Redis sink (stream mode) writes all of
// it with a fresh group and key prefix, and the baseline writes the same
// records to the same Redis without Sluice: XADD pipelines as deep as the
// sink's scripts.
func SinkRedis(ctx context.Context, c SinkOptions) error {
	ropts, err := redis.ParseURL(c.Redis)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	return runSink(ctx, c, func(c SinkOptions, cl *client.Client, total int64) error {
		return benchSinkRedis(ctx, c, cl, ropts, total)
	})
}

// SinkS3 is `sluice bench sink s3`: as SinkRedis, with the S3 archive sink
// against PUTs of the very objects it made, to the same bucket.
func SinkS3(ctx context.Context, c SinkOptions) error {
	if c.Bucket == nil {
		return errors.New("--s3-endpoint is required")
	}
	if c.MaxRecords < 1 {
		return errors.New("--max-records must be >= 1")
	}
	return runSink(ctx, c, func(c SinkOptions, cl *client.Client, total int64) error {
		return benchSinkS3(ctx, c, cl, c.Bucket, c.MaxRecords, total)
	})
}

// runSink validates c, starts a cluster unless c.URL names one, fills the
// topic and runs the scenario with c completed (URL, Out), a client of the
// gateway and the topic's record count.
func runSink(ctx context.Context, c SinkOptions, run func(c SinkOptions, cl *client.Client, total int64) error) (err error) {
	c.out = newFigures(c.Out)
	defer c.out.done(&err)
	if c.Records < 1 || c.Size < 8 || c.PollRecords < 1 || c.Rounds < 1 || c.Partitions < 1 {
		return errors.New("--records, --partitions, --poll-records and --rounds must be >= 1, --size >= 8")
	}
	bc, err := startCluster(ctx, clusterSpec{url: c.URL, brokers: 1})
	if err != nil {
		return err
	}
	defer bc.stop()
	c.URL = bc.url
	if err := ensureTopic(c.URL, c.Topic, c.Partitions, 1, nil); err != nil {
		return err
	}
	if err := fillSinkTopic(ctx, c, c.Topic); err != nil {
		return err
	}
	cl, err := newClient(c.URL)
	if err != nil {
		return err
	}
	defer cl.Close()
	total, err := topicRecords(ctx, cl, c.Topic)
	if err != nil {
		return err
	}
	return run(c, cl, total)
}

// fillSinkTopic produces records into topic until it holds c.Records:
// keys k0..k999, values {"n":i,"s":"<random letters>"} of c.Size bytes.
func fillSinkTopic(ctx context.Context, c SinkOptions, topic string) error {
	var t api.Topic
	if err := getJSON(c.URL+"/v1/topics/"+topic, &t); err != nil {
		return err
	}
	var have int64
	for _, p := range t.Partitions {
		have += p.HighWatermark
	}
	rng := rand.New(rand.NewPCG(1, 2))
	hc := benchClient(4)
	defer hc.CloseIdleConnections()
	const batch = 1000
	for n := int(have); n < c.Records; n += batch {
		var b bytes.Buffer
		for i := n; i < n+batch; i++ {
			head := fmt.Sprintf(`{"n":%d,"s":"`, i)
			letters := make([]byte, max(1, c.Size-len(head)-2))
			for j := range letters {
				letters[j] = 'a' + byte(rng.IntN(26))
			}
			fmt.Fprintf(&b, `{"key":"k%d","value":%s%s"}}`+"\n", i%1000, head, letters)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/topics/"+topic+"/records?acks=all", &b)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("producing to %s: %d", topic, resp.StatusCode)
		}
	}
	return nil
}

// topicRecords is the sum of the topic's high watermarks.
func topicRecords(ctx context.Context, cl *client.Client, topic string) (int64, error) {
	t, err := cl.GetTopic(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range t.Partitions {
		n += p.HighWatermark - p.LogStartOffset
	}
	return n, nil
}

// runSinkToEnd runs a sink over store with a fresh group until it has
// written want records, and returns how long that took and its totals.
func runSinkToEnd(ctx context.Context, c SinkOptions, store sink.Store, group string, want int64) (time.Duration, sink.Stats, error) {
	cl, err := newClient(c.URL)
	if err != nil {
		return 0, sink.Stats{}, err
	}
	defer cl.Close()
	s, err := sink.New(cl, sink.Options{Group: group, Topics: []string{c.Topic}, Store: store, MaxRecords: c.PollRecords,
		MaxWait: 100 * time.Millisecond, LagInterval: -1, JSONPolls: c.JSONPolls,
		Logger: warnLogger()})
	if err != nil {
		return 0, sink.Stats{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(rctx) }()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.Stats().Written < want {
		select {
		case err := <-done:
			cancel()
			return 0, sink.Stats{}, fmt.Errorf("the sink stopped after %d of %d records: %v", s.Stats().Written, want, err)
		case <-ctx.Done():
			cancel()
			_ = <-done // its cancellation
			return 0, sink.Stats{}, ctx.Err()
		case <-t.C:
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		return 0, sink.Stats{}, err
	}
	return elapsed, s.Stats(), nil
}

// benchSinkRedis compares the Redis sink (stream mode) with XADD
// pipelines of the same records, as deep as the sink's scripts were on
// average, on one connection to the same Redis; and with redis-benchmark's
// XADD at that depth when it is installed.
func benchSinkRedis(ctx context.Context, c SinkOptions, cl *client.Client, ropts *redis.Options, total int64) error {
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", ropts.Addr, err)
	}
	recs, err := readTopic(ctx, cl, c.Topic)
	if err != nil {
		return err
	}
	c.out.printf("sink redis: %d records of %d bytes in %d partitions, polls of %d records, %d rounds; Redis at %s\n",
		total, c.Size, c.Partitions, c.PollRecords, c.Rounds, ropts.Addr)
	c.out.printf("%-6s %14s %10s %14s %10s %16s\n", "round", "sink rec/s", "depth", "XADD rec/s", "ratio", "reads only rec/s")
	var sinkRates, xaddRates, readRates []float64
	depth := 0
	for round := range c.Rounds {
		prefix := fmt.Sprintf("sluice-bench:%d:%d:", time.Now().UnixNano(), round)
		store, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: "bench", Prefix: prefix})
		if err != nil {
			return err
		}
		elapsed, st, err := runSinkToEnd(ctx, c, store, fmt.Sprintf("bench-sink-redis-%d", time.Now().UnixNano()), total)
		if err != nil {
			return err
		}
		sinkRate := float64(st.Written) / elapsed.Seconds()
		if depth == 0 {
			depth = max(1, int(st.Written/max(st.Batches, 1)))
		}
		xaddRate, err := benchXADD(ctx, rdb, prefix+"baseline", recs, depth)
		if err != nil {
			return err
		}
		if err := deleteKeys(ctx, rdb, prefix+"*"); err != nil {
			return err
		}
		readRate, err := benchSinkReads(ctx, c, total)
		if err != nil {
			return err
		}
		sinkRates, xaddRates, readRates = append(sinkRates, sinkRate), append(xaddRates, xaddRate), append(readRates, readRate)
		c.out.printf("%-6d %14.0f %10d %14.0f %10.2f %16.0f\n", round+1, sinkRate, depth, xaddRate, sinkRate/xaddRate, readRate)
	}
	c.out.printf("median records/s: sink %.0f, XADD pipelines of %d %.0f; ratio sink/XADD: %.2f\n",
		median(sinkRates), depth, median(xaddRates), median(sinkRates)/median(xaddRates))
	c.out.printf("median records/s of the sink's reads alone (a store that writes nothing): %.0f; ratio sink/reads: %.2f\n",
		median(readRates), median(sinkRates)/median(readRates))
	if rb, err := exec.LookPath("redis-benchmark"); err == nil {
		rate, err := redisBenchmarkXADD(ctx, rb, ropts.Addr, depth, c.Size, min(total, 1_000_000))
		if err != nil {
			return err
		}
		c.out.printf("redis-benchmark XADD (-c 1 -P %d, %d-byte value): %.0f requests/s; ratio sink/redis-benchmark: %.2f\n",
			depth, c.Size, rate, median(sinkRates)/rate)
	}
	return appendBenchRow(c.Results, benchRow{scenario: "sink redis (exactly once)", unit: "records/s",
		baseline: fmt.Sprintf("XADD pipelines of %d %.0f", depth, median(xaddRates)), sluice: fmt.Sprintf("%.0f", median(sinkRates)),
		ratio: ratioCell(median(sinkRates), median(xaddRates))})
}

// readTopic reads every record of topic, partition by partition.
func readTopic(ctx context.Context, cl *client.Client, topic string) ([]api.GroupRecord, error) {
	t, err := cl.GetTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []api.GroupRecord
	for _, p := range t.Partitions {
		for off := p.LogStartOffset; off < p.HighWatermark; {
			fr, err := cl.Fetch(ctx, topic, p.Partition, client.At(off), client.FetchOptions{MaxRecords: 10000})
			if err != nil {
				return nil, err
			}
			if len(fr.Records) == 0 {
				break
			}
			for _, r := range fr.Records {
				out = append(out, api.GroupRecord{Topic: topic, Partition: p.Partition, FetchedRecord: r})
			}
			off = fr.Records[len(fr.Records)-1].Offset + 1
		}
	}
	return out, nil
}

// benchXADD appends recs to stream key as the sink's stream mode does
// (fields partition, offset, key, value), in pipelines of depth commands
// on one connection, and returns records/s.
func benchXADD(ctx context.Context, rdb *redis.Client, key string, recs []api.GroupRecord, depth int) (float64, error) {
	start := time.Now()
	for i := 0; i < len(recs); i += depth {
		pipe := rdb.Pipeline()
		for _, r := range recs[i:min(i+depth, len(recs))] {
			vals := []any{"partition", strconv.Itoa(int(r.Partition)), "offset", strconv.FormatInt(r.Offset, 10)}
			if r.Key != nil {
				vals = append(vals, "key", *r.Key)
			}
			vals = append(vals, "value", []byte(r.Value))
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: vals})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("XADD pipeline: %w", err)
		}
	}
	return float64(len(recs)) / time.Since(start).Seconds(), nil
}

// redisBenchmarkXADD runs redis-benchmark: one client, pipelines of depth
// XADDs of a value of size bytes, n requests; it returns requests/s.
func redisBenchmarkXADD(ctx context.Context, bin, addr string, depth, size int, n int64) (float64, error) {
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return 0, fmt.Errorf("redis address %q: want host:port", addr)
	}
	key := fmt.Sprintf("sluice-bench:rb:%d", time.Now().UnixNano())
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-c", "1", "-P", strconv.Itoa(depth), "-n", strconv.FormatInt(n, 10),
		"--csv", "XADD", key, "*", "partition", "0", "offset", "12345", "key", "k123", "value", strings.Repeat("v", size))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	_ = rdb.Del(ctx, key).Err()
	rows, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[len(rows)-1]) < 2 {
		return 0, fmt.Errorf("redis-benchmark output %q: %v", out, err)
	}
	return strconv.ParseFloat(rows[len(rows)-1][1], 64)
}

func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// benchSinkS3 compares the S3 archive sink with PUTs of the very objects
// it created (same sizes, same bytes) to the same server, one at a time.
func benchSinkS3(ctx context.Context, c SinkOptions, cl *client.Client, bkt *tier.S3, maxRecords int, total int64) error {
	c.out.printf("sink s3: %d records of %d bytes in %d partitions, polls of %d records, objects of %d records, %d rounds\n",
		total, c.Size, c.Partitions, c.PollRecords, maxRecords, c.Rounds)
	c.out.printf("%-6s %8s %12s %12s %12s %12s %8s %12s %16s\n", "round", "objects", "avg bytes", "sink MB/s", "NDJSON MB/s", "PUT MB/s", "ratio", "sink rec/s", "reads only rec/s")
	var sinkRates, putRates, recRates, readRates []float64
	for round := range c.Rounds {
		prefix := fmt.Sprintf("sluice-bench/%d-%d", time.Now().UnixNano(), round)
		if err := sink.ProbeConditionalWrites(ctx, bkt, prefix); err != nil {
			return err
		}
		store, err := sink.NewS3Store(bkt, sink.S3Options{Group: "bench", Prefix: prefix, MaxRecords: maxRecords,
			MaxBytes: 1 << 40, MaxInterval: time.Hour, Compression: c.Compression, ReadLog: sink.ClientLog(cl)})
		if err != nil {
			return err
		}
		// The last object of each partition is short; the sink is done when
		// every full object is stored.
		var want int64
		t, err := cl.GetTopic(ctx, c.Topic)
		if err != nil {
			return err
		}
		for _, p := range t.Partitions {
			want += (p.HighWatermark - p.LogStartOffset) / int64(maxRecords) * int64(maxRecords)
		}
		elapsed, sst, err := runSinkToEnd(ctx, c, store, fmt.Sprintf("bench-sink-s3-%d", time.Now().UnixNano()), want)
		if err != nil {
			return err
		}
		recRate := float64(sst.Written) / elapsed.Seconds()
		st := store.Stats()
		sinkRate, rawRate := float64(st.Bytes)/1e6/elapsed.Seconds(), float64(st.RawBytes)/1e6/elapsed.Seconds()

		// The baseline: the same objects PUT again, plainly, one at a time.
		var objs [][]byte
		if err := bkt.List(ctx, prefix+"/", func(info tier.ObjectInfo) error {
			if strings.HasSuffix(info.Key, ".ndjson.gz") || strings.HasSuffix(info.Key, ".ndjson") {
				data, _, err := bkt.ReadObject(ctx, info.Key)
				if err != nil {
					return err
				}
				objs = append(objs, data)
			}
			return nil
		}); err != nil {
			return err
		}
		var n int64
		start := time.Now()
		for i, data := range objs {
			if err := bkt.Put(ctx, fmt.Sprintf("%s-plain/%06d", prefix, i), bytes.NewReader(data), int64(len(data))); err != nil {
				return err
			}
			n += int64(len(data))
		}
		putRate := float64(n) / 1e6 / time.Since(start).Seconds()
		if err := deletePrefix(ctx, bkt, prefix); err != nil {
			return err
		}
		readRate, err := benchSinkReads(ctx, c, want)
		if err != nil {
			return err
		}
		sinkRates, putRates, recRates, readRates = append(sinkRates, sinkRate), append(putRates, putRate), append(recRates, recRate), append(readRates, readRate)
		c.out.printf("%-6d %8d %12d %12.1f %12.1f %12.1f %8.2f %12.0f %16.0f\n", round+1, st.Objects, st.Bytes/max(st.Objects, 1),
			sinkRate, rawRate, putRate, sinkRate/putRate, recRate, readRate)
	}
	comp := c.Compression
	if comp == "" {
		comp = sink.CompressionGzip
	}
	c.out.printf("median MB/s (object bytes, compression %s): sink %.1f, plain PUTs of the same objects %.1f; ratio sink/PUT: %.2f\n",
		comp, median(sinkRates), median(putRates), median(sinkRates)/median(putRates))
	c.out.printf("median records/s: sink %.0f, the sink's reads alone (a store that writes nothing) %.0f; ratio sink/reads: %.2f\n",
		median(recRates), median(readRates), median(recRates)/median(readRates))
	scenario := "sink s3 (exactly once, gzipped objects)"
	if comp == sink.CompressionNone {
		scenario = "sink s3 (exactly once, uncompressed objects)"
	}
	return appendBenchRow(c.Results, benchRow{scenario: scenario, unit: "MB/s",
		baseline: fmt.Sprintf("plain PUTs of the same objects %.1f", median(putRates)), sluice: fmt.Sprintf("%.1f", median(sinkRates)),
		ratio: ratioCell(median(sinkRates), median(putRates))})
}

// deletePrefix removes every object under prefix (and prefix-plain).
func deletePrefix(ctx context.Context, bkt *tier.S3, prefix string) error {
	var keys []string
	if err := bkt.List(ctx, prefix, func(info tier.ObjectInfo) error { keys = append(keys, info.Key); return nil }); err != nil {
		return err
	}
	for _, k := range keys {
		if err := bkt.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// benchSinkReads runs the sink with a store that writes nothing, to the
// same record count: the rate its reads (group polls) allow.
func benchSinkReads(ctx context.Context, c SinkOptions, want int64) (float64, error) {
	elapsed, st, err := runSinkToEnd(ctx, c, discardStore{}, fmt.Sprintf("bench-sink-reads-%d", time.Now().UnixNano()), want)
	if err != nil {
		return 0, err
	}
	return float64(st.Written) / elapsed.Seconds(), nil
}

// discardStore takes every batch and keeps nothing: Claim finds nothing
// written, Write moves next past the batch.
type discardStore struct{}

func (discardStore) Claim(context.Context, api.TopicPartition, int64) (int64, error) { return -1, nil }

func (discardStore) Write(_ context.Context, _ api.TopicPartition, _ int64, recs []sink.Record) (int64, error) {
	return recs[len(recs)-1].Offset + 1, nil
}
