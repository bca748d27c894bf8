package clustertest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

const topic = "events"

// settle waits until every partition of the topic has its full ISR and a
// HW at its log end, checks the history and the replicas' logs, and returns
// the history's report. Any violation fails the test.
func settle(t *testing.T, c *Cluster, h *History, partitions []int32) *Report {
	t.Helper()
	tp := c.WaitFullISR(topic, 45*time.Second, true)
	c.Logf("settled: %s", DescribePartitions(tp))
	r := h.Check(partitions)
	t.Logf("history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations in the history", r.Violations())
	}
	for _, p := range partitions {
		hw := tp.Partitions[p].HighWatermark
		logs := c.SnapshotReplicas(topic, p)
		if diffs := CompareReplicas(logs, hw, true); len(diffs) > 0 {
			t.Errorf("p%d: replicas differ below the HW %d:%s\n  %s", p, hw, DescribeReplicas(logs), joinLines(diffs))
		}
	}
	return r
}

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// percentile of sorted durations (nearest rank).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func allPartitions(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// TestLeaderKillLoop kills the leader of a random partition under acks=all
// load, waits for a new leader, restarts the killed broker and waits until
// it is back in every ISR; five rounds. Nothing acknowledged may be lost or
// move, and the replicas must agree at the end.
func TestLeaderKillLoop(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 3, 3, 2)
	parts := allPartitions(3)
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Producers: 3, Partitions: parts})

	var failovers []time.Duration
	for round := 1; round <= 5; round++ {
		p := int32(c.Rand.IntN(len(parts)))
		before := c.WaitLeader(topic, p, 30*time.Second, nil)
		victim := before.Leader
		c.Logf("round %d: killing b%d, leader of p%d (epoch %d, isr %v)", round, victim, p, before.LeaderEpoch, before.ISR)
		killed := time.Now()
		c.Kill(victim)
		after := c.WaitLeader(topic, p, 30*time.Second, func(pi api.PartitionInfo) bool {
			return pi.Leader != victim && pi.LeaderEpoch > before.LeaderEpoch
		})
		d := time.Since(killed)
		failovers = append(failovers, d)
		c.Logf("round %d: p%d led by b%d at epoch %d after %v", round, p, after.Leader, after.LeaderEpoch, d.Round(time.Millisecond))
		c.Restart(victim)
		c.WaitFor(fmt.Sprintf("b%d back in every ISR", victim), 30*time.Second, func() (bool, string) {
			tp, err := c.Topic(topic)
			if err != nil {
				return false, err.Error()
			}
			for _, pi := range tp.Partitions {
				if !slices.Contains(pi.ISR, victim) {
					return false, DescribePartitions(tp)
				}
			}
			return true, ""
		})
		c.Logf("round %d: b%d back in every ISR", round, victim)
	}
	load.Stop()
	r := settle(t, c, h, parts)
	t.Logf("figures: seed %d; acked %d, lost %d, inconsistent offsets %d (moved %d, duplicates %d); unknown-then-present %d, unknown-then-absent %d; time to new leader p50 %v max %v (%v)",
		c.Seed, r.Acked, r.Lost, r.Moved+r.Duplicates, r.Moved, r.Duplicates, r.UnknownPresent, r.UnknownAbsent,
		percentile(failovers, 0.5).Round(time.Millisecond), percentile(failovers, 1).Round(time.Millisecond), roundAll(failovers))
	if r.Acked == 0 {
		t.Error("nothing was acknowledged")
	}
}

func roundAll(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Millisecond)
	}
	return out
}
