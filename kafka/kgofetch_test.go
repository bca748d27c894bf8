package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/tier"
)

// consumeN polls kc until n records came, and returns them by partition.
func consumeN(t *testing.T, ctx context.Context, kc *kgo.Client, n int) map[int32][]*kgo.Record {
	t.Helper()
	out := map[int32][]*kgo.Record{}
	got := 0
	for got < n {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records consumed: %v", got, n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			got++
		})
	}
	if got != n {
		t.Fatalf("%d records consumed, want %d", got, n)
	}
	return out
}

// franz-go (Fetch v18, topics by ID) consumes what franz-go produced, each
// record as it was sent: offsets, keys, values, headers, timestamps; a
// long poll with nothing to read returns once a record is produced over
// HTTP, and brings that record as HTTP wrote it.
func TestKgoProduceConsume(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := newKgo(t, cl, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	base := time.UnixMilli(1_700_000_000_000)
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: int32(i % 3),
			Key: []byte("key-" + strconv.Itoa(i)), Value: bytes.Repeat([]byte{byte(i)}, 1+i%200),
			Headers:   []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cons := newKgo(t, cl, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(4<<10)) // several fetches per partition
	got := consumeN(t, ctx, cons, len(recs))
	for p := int32(0); p < 3; p++ {
		var want []*kgo.Record
		for _, r := range recs {
			if r.Partition == p {
				want = append(want, r)
			}
		}
		if len(got[p]) != len(want) {
			t.Fatalf("partition %d: %d records consumed, %d produced", p, len(got[p]), len(want))
		}
		for i, g := range got[p] {
			w := want[i]
			if g.Offset != w.Offset || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || !g.Timestamp.Equal(w.Timestamp) ||
				len(g.Headers) != 1 || g.Headers[0].Key != "n" || !bytes.Equal(g.Headers[0].Value, w.Headers[0].Value) || g.LeaderEpoch != 0 {
				t.Fatalf("partition %d record %d: consumed offset %d key %q ts %v headers %v, produced offset %d key %q ts %v",
					p, i, g.Offset, g.Key, g.Timestamp, g.Headers, w.Offset, w.Key, w.Timestamp)
			}
		}
	}

	// Nothing left: the consumer's fetches wait at the broker until an
	// HTTP producer writes.
	polled := make(chan map[int32][]*kgo.Record, 1)
	go func() { polled <- consumeN(t, ctx, cons, 1) }()
	p1 := int32(1)
	if _, err := hc.Produce(ctx, "orders", []client.Record{{Key: []byte("http"), Value: []byte{0, 1, 0xff}, Headers: map[string]string{"via": "http"}, Partition: &p1}}, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	late := <-polled
	if r := late[1]; len(r) != 1 || r[0].Offset != 100 || string(r[0].Key) != "http" || !bytes.Equal(r[0].Value, []byte{0, 1, 0xff}) ||
		len(r[0].Headers) != 1 || r[0].Headers[0].Key != "via" || string(r[0].Headers[0].Value) != "http" {
		t.Fatalf("after the long poll: %+v", late)
	}
}

// fetchRaw sends a one-partition Fetch (v18, the topic by ID) to broker id.
func fetchRaw(t *testing.T, ctx context.Context, kc *kgo.Client, broker int32, topic string, p int32, offset int64, epoch int32) (kmsg.FetchResponseTopicPartition, *kmsg.FetchResponse) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 10, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topicMetadata(t, ctx, kc, topic).TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.CurrentLeaderEpoch, rp.PartitionMaxBytes = p, offset, epoch, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc.Broker(int(broker)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].TopicID != rt.TopicID {
		t.Fatalf("the answer names topic ID %x, want %x", resp.Topics[0].TopicID, rt.TopicID)
	}
	return resp.Topics[0].Partitions[0], resp
}

// epochEnd asks broker id OffsetForLeaderEpoch v4 for one partition.
func epochEnd(t *testing.T, ctx context.Context, kc *kgo.Client, broker int32, topic string, p int32, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = p, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc.Broker(int(broker)))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// A fetch on the leader answers the positions; a follower answers
// NOT_LEADER_OR_FOLLOWER and names the leader; a newer leader epoch is
// UNKNOWN_LEADER_EPOCH, an offset past the log end OFFSET_OUT_OF_RANGE.
// After a leader change the old epoch is FENCED_LEADER_EPOCH, and
// OffsetForLeaderEpoch answers the old epoch's real end, so a franz-go
// consumer reading across the change goes on where it was: every record
// once, in order, none read again from the start.
func TestKafkaFetchLeadersAndEpochs(t *testing.T) {
	cl, _ := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prod := newKgo(t, cl, kgo.RequiredAcks(kgo.AllISRAcks()))
	produce := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Topic: "orders", Value: []byte(fmt.Sprint(i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 20)
	leader, epoch := leaderOf(t, ctx, prod, "orders", 0)
	follower := leader%3 + 1

	p, _ := fetchRaw(t, ctx, prod, leader, "orders", 0, 5, epoch)
	if p.ErrorCode != 0 || p.HighWatermark != 20 || p.LastStableOffset != 20 || p.LogStartOffset != 0 || len(p.RecordBatches) == 0 {
		t.Fatalf("leader: %v hw %d lso %d start %d, %d bytes", kerr.ErrorForCode(p.ErrorCode), p.HighWatermark, p.LastStableOffset, p.LogStartOffset, len(p.RecordBatches))
	}
	p, resp := fetchRaw(t, ctx, prod, follower, "orders", 0, 5, epoch)
	if p.ErrorCode != kerr.NotLeaderForPartition.Code || p.CurrentLeader.LeaderID != leader || p.CurrentLeader.LeaderEpoch != epoch ||
		len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != leader {
		t.Fatalf("follower: %v, current leader %+v, brokers %+v", kerr.ErrorForCode(p.ErrorCode), p.CurrentLeader, resp.Brokers)
	}
	if p, _ := fetchRaw(t, ctx, prod, leader, "orders", 0, 5, epoch+1); p.ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Fatalf("newer epoch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p, _ := fetchRaw(t, ctx, prod, leader, "orders", 0, 21, epoch); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("past the end: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if e := epochEnd(t, ctx, prod, leader, "orders", 0, epoch, epoch); e.ErrorCode != 0 || e.LeaderEpoch != epoch || e.EndOffset != 20 {
		t.Fatalf("OffsetForLeaderEpoch of the current epoch: %+v", e)
	}

	cons := newKgo(t, cl, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	first := consumeN(t, ctx, cons, 20)[0]

	// The leader goes; another takes over at a newer epoch.
	cl.StopBroker(int(leader))
	var newLeader, newEpoch int32
	testwait.Check(t, 30*time.Second, "a new leader", func() error {
		prod.ForceMetadataRefresh()
		md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, prod)
		if err != nil {
			return err
		}
		for _, tm := range md.Topics {
			if tm.Topic != nil && *tm.Topic == "orders" && len(tm.Partitions) == 1 {
				newLeader, newEpoch = tm.Partitions[0].Leader, tm.Partitions[0].LeaderEpoch
			}
		}
		if newLeader <= 0 || newLeader == leader {
			return fmt.Errorf("leader %d", newLeader)
		}
		return nil
	})
	produce(20, 10)
	if newEpoch <= epoch {
		t.Fatalf("leader %d at epoch %d after %d at epoch %d", newLeader, newEpoch, leader, epoch)
	}
	if p, _ := fetchRaw(t, ctx, prod, newLeader, "orders", 0, 0, epoch); p.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Fatalf("old epoch %d at epoch %d: %v", epoch, newEpoch, kerr.ErrorForCode(p.ErrorCode))
	}
	if e := epochEnd(t, ctx, prod, newLeader, "orders", 0, newEpoch, epoch); e.ErrorCode != 0 || e.LeaderEpoch != epoch || e.EndOffset != 20 {
		t.Fatalf("OffsetForLeaderEpoch of the old epoch %d: %+v", epoch, e)
	}
	second := consumeN(t, ctx, cons, 10)[0]
	all := append(first, second...)
	for i, r := range all {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
		}
	}
}

// A franz-go consumer from the log start reads records that are only in
// the object store any more (tiered, then trimmed by local retention) and
// goes on into the local log: every record once, in order.
func TestKgoConsumeFromTieredStorage(t *testing.T) {
	cl := embedtest.Start(t, embedtest.Options{Brokers: 1, Kafka: true, Bucket: tier.NewMemory(), TierInterval: 50 * time.Millisecond})
	hc, err := client.New(cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := hc.CreateTopic(ctx, api.CreateTopicRequest{Name: "cold", Partitions: 1, Configs: map[string]string{
		"remote.storage.enable": "true", "segment.bytes": "8192", "local.retention.bytes": "16384",
	}}); err != nil {
		t.Fatal(err)
	}
	prod := newKgo(t, cl, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(50), kgo.ProducerBatchCompression(kgo.NoCompression()))
	const n = 1500
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Topic: "cold", Value: []byte(fmt.Sprintf("%04d-%s", i, bytes.Repeat([]byte{'v'}, 80)))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 60*time.Second, "offset 300 only in the object store", func() error {
		top, err := hc.GetTopic(ctx, "cold")
		if err != nil {
			return err
		}
		if p := top.Partitions[0]; p.LocalStartOffset <= 300 || p.LogStartOffset != 0 {
			return fmt.Errorf("log start %d, local start %d", p.LogStartOffset, p.LocalStartOffset)
		}
		return nil
	})
	cons := newKgo(t, cl, kgo.ConsumeTopics("cold"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeN(t, ctx, cons, n)[0]
	for i, r := range got {
		if r.Offset != int64(i) || !bytes.HasPrefix(r.Value, []byte(fmt.Sprintf("%04d-", i))) {
			t.Fatalf("record %d: offset %d value %.10q", i, r.Offset, r.Value)
		}
	}
}

// The consumer byte-rate quota applies to Kafka fetches as to HTTP ones,
// by client id: a fetch that leaves the quota in debt is answered in full
// with throttle_time_ms, and the fetches during the debt get no records
// and the wait that is left.
func TestKafkaFetchQuota(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := newKgo(t, cl, kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	for i := range 64 {
		recs = append(recs, &kgo.Record{Topic: "orders", Value: bytes.Repeat([]byte{byte(i)}, 1000)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.SetQuota(ctx, api.Quota{ClientID: "slow", ConsumerByteRate: 1000}); err != nil {
		t.Fatal(err)
	}
	slow := newKgo(t, cl, kgo.ClientID("slow"))
	leader, epoch := leaderOf(t, ctx, slow, "orders", 0)
	testwait.Check(t, 30*time.Second, "a throttled answer", func() error {
		p, resp := fetchRaw(t, ctx, slow, leader, "orders", 0, 0, epoch)
		if resp.ThrottleMillis == 0 {
			return fmt.Errorf("throttle 0 with %d bytes", len(p.RecordBatches))
		}
		if p.ErrorCode != 0 || len(p.RecordBatches) < 32_000 {
			t.Fatalf("the fetch that took the quota into debt: %v, %d bytes", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
		}
		return nil
	})
	// franz-go itself waits out a throttle before its next request to the
	// broker: ask through another client of the same client id.
	p, resp := fetchRaw(t, ctx, newKgo(t, cl, kgo.ClientID("slow")), leader, "orders", 0, 0, epoch)
	if p.ErrorCode != 0 || len(p.RecordBatches) != 0 || resp.ThrottleMillis <= 0 || p.HighWatermark != 64 {
		t.Fatalf("during the debt: %v, %d bytes, throttle %d ms, hw %d", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches), resp.ThrottleMillis, p.HighWatermark)
	}
	// Another client id is not throttled.
	other := newKgo(t, cl)
	if p, resp := fetchRaw(t, ctx, other, leader, "orders", 0, 0, epoch); len(p.RecordBatches) == 0 || resp.ThrottleMillis != 0 {
		t.Fatalf("another client: %d bytes, throttle %d ms", len(p.RecordBatches), resp.ThrottleMillis)
	}
}
