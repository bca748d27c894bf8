package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// TestAlterTopicConfigApplies alters the configs of a topic whose
// partitions are open on three brokers and checks that each change takes
// effect without a restart: retention.bytes trims the leader's and the
// followers' logs at their next retention pass, and a raised
// min.insync.replicas refuses an acks=all produce the old value allowed.
func TestAlterTopicConfigApplies(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ReplicaLagTimeMax: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3,
		Configs: map[string]string{api.ConfigSegmentBytes: "1024", api.ConfigRetentionMs: "-1"}}); err != nil {
		t.Fatal(err)
	}
	value := []byte(strings.Repeat("v", 200))
	for range 40 { // one record per batch: about 300 bytes each, three or four a segment
		if _, err := cl.Produce(ctx, "t", []client.Record{{Value: value}}, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	logStarts := func() []int64 {
		var out []int64
		for _, b := range c.Brokers {
			b.ApplyRetention()
			l := b.PartitionLog("t", 0)
			if l == nil {
				t.Fatalf("broker %d has no replica of t-0", b.ID())
			}
			out = append(out, l.Offsets().LogStart)
		}
		return out
	}
	if s := logStarts(); s[0] != 0 || s[1] != 0 || s[2] != 0 {
		t.Fatalf("log starts %v before the alteration: want every record kept", s)
	}

	tp, err := cl.AlterTopicConfig(ctx, "t", api.AlterTopicConfigRequest{Set: map[string]string{api.ConfigRetentionBytes: "2048", api.ConfigMinInsyncReplicas: "3"}})
	if err != nil || tp.Configs[api.ConfigRetentionBytes] != "2048" || tp.Configs[api.ConfigMinInsyncReplicas] != "3" {
		t.Fatalf("alter: %+v, %v", tp.Configs, err)
	}
	testwait.For(t, 20*time.Second, "every replica trimmed to retention.bytes", func() bool {
		s := logStarts()
		return s[0] > 0 && s[1] > 0 && s[2] > 0
	})

	// A follower goes; the ISR shrinks to two, below the new minimum of three.
	leader := tp.Partitions[0].Leader
	follower := tp.Partitions[0].Replicas[0]
	if follower == leader {
		follower = tp.Partitions[0].Replicas[1]
	}
	c.StopBroker(int(follower))
	testwait.For(t, 20*time.Second, "the ISR to shrink", func() bool {
		d, err := cl.GetTopic(ctx, "t")
		return err == nil && len(d.Partitions[0].ISR) == 2
	})
	// The gateway retries NOT_ENOUGH_REPLICAS within the produce's timeout;
	// one attempt of one second gets the refusal itself.
	once, err := client.New(c.URL, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	// On a loaded machine the one second can run out before the refusal
	// (REQUEST_TIMED_OUT): ask again. Success is never right.
	var last error
	testwait.For(t, 20*time.Second, "an acks=all produce refused with NOT_ENOUGH_REPLICAS", func() bool {
		_, last = once.Produce(ctx, "t", []client.Record{{Value: value}}, client.ProduceOptions{Timeout: time.Second})
		if last == nil {
			t.Fatal("acks=all produce with 2 in sync and min.insync.replicas 3 succeeded")
		}
		return errors.Is(last, api.ErrNotEnoughReplicas)
	})
	// Back to the default (2 for three replicas): the same produce succeeds.
	if _, err := cl.AlterTopicConfig(ctx, "t", api.AlterTopicConfigRequest{Delete: []string{api.ConfigMinInsyncReplicas}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "an acks=all produce to succeed with 2 in sync", func() bool {
		_, err := cl.Produce(ctx, "t", []client.Record{{Value: value}}, client.ProduceOptions{})
		return err == nil
	})
}
