package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A franz-go consumer of KIP-848's protocol subscribed by regular
// expression (kgo.ConsumeRegex, which the broker resolves) reads the
// topics whose names match and no other; a matching topic created while
// it runs is assigned to it without a change of subscription; an internal
// topic its expression does not name is never assigned. ConsumerGroupDescribe
// reports the expression, and one that does not compile is refused with
// INVALID_REGULAR_EXPRESSION.
func TestKgoConsumerGroupProtocolRegex(t *testing.T) {
	cl, hc := kafkaCluster(t,
		api.CreateTopicRequest{Name: "orders-a", Partitions: 2, ReplicationFactor: 1},
		api.CreateTopicRequest{Name: "orders-b", Partitions: 1, ReplicationFactor: 1},
		api.CreateTopicRequest{Name: "payments", Partitions: 1, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testwait.Check(t, 30*time.Second, "the offsets topic exists", func() error {
		m, err := hc.JoinGroup(ctx, "warm-up", api.JoinGroupRequest{Topics: []string{"payments"}})
		if err != nil {
			return err
		}
		return hc.LeaveGroup(ctx, "warm-up", m.MemberID)
	})
	produce := func(topic string) {
		t.Helper()
		if _, err := hc.Produce(ctx, topic, []client.Record{{Key: []byte(topic), Value: []byte("v")}}, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"orders-a", "orders-b", "payments"} {
		produce(topic)
	}

	on := &atomic.Bool{}
	// franz-go matches anywhere in a name and sends the expression
	// wrapped in .*(?:...).*; "consumer_offsets" does not spell out
	// __consumer_offsets, so the broker keeps it out.
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds(cl)...), kgo.WithLogger(nextGenLogger{t, on}),
		kgo.ConsumerGroup("rx"), kgo.ServerSideBalancer(), kgo.ConsumeRegex(), kgo.ConsumeTopics("^orders-", "consumer_offsets"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()

	seen := map[string]int{}
	readUntil := func(want ...string) {
		t.Helper()
		testwait.Check(t, 60*time.Second, fmt.Sprintf("records of %v", want), func() error {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			kc.PollFetches(pctx).EachRecord(func(r *kgo.Record) { seen[r.Topic]++ })
			pcancel()
			for _, topic := range want {
				if seen[topic] == 0 {
					return fmt.Errorf("read %v", seen)
				}
			}
			return nil
		})
	}
	readUntil("orders-a", "orders-b")
	if !on.Load() {
		t.Fatal("franz-go runs the classic protocol")
	}

	// A topic created afterwards that matches is assigned and read.
	if _, err := hc.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders-c", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	produce("orders-c")
	readUntil("orders-c")
	for topic := range seen {
		if topic != "orders-a" && topic != "orders-b" && topic != "orders-c" {
			t.Fatalf("read %s: %v", topic, seen)
		}
	}

	// ConsumerGroupDescribe reports the expression and the assignment of
	// the matching topics only.
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Version, req.Groups = 1, []string{"rx"}
	resp, err := req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Members) != 1 {
		t.Fatalf("ConsumerGroupDescribe: %+v", resp.Groups)
	}
	m := resp.Groups[0].Members[0]
	if m.SubscribedTopicRegex == nil || *m.SubscribedTopicRegex != ".*(?:(?:^orders-)|(?:consumer_offsets)).*" || len(m.SubscribedTopics) != 0 {
		t.Fatalf("described subscription: regex %v, names %v", m.SubscribedTopicRegex, m.SubscribedTopics)
	}
	var assigned []string
	for _, tp := range m.TargetAssignment.TopicPartitions {
		assigned = append(assigned, tp.Topic)
	}
	if !slices.Equal(assigned, []string{"orders-a", "orders-b", "orders-c"}) {
		t.Fatalf("target assignment of topics %v", assigned)
	}

	// An expression that does not compile.
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis = 1, "rx-bad", "m-bad", 60000
	hb.SubscribedTopicRegex, hb.Topics = kmsg.StringPtr("orders-("), []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	hbResp, err := hb.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if hbResp.ErrorCode != kerr.InvalidRegularExpression.Code {
		t.Fatalf("heartbeat with orders-(: %v", kerr.ErrorForCode(hbResp.ErrorCode))
	}
}
