package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// kcat -G reads every record of a topic once in a group (produced over
// HTTP) and commits on its way out; the HTTP API shows the group's offsets
// at the end of each partition.
func TestKcatGroupConsumesAndCommits(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 4, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var recs []client.Record
	for i := range 40 {
		recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if _, err := hc.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	// The offsets topic exists once an HTTP group call made it.
	testwait.Check(t, 30*time.Second, "the offsets topic exists", func() error {
		m, err := hc.JoinGroup(ctx, "warm-up", api.JoinGroupRequest{Topics: []string{"events"}})
		if err != nil {
			return err
		}
		return hc.LeaveGroup(ctx, "warm-up", m.MemberID)
	})
	out := kcat(t, cl, "", "-G", "kc", "events", "-e", "-f", "%k=%s\n", "-X", "auto.offset.reset=earliest")
	lines := strings.Fields(string(out))
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	for i := range 40 {
		if n := seen[fmt.Sprintf("k%d=v%d", i, i)]; n != 1 {
			t.Fatalf("record %d read %d times; kcat printed:\n%s", i, n, out)
		}
	}
	d, err := hc.DescribeGroup(ctx, "kc")
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, p := range d.Partitions {
		committed += p.CommittedOffset
	}
	if committed != 40 {
		t.Fatalf("committed %d of 40: %+v", committed, d.Partitions)
	}
}

// franz-go's group consumer reads every record once (produced over HTTP)
// and commits after each poll; the HTTP API shows the commits.
func TestKgoGroupConsumesAndCommits(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 4, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var recs []client.Record
	for i := range 40 {
		recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if _, err := hc.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 30*time.Second, "the offsets topic exists", func() error {
		m, err := hc.JoinGroup(ctx, "warm-up", api.JoinGroupRequest{Topics: []string{"events"}})
		if err != nil {
			return err
		}
		return hc.LeaveGroup(ctx, "warm-up", m.MemberID)
	})
	kc := newKgo(t, cl, kgo.ConsumerGroup("kg"), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	seen := map[string]int{}
	for len(seen) < 40 {
		fs := kc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d of 40 read: %v", len(seen), err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++ })
		if err := kc.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s read %d times", k, n)
		}
	}
	d, err := hc.DescribeGroup(ctx, "kg")
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, p := range d.Partitions {
		committed += p.CommittedOffset
	}
	if committed != 40 {
		t.Fatalf("committed %d of 40: %+v", committed, d.Partitions)
	}
}
