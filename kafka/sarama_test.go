package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluice-io/sluice/api"
)

// saramaClaims is a sarama.ConsumerGroupHandler that marks every message
// it gets and records it, and says when it has want of them.
type saramaClaims struct {
	mu   sync.Mutex
	got  map[string][]*sarama.ConsumerMessage // by key
	n    int
	want int
	done chan struct{}
}

func (h *saramaClaims) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaClaims) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaClaims) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.got[string(m.Key)] = append(h.got[string(m.Key)], m)
		h.n++
		if h.n == h.want {
			close(h.done)
		}
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

// IBM/sarama, at the Kafka version it assumes by default and at the newest
// it knows: an idempotent SyncProducer with acks=all writes keyed records,
// and a ConsumerGroup reads each back once, at the partition and offset the
// producer was told, and commits, as the HTTP API shows.
func TestSaramaProduceConsumeGroup(t *testing.T) {
	for _, v := range []struct {
		name    string
		version sarama.KafkaVersion
	}{{"default", sarama.DefaultVersion}, {"newest", sarama.MaxVersion}} {
		t.Run(v.name, func(t *testing.T) { saramaRoundTrip(t, v.version) })
	}
}

func saramaRoundTrip(t *testing.T, version sarama.KafkaVersion) {
	const records = 50
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	cfg := sarama.NewConfig()
	cfg.Version = version
	cfg.ClientID = "sluice-sarama-test"
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 10
	cfg.Net.MaxOpenRequests = 1
	cfg.Metadata.Retry.Max = 10
	prod, err := sarama.NewSyncProducer(seeds(cl), cfg)
	if err != nil {
		t.Fatal(err)
	}
	type at struct {
		partition int32
		offset    int64
	}
	sent := map[string]at{}
	count := map[int32]int64{}
	for i := range records {
		key := fmt.Sprintf("key-%d", i)
		p, off, err := prod.SendMessage(&sarama.ProducerMessage{
			Topic: "orders", Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("value-" + key),
			Headers: []sarama.RecordHeader{{Key: []byte("n"), Value: []byte(key)}},
		})
		if err != nil {
			t.Fatalf("send %s: %v", key, err)
		}
		sent[key] = at{p, off}
		count[p]++
	}
	if err := prod.Close(); err != nil {
		t.Fatal(err)
	}

	ccfg := sarama.NewConfig()
	ccfg.Version = version
	ccfg.ClientID = "sluice-sarama-test"
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	ccfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	ccfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	ccfg.Consumer.Group.Session.Timeout = 10 * time.Second
	group, err := sarama.NewConsumerGroup(seeds(cl), "sarama", ccfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &saramaClaims{got: map[string][]*sarama.ConsumerMessage{}, want: records, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	consumeCtx, stop := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() {
		for consumeCtx.Err() == nil {
			if err := group.Consume(consumeCtx, []string{"orders"}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()
	go func() {
		for err := range group.Errors() {
			t.Logf("sarama consumer group: %v", err)
		}
	}()
	select {
	case <-h.done:
	case err := <-consumed:
		t.Fatalf("Consume: %v", err)
	case <-ctx.Done():
		h.mu.Lock()
		t.Fatalf("%d of %d records consumed", h.n, records)
	}
	stop()
	if err := <-consumed; err != nil {
		t.Fatal(err)
	}
	// Close commits what was marked.
	if err := group.Close(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n != records || len(h.got) != records {
		t.Fatalf("%d records, %d keys; want %d once each", h.n, len(h.got), records)
	}
	for key, ms := range h.got {
		m := ms[0]
		if len(ms) != 1 || string(m.Value) != "value-"+key || len(m.Headers) != 1 || string(m.Headers[0].Value) != key {
			t.Fatalf("%s: %d deliveries, value %q, headers %v", key, len(ms), m.Value, m.Headers)
		}
		if (at{m.Partition, m.Offset}) != sent[key] {
			t.Fatalf("%s consumed at %d/%d, produced at %+v", key, m.Partition, m.Offset, sent[key])
		}
	}
	waitCommitted(t, ctx, hc, "sarama", count)
}
