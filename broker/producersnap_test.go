package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/recordbatch"
)

// A follower that was away while its leader deleted the segments it would
// copy next starts over at the leader's start, and takes the leader's
// producer table as of there: once it leads, a retry of an idempotent batch
// from before its start is answered with the original offsets, not written
// a second time.
func TestFollowerThatStartsOverKeepsProducers(t *testing.T) {
	c := startReplicated(t)
	bc := brokerapi.NewClient()
	ctx := context.Background()
	idem, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`"a"`)}, {Value: []byte(`"b"`)}}, recordbatch.Options{ProducerID: 4242, ProducerEpoch: 0, BaseSequence: 0})
	if err != nil {
		t.Fatal(err)
	}
	p := c.partition()
	leader := c.Brokers[p.Leader-1]
	first, err := bc.Produce(ctx, leader.Addr(), "r", 0, "all", 5*time.Second, p.LeaderEpoch, idem)
	if err != nil {
		t.Fatal(err)
	}
	// The follower that will start over, and the other one.
	var away, other int32
	for _, r := range p.Replicas {
		if r == p.Leader {
			continue
		}
		if away == 0 {
			away = r
		} else {
			other = r
		}
	}
	c.StopBroker(int(away))
	c.waitFor("the stopped follower out of the ISR", func(p api.PartitionInfo) bool { return len(p.ISR) == 2 })

	// The leader moves on and deletes every closed segment (as tiering
	// does once they are in the bucket): its log now starts past the
	// idempotent batch.
	lg := leader.PartitionLog("r", 0)
	for i := 0; i < 3; i++ {
		if err := lg.Roll(); err != nil {
			t.Fatal(err)
		}
		if status, code := c.produce("all", 5, "filler"); status != 200 {
			t.Fatalf("filler: %d %s", status, code)
		}
	}
	c.waitFor("the fillers committed", func(p api.PartitionInfo) bool { return p.HighWatermark >= 0 && p.HighWatermark == p.LogEndOffset })
	if n, err := lg.DeleteSegmentsBelow(lg.Offsets().HighWatermark); err != nil || n == 0 {
		t.Fatalf("deleted %d segments: %v", n, err)
	}
	if start := lg.Offsets().LogStart; start <= first.LastOffset {
		t.Fatalf("the leader's log still starts at %d", start)
	}

	c.StartBroker(int(away))
	c.waitFor("the returning follower back in the ISR", func(p api.PartitionInfo) bool {
		return len(p.ISR) == 3 && p.HighWatermark >= 0 && p.HighWatermark == p.LogEndOffset
	})
	if got := c.Brokers[away-1].PartitionLog("r", 0).Offsets().LogStart; got <= first.LastOffset {
		t.Fatalf("the follower did not start over: its log starts at %d", got)
	}

	// Only the follower that started over is left to lead.
	c.StopBroker(int(other))
	c.StopBroker(int(p.Leader))
	// Leads: named leader, and answering with its log end (-1 until the new
	// leader has applied its leadership), which holds the first batch.
	now := c.waitFor("the follower that started over leads", func(q api.PartitionInfo) bool {
		return q.Leader == away && q.LogEndOffset > first.LastOffset
	})
	retry, err := bc.Produce(ctx, c.Brokers[away-1].Addr(), "r", 0, "1", 5*time.Second, now.LeaderEpoch, idem)
	if err != nil {
		t.Fatalf("retry on the new leader: %v", err)
	}
	if retry.BaseOffset != first.BaseOffset || retry.LastOffset != first.LastOffset {
		t.Fatalf("the retry was written again at %d-%d; want it answered with its original offsets %d-%d", retry.BaseOffset, retry.LastOffset, first.BaseOffset, first.LastOffset)
	}
	if q := c.partition(); q.LogEndOffset != now.LogEndOffset {
		t.Fatalf("log end moved from %d to %d: the retry was written", now.LogEndOffset, q.LogEndOffset)
	}
}
