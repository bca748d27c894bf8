package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
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

// sinkBenchConfig is what `sluice bench sink redis|s3` drives.
type sinkBenchConfig struct {
	url         string
	topic       string
	partitions  int
	records     int
	size        int
	pollRecords int
	rounds      int
	results     string
}

// benchSink is `sluice bench sink redis|s3`: a topic is filled once; then,
// in alternating rounds of one run, a sink writes all of it to the store
// with a fresh group and key prefix, and the baseline writes the same data
// to the same server without Sluice: XADD pipelines as deep as the sink's
// scripts (Redis), or PUTs of the objects the sink made (S3).
func benchSink(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "redis" && args[0] != "s3") {
		return errors.New("usage: sluice bench sink redis|s3 [flags]")
	}
	kind := args[0]
	fs := flag.NewFlagSet("bench sink "+kind, flag.ContinueOnError)
	var c sinkBenchConfig
	fs.StringVar(&c.url, "url", "", "gateway base URL; empty starts an embedded one-broker cluster in a temporary directory")
	fs.StringVar(&c.topic, "topic", "bench-sink", "topic (created and filled if missing)")
	fs.IntVar(&c.partitions, "partitions", 4, "partitions of a created topic")
	fs.IntVar(&c.records, "records", 200000, "records in the topic")
	fs.IntVar(&c.size, "size", 100, "bytes of each record's value (random letters in a JSON object)")
	fs.IntVar(&c.pollRecords, "poll-records", 2000, "records per sink poll")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds, each running the sink then the baseline")
	redisURL := fs.String("redis", envOr("SLUICE_REDIS_URL", "redis://127.0.0.1:6379/0"), "redis: the Redis to write to (env SLUICE_REDIS_URL); keys under sluice-bench:")
	s3 := addS3Flags(fs)
	maxRecords := fs.Int("max-records", 20000, "s3: records per object")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process (the sink and, without --url, the cluster) to this file")
	results := addResultsFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	c.results = *results
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.records < 1 || c.size < 8 || c.pollRecords < 1 || c.rounds < 1 || c.partitions < 1 {
		return errors.New("--records, --partitions, --poll-records and --rounds must be >= 1, --size >= 8")
	}
	if c.url == "" {
		url, _, stop, err := startEmbedded(1, nil)
		if err != nil {
			return err
		}
		defer stop()
		c.url = url
	}
	if err := ensureTopic(c.url, c.topic, c.partitions, 1, nil); err != nil {
		return err
	}
	if err := fillSinkTopic(ctx, c, c.topic); err != nil {
		return err
	}
	cl, err := newClient(c.url)
	if err != nil {
		return err
	}
	defer cl.Close()
	total, err := topicRecords(ctx, cl, c.topic)
	if err != nil {
		return err
	}
	if kind == "redis" {
		ropts, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
		return benchSinkRedis(ctx, c, cl, ropts, total)
	}
	bkt, err := s3.openS3(ctx)
	if err != nil {
		return err
	}
	defer closeLogged(slog.Default(), "the S3 bucket", bkt)
	return benchSinkS3(ctx, c, cl, bkt, *maxRecords, total)
}

