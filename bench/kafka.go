package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/embedded"
)

// KafkaOptions configure Kafka (`sluice bench kafka`).
type KafkaOptions struct {
	// Brokers of the embedded cluster, each with a Kafka listener. Default 3.
	Brokers int
	// ReplicationFactor of the topics. Default 3.
	ReplicationFactor int
	// Partitions of each topic. Default 6.
	Partitions int
	// Records produced each way, of Size bytes of value. Defaults 200,000 and 100.
	Records int
	Size    int
	// Acks for both producers: "1" or "all". Default "all".
	Acks string
	// Results, when set, is a Markdown file the run appends its rows to.
	Results string
	// Out receives the figures. Default os.Stdout.
	Out io.Writer
}

// DefaultKafka returns the defaults of KafkaOptions.
func DefaultKafka() KafkaOptions {
	return KafkaOptions{Brokers: 3, ReplicationFactor: 3, Partitions: 6, Records: 200_000, Size: 100, Acks: "all"}
}

// Kafka is `sluice bench kafka`: the Kafka listener against the HTTP door of
// the same cluster, in one run. franz-go produces Records through the
// brokers' Kafka listeners, and the Go client produces the same number of
// records of the same size through the gateway (batches of 1,000, one
// sender per partition); then franz-go consumes its topic from the start,
// and raw /batches fetches (one reader per partition, records decoded)
// read the same topic. The brokers' sendfile counters say how many of the
// bytes Kafka fetches served went from the segment file to the socket.
func Kafka(ctx context.Context, o KafkaOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	if o.Brokers < 1 || o.Partitions < 1 || o.Records < 1 || o.Size < 1 || o.ReplicationFactor < 1 || o.ReplicationFactor > o.Brokers {
		return errors.New("--brokers, --partitions, --records, --size >= 1 and 1 <= --replication-factor <= --brokers")
	}
	if o.Acks != "1" && o.Acks != "all" {
		return fmt.Errorf("--acks %q: want 1 or all", o.Acks)
	}
	cl, err := embedded.Start(ctx, embedded.Options{Brokers: o.Brokers, Logger: warnLogger(),
		Broker: func(_ int, bo *broker.Options) { bo.Kafka.Addr = "127.0.0.1:0" }})
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	var seeds []string
	for id := 1; id <= o.Brokers; id++ {
		seeds = append(seeds, cl.Broker(id).KafkaAddr())
	}
	for _, t := range []string{"bench-kafka", "bench-http"} {
		if err := ensureTopic(cl.URL(), t, o.Partitions, o.ReplicationFactor, nil); err != nil {
			return err
		}
	}
	values := benchValues(o.Records, o.Size)
	out.printf("kafka: %d brokers, topics of %d partitions RF %d, %d records of %d bytes each way, acks=%s; load average %s\n",
		o.Brokers, o.Partitions, o.ReplicationFactor, o.Records, o.Size, o.Acks, loadAverage())

	kgoRate, err := kgoProduce(ctx, seeds, "bench-kafka", o.Acks, values)
	if err != nil {
		return fmt.Errorf("franz-go produce: %w", err)
	}
	httpRate, err := httpProduce(ctx, cl.URL(), "bench-http", o.Partitions, o.Acks, values)
	if err != nil {
		return fmt.Errorf("HTTP produce: %w", err)
	}
	out.printf("produce, records/s: franz-go through the Kafka listener %.0f, the Go client through the gateway %.0f; ratio kafka/http %.2f\n",
		kgoRate, httpRate, kgoRate/httpRate)

	before, err := kafkaFetchCounters(ctx, cl, o.Brokers)
	if err != nil {
		return err
	}
	consumeRate, err := kgoConsume(ctx, seeds, "bench-kafka", o.Records)
	if err != nil {
		return fmt.Errorf("franz-go consume: %w", err)
	}
	after, err := kafkaFetchCounters(ctx, cl, o.Brokers)
	if err != nil {
		return err
	}
	rawRate, err := rawConsume(ctx, cl.URL(), "bench-kafka", o.Partitions, o.Records)
	if err != nil {
		return fmt.Errorf("raw /batches: %w", err)
	}
	out.printf("consume, records/s: franz-go through the Kafka listener %.0f, raw /batches through the gateway %.0f; ratio kafka/raw %.2f\n",
		consumeRate, rawRate, consumeRate/rawRate)
	fetched, sent := after[0]-before[0], after[1]-before[1]
	share := 0.0
	if fetched > 0 {
		share = sent / fetched
	}
	out.printf("Kafka fetches served %.0f record bytes, %.0f of them (%.0f%%) with sendfile; load average after %s\n",
		fetched, sent, 100*share, loadAverage())
	for _, r := range []benchRow{
		{scenario: fmt.Sprintf("kafka produce (franz-go, acks=%s, RF %d)", o.Acks, o.ReplicationFactor), unit: "records/s",
			baseline: fmt.Sprintf("HTTP produce (Go client) %.0f", httpRate), sluice: fmt.Sprintf("%.0f", kgoRate), ratio: ratioCell(kgoRate, httpRate), aim: "—"},
		{scenario: fmt.Sprintf("kafka consume (franz-go, RF %d)", o.ReplicationFactor), unit: "records/s",
			baseline: fmt.Sprintf("raw /batches %.0f", rawRate), sluice: fmt.Sprintf("%.0f", consumeRate), ratio: ratioCell(consumeRate, rawRate), aim: "—"},
	} {
		if err := appendBenchRow(o.Results, r); err != nil {
			return err
		}
	}
	return nil
}

