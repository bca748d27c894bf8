package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A topic grows, over HTTP and with Kafka's CreatePartitions: the new
// partitions get leaders and take records, the old ones keep theirs;
// validate_only adds none; a count not above the present one is
// INVALID_PARTITIONS, a manual assignment INVALID_REQUEST.
func TestTopicCreatePartitions(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 2, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := hc.Produce(ctx, "orders", []client.Record{{Value: []byte("old")}}, client.ProduceOptions{Partition: client.Partition(1), Acks: client.AcksAll}); err != nil {
		t.Fatal(err)
	}
	code := func(err error) api.Code {
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae.Code
		}
		return ""
	}

	// HTTP: validate_only, then a real grow to 3, then a shrink and a no-op.
	tp, err := hc.CreatePartitions(ctx, "orders", 3, true)
	if err != nil || len(tp.Partitions) != 2 {
		t.Fatalf("validate_only: %v, %d partitions", err, len(tp.Partitions))
	}
	tp, err = hc.CreatePartitions(ctx, "orders", 3, false)
	if err != nil || len(tp.Partitions) != 3 {
		t.Fatalf("grow to 3: %v, %+v", err, tp.Partitions)
	}
	for _, n := range []int{2, 3} {
		if _, err := hc.CreatePartitions(ctx, "orders", n, false); code(err) != api.CodeInvalidPartitions {
			t.Fatalf("count %d: %v, want INVALID_PARTITIONS", n, err)
		}
	}
	if _, err := hc.CreatePartitions(ctx, "missing", 3, false); code(err) != api.CodeUnknownTopic {
		t.Fatalf("unknown topic: %v", err)
	}

	// Kafka: validate_only, a grow to 5, a shrink, a manual assignment.
	kc := newKgo(t, cl)
	create := func(validateOnly bool, topic string, count int32, assign bool) kmsg.CreatePartitionsResponseTopic {
		t.Helper()
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.ValidateOnly, req.TimeoutMillis = validateOnly, 30_000
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = topic, count
		if assign {
			a := kmsg.NewCreatePartitionsRequestTopicAssignment()
			a.Replicas = []int32{1, 2, 3}
			rt.Assignment = append(rt.Assignment, a)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) != 1 {
			t.Fatalf("%d topics answered", len(resp.Topics))
		}
		return resp.Topics[0]
	}
	if r := create(true, "orders", 5, false); r.ErrorCode != 0 {
		t.Fatalf("validate_only: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	if r := create(false, "orders", 5, false); r.ErrorCode != 0 {
		t.Fatalf("grow to 5: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	if r := create(false, "orders", 4, false); r.ErrorCode != kerr.InvalidPartitions.Code {
		t.Fatalf("shrink: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := create(false, "orders", 6, true); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("manual assignment: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := create(false, "missing", 6, false); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}

	// Every partition has a leader with the whole ISR, the old record is
	// where it was, and each new partition takes a record and gives it back
	// to a Kafka consumer.
	testwait.Check(t, 30*time.Second, "five partitions, each led with its ISR whole", func() error {
		tp, err := hc.GetTopic(ctx, "orders")
		if err != nil {
			return err
		}
		if len(tp.Partitions) != 5 {
			return fmt.Errorf("%d partitions", len(tp.Partitions))
		}
		for _, p := range tp.Partitions {
			if p.Leader < 0 || len(p.ISR) != 3 {
				return fmt.Errorf("partition %d: %+v", p.Partition, p)
			}
		}
		return nil
	})
	for p := int32(2); p < 5; p++ {
		offs, err := hc.Produce(ctx, "orders", []client.Record{{Value: []byte(fmt.Sprintf("new-%d", p))}}, client.ProduceOptions{Partition: client.Partition(p), Acks: client.AcksAll})
		if err != nil || offs[0].Partition != p || offs[0].Offset != 0 {
			t.Fatalf("produce to new partition %d: %v %+v", p, err, offs)
		}
	}
	consumer := newKgo(t, cl, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeN(t, ctx, consumer, 4)
	if len(got[0]) != 0 || len(got[1]) != 1 || string(got[1][0].Value) != "old" {
		t.Fatalf("old partitions: %v", got)
	}
	for p := int32(2); p < 5; p++ {
		if len(got[p]) != 1 || string(got[p][0].Value) != fmt.Sprintf("new-%d", p) {
			t.Fatalf("partition %d: %v", p, got[p])
		}
	}
}
