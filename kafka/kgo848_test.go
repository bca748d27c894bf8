package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// nextGenLogger notes when franz-go says it runs the consumer group
// protocol (KIP-848) rather than the classic one, and logs warnings.
type nextGenLogger struct {
	t  *testing.T
	on *atomic.Bool
}

func (l nextGenLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }
func (l nextGenLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	if strings.Contains(msg, "next-gen group lifecycle") {
		l.on.Store(true)
	}
	if level <= kgo.LogLevelWarn {
		l.t.Logf("kgo %s: %s %v", level, msg, kv)
	}
}

func newNextGen(t *testing.T, cl *embedtest.Cluster, group string) (*kgo.Client, *atomic.Bool) {
	t.Helper()
	on := &atomic.Bool{}
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds(cl)...), kgo.WithLogger(nextGenLogger{t, on}),
		kgo.ConsumerGroup(group), kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc, on
}

// pollOnce polls kc for at most a second, counts what it read by key and
// commits it.
func pollOnce(t *testing.T, ctx context.Context, kc *kgo.Client, seen map[string]int) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	fs := kc.PollFetches(pctx)
	cancel()
	fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++ })
	if err := kc.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitShares waits until the group's members own partitions in the
// counts given, whatever their order.
func waitShares(t *testing.T, ctx context.Context, hc *client.Client, group string, want ...int) {
	t.Helper()
	testwait.Check(t, 60*time.Second, fmt.Sprintf("group %s split %v", group, want), func() error {
		d, err := hc.DescribeGroup(ctx, group)
		if err != nil {
			return err
		}
		if len(d.Members) != len(want) {
			return fmt.Errorf("%d members", len(d.Members))
		}
		left := append([]int(nil), want...)
	members:
		for _, m := range d.Members {
			for i, n := range left {
				if n == len(m.Assignment) {
					left = append(left[:i], left[i+1:]...)
					continue members
				}
			}
			return fmt.Errorf("members %+v", d.Members)
		}
		return nil
	})
}

// Two franz-go consumers speaking KIP-848's consumer group protocol split
// a topic's partitions; with commits every record is read once; when one
// leaves, its partitions move to the other, which goes on from the
// commits.
func TestKgoConsumerGroupProtocol(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 4, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testwait.Check(t, 30*time.Second, "the offsets topic exists", func() error {
		m, err := hc.JoinGroup(ctx, "warm-up", api.JoinGroupRequest{Topics: []string{"events"}})
		if err != nil {
			return err
		}
		return hc.LeaveGroup(ctx, "warm-up", m.MemberID)
	})
	a, aOn := newNextGen(t, cl, "ng")
	b, bOn := newNextGen(t, cl, "ng")
	seen := map[string]int{}
	// Polling is what keeps a franz-go consumer's assignment moving.
	testwait.Check(t, 90*time.Second, "the split", func() error {
		pollOnce(t, ctx, a, seen)
		pollOnce(t, ctx, b, seen)
		d, err := hc.DescribeGroup(ctx, "ng")
		if err != nil {
			return err
		}
		if len(d.Members) != 2 || len(d.Members[0].Assignment) != 2 || len(d.Members[1].Assignment) != 2 {
			return fmt.Errorf("members %+v", d.Members)
		}
		return nil
	})
	if !aOn.Load() || !bOn.Load() {
		t.Fatalf("franz-go runs the classic protocol (a %v, b %v)", aOn.Load(), bOn.Load())
	}
	checkConsumerGroupDescribe(t, ctx, a, hc, "ng", "events", 4)
	produce := func(from, n int) {
		var recs []client.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}
		if _, err := hc.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 40)
	for len(seen) < 40 {
		if ctx.Err() != nil {
			t.Fatalf("%d of 40 read", len(seen))
		}
		pollOnce(t, ctx, a, seen)
		pollOnce(t, ctx, b, seen)
	}
	b.Close()
	waitShares(t, ctx, hc, "ng", 4)
	produce(40, 20)
	for len(seen) < 60 {
		if ctx.Err() != nil {
			t.Fatalf("%d of 60 read", len(seen))
		}
		pollOnce(t, ctx, a, seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s read %d times", k, n)
		}
	}
}

// checkConsumerGroupDescribe asks ConsumerGroupDescribe (v1) of group
// through kc, once its members reached their targets: every member of the
// consumer protocol (type 1) at the group epoch, holding its target, the
// members' assignments covering the topic's partitions once each by its
// topic ID; the epoch and assignor are those the HTTP API describes.
func checkConsumerGroupDescribe(t *testing.T, ctx context.Context, kc *kgo.Client, hc *client.Client, group, topic string, partitions int) {
	t.Helper()
	id := topicMetadata(t, ctx, kc, topic).TopicID
	testwait.Check(t, 30*time.Second, "ConsumerGroupDescribe of a stable group", func() error {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version, req.Groups = 1, []string{group}
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			return err
		}
		if len(resp.Groups) != 1 {
			return fmt.Errorf("%d groups", len(resp.Groups))
		}
		g := resp.Groups[0]
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return err
		}
		d, err := hc.DescribeGroup(ctx, group)
		if err != nil {
			return err
		}
		if g.State != "Stable" || g.Epoch != d.GroupEpoch || g.AssignmentEpoch != g.Epoch || g.AssignorName != d.Assignor || len(g.Members) != len(d.Members) {
			return fmt.Errorf("group %+v; the HTTP API: %+v", g, d)
		}
		held := map[int32]int{}
		for _, m := range g.Members {
			if m.MemberType != 1 || m.MemberEpoch != g.Epoch || len(m.SubscribedTopics) != 1 || m.SubscribedTopics[0] != topic {
				return fmt.Errorf("member %+v", m)
			}
			if fmt.Sprint(m.Assignment.TopicPartitions) != fmt.Sprint(m.TargetAssignment.TopicPartitions) {
				return fmt.Errorf("member %s holds %+v, its target is %+v", m.MemberID, m.Assignment, m.TargetAssignment)
			}
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic != topic || tp.TopicID != id {
					t.Fatalf("member %s: %+v (topic ID %x)", m.MemberID, tp, id)
				}
				for _, p := range tp.Partitions {
					held[p]++
				}
			}
		}
		for p := range int32(partitions) {
			if held[p] != 1 {
				return fmt.Errorf("partition %d held %d times", p, held[p])
			}
		}
		return nil
	})
}