// benchValues are n values of size random letters.
func benchValues(n, size int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([][]byte, n)
	for i := range out {
		v := make([]byte, size)
		for j := range v {
			v[j] = 'a' + byte(rng.IntN(26))
		}
		out[i] = v
	}
	return out
}

// kgoProduce produces values to topic with franz-go (idempotent, its
// default batching) and returns records/s from the first send to the last
// acknowledgement.
func kgoProduce(ctx context.Context, seeds []string, topic, acks string, values [][]byte) (float64, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxBufferedRecords(100_000)}
	if acks == "1" {
		// franz-go's idempotence needs acks=all.
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var (
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
	)
	start := time.Now()
	for _, v := range values {
		wg.Add(1)
		c.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := failed.Load(); e != nil {
		return 0, *e
	}
	return float64(len(values)) / elapsed.Seconds(), nil
}

// httpProduce produces values to topic through the gateway: one sender
// per partition, batches of 1,000 records, and returns records/s.
func httpProduce(ctx context.Context, url, topic string, partitions int, acks string, values [][]byte) (float64, error) {
	cl, err := newClient(url)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	const batch = 1000
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, partitions)
	)
	start := time.Now()
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(batch)) - batch
				if i >= len(values) {
					return
				}
				recs := make([]client.Record, 0, batch)
				for _, v := range values[i:min(i+batch, len(values))] {
					recs = append(recs, client.Record{Value: v})
				}
				if _, err := cl.Produce(ctx, topic, recs, client.ProduceOptions{Partition: client.Partition(int32(p)), Acks: client.Acks(acks)}); err != nil {
					errs[p] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(len(values)) / elapsed.Seconds(), nil
}

// kgoConsume reads n records of topic from the start with franz-go and
// returns records/s.
func kgoConsume(ctx context.Context, seeds []string, topic string, n int) (float64, error) {
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	got := 0
	for got < n {
		fs := c.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			return 0, fmt.Errorf("%d of %d records: %w", got, n, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return 0, errs[0].Err
		}
		got += fs.NumRecords()
	}
	return float64(got) / time.Since(start).Seconds(), nil
}

// rawConsume reads every partition of topic up to its high watermark with
// raw /batches fetches (one reader per partition, the records decoded),
// and returns records/s.
func rawConsume(ctx context.Context, url, topic string, partitions, n int) (float64, error) {
	cl, err := newClient(url)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		errs  = make([]error, partitions)
	)
	start := time.Now()
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var off int64
			for {
				b, err := cl.FetchBatches(ctx, topic, int32(p), client.At(off), client.FetchOptions{MaxBytes: 1 << 20})
				if err != nil {
					errs[p] = err
					return
				}
				recs, err := b.Records(off)
				if err != nil {
					errs[p] = err
					return
				}
				total.Add(int64(len(recs)))
				off = b.NextOffset
				if off >= b.HighWatermark {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if got := total.Load(); got != int64(n) {
		return 0, fmt.Errorf("read %d records, want %d", got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// kafkaFetchCounters sums the brokers' Kafka fetch byte counters: [0] the
// record bytes Kafka fetches served, [1] those sent with sendfile.
func kafkaFetchCounters(ctx context.Context, cl *embedded.Cluster, brokers int) ([2]float64, error) {
	var out [2]float64
	for id := 1; id <= brokers; id++ {
		url := "http://" + strings.TrimPrefix(cl.Broker(id).Addr(), "http://")
		for i, name := range []string{"sluice_broker_kafka_fetch_bytes_total", "sluice_broker_kafka_fetch_sendfile_bytes_total"} {
			v, err := scrapeGauge(ctx, url, name)
			if err != nil {
				return out, err
			}
			out[i] += v
		}
	}
	return out, nil
}
