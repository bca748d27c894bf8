package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluice-io/sluice/api"
)

// segmentio/kafka-go: a Writer with acks=all and its murmur2 balancer puts
// each key where the HTTP API would, and a Reader in a group (whose group
// code sends fixed old versions: FindCoordinator v0, JoinGroup v1, SyncGroup
// v0, Heartbeat v0, LeaveGroup v0, OffsetCommit v2, OffsetFetch v1) reads
// every record once and commits, as the HTTP API shows.
func TestKafkaGoWriterReaderGroup(t *testing.T) {
	const records, partitions = 50, 3
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: partitions, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(seeds(cl)...),
		Topic:        "orders",
		Balancer:     &kafkago.Murmur2Balancer{},
		RequiredAcks: kafkago.RequireAll,
		BatchSize:    10,
		BatchTimeout: 10 * time.Millisecond,
		ErrorLogger:  kafkago.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go writer: "+f, a...) }),
	}
	var msgs []kafkago.Message
	for i := range records {
		key := fmt.Sprintf("key-%d", i)
		msgs = append(msgs, kafkago.Message{Key: []byte(key), Value: []byte("value-" + key),
			Headers: []kafkago.Header{{Key: "n", Value: []byte(key)}}})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:           seeds(cl),
		GroupID:           "kafkago",
		Topic:             "orders",
		StartOffset:       kafkago.FirstOffset,
		MaxWait:           200 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond,
		SessionTimeout:    10 * time.Second,
		ErrorLogger:       kafkago.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go reader: "+f, a...) }),
	})
	defer func() {
		if r != nil {
			_ = r.Close()
		}
	}()
	got := map[string]kafkago.Message{}
	count := map[int32]int64{}
	for len(got) < records {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("FetchMessage after %d records: %v", len(got), err)
		}
		key := string(m.Key)
		if _, dup := got[key]; dup {
			t.Fatalf("%s delivered twice", key)
		}
		got[key] = m
		count[int32(m.Partition)]++
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("CommitMessages: %v", err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = nil
	for key, m := range got {
		if string(m.Value) != "value-"+key || len(m.Headers) != 1 || string(m.Headers[0].Value) != key {
			t.Fatalf("%s: value %q, headers %v", key, m.Value, m.Headers)
		}
		if want := api.KeyPartition(m.Key, partitions); m.Partition != want {
			t.Fatalf("%s on partition %d, the HTTP API puts it on %d", key, m.Partition, want)
		}
	}
	waitCommitted(t, ctx, hc, "kafkago", count)
}
