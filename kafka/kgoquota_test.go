package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/quota"
)

// throttleHook counts the answers franz-go saw a throttle in.
type throttleHook struct{ n *atomic.Int64 }

func (h throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.n.Add(1)
	}
}

// highWatermark is the partition's high watermark as its leader answers it.
func highWatermark(t *testing.T, ctx context.Context, kc *kgo.Client, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatal(err)
	}
	return p.Offset
}

// The producer byte-rate quota applies to Kafka produces as to HTTP ones,
// by client id: the produce that leaves it in debt is appended and
// answered with throttle_time_ms, and the connection then reads nothing
// until the debt is paid, so what the broker appends over a window stays
// within the rate times the window, plus the burst and one request.
func TestKgoProduceQuota(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const rate, valueSize, maxBatch = 20_000, 1000, 4096
	if _, err := hc.SetQuota(ctx, api.Quota{ClientID: "capped", ProducerByteRate: rate}); err != nil {
		t.Fatal(err)
	}
	var throttles atomic.Int64
	prod := newKgo(t, cl, kgo.ClientID("capped"), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(maxBatch), kgo.WithHooks(throttleHook{&throttles}))
	value := bytes.Repeat([]byte("x"), valueSize)
	// Each round produces two seconds of the rate at once, so the debt
	// comes however slowly one produce is answered on a loaded machine
	// (one record a round would pace itself under the rate at 50 ms a
	// produce).
	testwait.Check(t, 60*time.Second, "a produce answered with a throttle", func() error {
		var round []*kgo.Record
		for range 2 * rate / valueSize {
			round = append(round, &kgo.Record{Topic: "orders", Value: value})
		}
		if err := prod.ProduceSync(ctx, round...).FirstErr(); err != nil {
			return err
		}
		if throttles.Load() == 0 {
			return fmt.Errorf("no throttle yet")
		}
		return nil
	})

	// The window is measured from before its first produce to after its
	// last answer: the broker's own window is inside it.
	start := highWatermark(t, ctx, prod, "orders")
	t0 := time.Now()
	var recs []*kgo.Record
	for range 100 {
		recs = append(recs, &kgo.Record{Topic: "orders", Value: value})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	window := time.Since(t0)
	end := highWatermark(t, ctx, prod, "orders")
	if end-start != 100 {
		t.Fatalf("%d records appended in the window, want 100", end-start)
	}
	appended := float64((end - start) * valueSize) // at most the batch bytes charged
	bound := rate*window.Seconds() + rate*quota.Burst.Seconds() + 2*maxBatch
	if appended > bound {
		t.Fatalf("%.0f bytes appended in %v, more than the quota allows (%.0f)", appended, window, bound)
	}
	if throttles.Load() < 2 {
		t.Fatalf("%d throttled answers", throttles.Load())
	}

	// Another client id is not throttled.
	var other atomic.Int64
	free := newKgo(t, cl, kgo.ProducerBatchMaxBytes(maxBatch), kgo.WithHooks(throttleHook{&other}))
	if err := free.ProduceSync(ctx, recs[:10]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if other.Load() != 0 {
		t.Fatalf("another client id was throttled %d times", other.Load())
	}
}

// The request-rate quota applies to every Kafka request: past it, answers
// carry throttle_time_ms.
func TestKgoRequestQuota(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := hc.SetQuota(ctx, api.Quota{ClientID: "chatty", RequestRate: 2}); err != nil {
		t.Fatal(err)
	}
	kc := newKgo(t, cl, kgo.ClientID("chatty"))
	// Ask one broker: the quota is per broker.
	broker := kc.Broker(int(cl.Brokers[0].ID()))
	testwait.Check(t, 45*time.Second, "a throttled Metadata answer", func() error {
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(ctx, broker)
		if err != nil {
			return err
		}
		if resp.ThrottleMillis <= 0 {
			return fmt.Errorf("throttle %d ms", resp.ThrottleMillis)
		}
		return nil
	})
	// Another client id is not throttled.
	other := newKgo(t, cl)
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, other.Broker(int(cl.Brokers[0].ID())))
	if err != nil || resp.ThrottleMillis != 0 {
		t.Fatalf("another client: %v, throttle %d ms", err, resp.ThrottleMillis)
	}
}