// fillSinkTopic produces records into topic until it holds c.records:
// keys k0..k999, values {"n":i,"s":"<random letters>"} of c.size bytes.
func fillSinkTopic(ctx context.Context, c sinkBenchConfig, topic string) error {
	var t api.Topic
	if err := getJSON(c.url+"/v1/topics/"+topic, &t); err != nil {
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
	for n := int(have); n < c.records; n += batch {
		var b bytes.Buffer
		for i := n; i < n+batch; i++ {
			head := fmt.Sprintf(`{"n":%d,"s":"`, i)
			letters := make([]byte, max(1, c.size-len(head)-2))
			for j := range letters {
				letters[j] = 'a' + byte(rng.IntN(26))
			}
			fmt.Fprintf(&b, `{"key":"k%d","value":%s%s"}}`+"\n", i%1000, head, letters)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/topics/"+topic+"/records?acks=all", &b)
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
func runSinkToEnd(ctx context.Context, c sinkBenchConfig, store sink.Store, group string, want int64) (time.Duration, sink.Stats, error) {
	cl, err := newClient(c.url)
	if err != nil {
		return 0, sink.Stats{}, err
	}
	defer cl.Close()
	s, err := sink.New(cl, sink.Options{Group: group, Topics: []string{c.topic}, Store: store, MaxRecords: c.pollRecords,
		MaxWait: 100 * time.Millisecond, LagInterval: -1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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
func benchSinkRedis(ctx context.Context, c sinkBenchConfig, cl *client.Client, ropts *redis.Options, total int64) error {
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", ropts.Addr, err)
	}
	recs, err := readTopic(ctx, cl, c.topic)
	if err != nil {
		return err
	}
	fmt.Printf("sink redis: %d records of %d bytes in %d partitions, polls of %d records, %d rounds; Redis at %s\n",
		total, c.size, c.partitions, c.pollRecords, c.rounds, ropts.Addr)
	fmt.Printf("%-6s %14s %10s %14s %10s %16s\n", "round", "sink rec/s", "depth", "XADD rec/s", "ratio", "reads only rec/s")
	var sinkRates, xaddRates, readRates []float64
	depth := 0
	for round := range c.rounds {
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
		fmt.Printf("%-6d %14.0f %10d %14.0f %10.2f %16.0f\n", round+1, sinkRate, depth, xaddRate, sinkRate/xaddRate, readRate)
	}
	fmt.Printf("median records/s: sink %.0f, XADD pipelines of %d %.0f; ratio sink/XADD: %.2f\n",
		median(sinkRates), depth, median(xaddRates), median(sinkRates)/median(xaddRates))
	fmt.Printf("median records/s of the sink's reads alone (a store that writes nothing): %.0f; ratio sink/reads: %.2f\n",
		median(readRates), median(sinkRates)/median(readRates))
	if rb, err := exec.LookPath("redis-benchmark"); err == nil {
		rate, err := redisBenchmarkXADD(ctx, rb, ropts.Addr, depth, c.size, min(total, 1_000_000))
		if err != nil {
			return err
		}
		fmt.Printf("redis-benchmark XADD (-c 1 -P %d, %d-byte value): %.0f requests/s; ratio sink/redis-benchmark: %.2f\n",
			depth, c.size, rate, median(sinkRates)/rate)
	}
	return appendBenchRow(c.results, benchRow{scenario: "sink redis (exactly once)", unit: "records/s",
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
func benchSinkS3(ctx context.Context, c sinkBenchConfig, cl *client.Client, bkt *tier.S3, maxRecords int, total int64) error {
	fmt.Printf("sink s3: %d records of %d bytes in %d partitions, polls of %d records, objects of %d records, %d rounds\n",
		total, c.size, c.partitions, c.pollRecords, maxRecords, c.rounds)
	fmt.Printf("%-6s %8s %12s %12s %12s %12s %8s %12s %16s\n", "round", "objects", "avg bytes", "sink MB/s", "NDJSON MB/s", "PUT MB/s", "ratio", "sink rec/s", "reads only rec/s")
	var sinkRates, putRates, recRates, readRates []float64
	for round := range c.rounds {
		prefix := fmt.Sprintf("sluice-bench/%d-%d", time.Now().UnixNano(), round)
		if err := sink.ProbeConditionalWrites(ctx, bkt, prefix); err != nil {
			return err
		}
		store, err := sink.NewS3Store(bkt, sink.S3Options{Group: "bench", Prefix: prefix, MaxRecords: maxRecords,
			MaxBytes: 1 << 40, MaxInterval: time.Hour, ReadLog: sink.ClientLog(cl)})
		if err != nil {
			return err
		}
		// The last object of each partition is short; the sink is done when
		// every full object is stored.
		var want int64
		t, err := cl.GetTopic(ctx, c.topic)
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
			if strings.HasSuffix(info.Key, ".ndjson.gz") {
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
		fmt.Printf("%-6d %8d %12d %12.1f %12.1f %12.1f %8.2f %12.0f %16.0f\n", round+1, st.Objects, st.Bytes/max(st.Objects, 1),
			sinkRate, rawRate, putRate, sinkRate/putRate, recRate, readRate)
	}
	fmt.Printf("median MB/s (gzipped object bytes): sink %.1f, plain PUTs of the same objects %.1f; ratio sink/PUT: %.2f\n",
		median(sinkRates), median(putRates), median(sinkRates)/median(putRates))
	fmt.Printf("median records/s: sink %.0f, the sink's reads alone (a store that writes nothing) %.0f; ratio sink/reads: %.2f\n",
		median(recRates), median(readRates), median(recRates)/median(readRates))
	return appendBenchRow(c.results, benchRow{scenario: "sink s3 (exactly once, gzipped objects)", unit: "MB/s",
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
func benchSinkReads(ctx context.Context, c sinkBenchConfig, want int64) (float64, error) {
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
