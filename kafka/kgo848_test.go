package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
