package faulttest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

const topic = "events"

// settle waits until every partition of the topic has its full ISR and a
// HW at its log end, checks the history and the replicas' logs, and returns
// the history's report. Any violation fails the test.
func settle(t *testing.T, c *Cluster, h *History, partitions []int32, consumers ...*Consumer) *Report {
	t.Helper()
	tp := c.WaitFullISR(topic, 45*time.Second, true)
	c.Logf("settled: %s", DescribePartitions(tp))
	for _, co := range consumers {
		co.Stop()
	}
	r := h.Check(partitions)
	t.Logf("history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations in the history", r.Violations())
	}
	for _, co := range consumers {
		served, problems := co.Check(r.Final)
		t.Logf("consumer: %d records served, %d failed polls", served, co.Errors())
		for _, p := range problems {
			t.Errorf("VIOLATION: %s", p)
		}
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
	co := c.StartConsumer(topic, parts)
	load := h.StartLoad(LoadOptions{Producers: 3, Partitions: parts, Pinned: true, Timeout: time.Second})

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
	r := settle(t, c, h, parts, co)
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

// waitAcked waits until the history holds at least n acknowledged records.
func waitAcked(c *Cluster, h *History, n int, timeout time.Duration) {
	c.T.Helper()
	c.WaitFor(fmt.Sprintf("%d acknowledged records", n), timeout, func() (bool, string) {
		acked := 0
		for _, op := range h.Ops() {
			if op.Outcome == OK {
				acked += len(op.Values)
			}
		}
		return acked >= n, fmt.Sprintf("%d acknowledged", acked)
	})
}

// produceOK sends n single-record requests to partition p with acks, each
// retried until it is acknowledged, within timeout in all. It returns the
// attempts that were not acknowledged.
func produceOK(c *Cluster, h *History, p int32, n int, acks string, timeout time.Duration) (failures []*Op) {
	c.T.Helper()
	w := h.NewProducer()
	deadline := time.Now().Add(timeout)
	for ok := 0; ok < n; {
		if time.Now().After(deadline) {
			c.T.Fatalf("only %d of %d acks=%s produces to p%d succeeded within %v; the others: %v", ok, n, acks, p, timeout, failures)
		}
		op := h.Produce(context.Background(), w, p, 1, acks, time.Second)
		if op.Outcome == OK {
			ok++
			continue
		}
		failures = append(failures, op)
		time.Sleep(50 * time.Millisecond)
	}
	return failures
}

func others(ids []int32, not int32) []int32 {
	var out []int32
	for _, id := range ids {
		if id != not {
			out = append(out, id)
		}
	}
	return out
}

// TestZombieLeader pauses the leader of partition 0 (SIGSTOP) past its
// ZooKeeper session, waits for another broker to lead with a higher epoch,
// writes through it, and resumes the old leader. Nothing acknowledged may
// move, consumers must never be served what is later replaced, and the old
// leader's log must converge to the new leader's.
func TestZombieLeader(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	co := c.StartConsumer(topic, parts)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	waitAcked(c, h, 30, 15*time.Second)

	before := c.WaitLeader(topic, 0, 10*time.Second, nil)
	zombie := before.Leader
	paused := time.Now()
	c.Pause(zombie)
	after := c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool {
		return pi.Leader != zombie && pi.LeaderEpoch > before.LeaderEpoch
	})
	failover := time.Since(paused)
	c.Logf("p0: b%d (epoch %d) paused; b%d leads at epoch %d after %v", zombie, before.LeaderEpoch, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond))
	fails := produceOK(c, h, 0, 5, "all", 15*time.Second)
	c.Logf("5 acks=all writes through the new leader succeeded (%d attempts failed first)", len(fails))
	if rest := 6*time.Second - time.Since(paused); rest > 0 {
		time.Sleep(rest)
	}
	c.Resume(zombie)
	resumed := time.Now()
	rejoin := c.WaitFor(fmt.Sprintf("b%d back in the ISR", zombie), 30*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(pi.ISR, zombie), fmt.Sprintf("%+v", pi)
	})
	c.Logf("b%d back in the ISR %v after SIGCONT", zombie, rejoin.Round(time.Millisecond))
	load.Stop()
	r := settle(t, c, h, parts, co)
	truncs := c.GrepBrokerLog(zombie, "truncated to the leader's lineage")

	// Stop everything and compare the logs the data dirs hold.
	settled, err := c.Partition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range c.BrokerIDs() {
		c.Stop(id)
	}
	var logs []ReplicaLog
	minHW := int64(-1)
	for _, id := range c.BrokerIDs() {
		rl, err := ReadReplicaDir(filepath.Join(c.Broker(id).DataDir, topic+"-0"))
		if err != nil {
			t.Fatalf("b%d: %v", id, err)
		}
		rl.Broker = id
		logs = append(logs, rl)
		if minHW < 0 || rl.Offsets.HighWatermark < minHW {
			minHW = rl.Offsets.HighWatermark
		}
	}
	// A follower learns the HW from its next fetch answer, so a checkpoint
	// may trail the leader's HW by the last writes; the logs must agree up
	// to the smallest one.
	c.Logf("on disk after a clean stop (settled HW %d):%s", settled.HighWatermark, DescribeReplicas(logs))
	if diffs := CompareReplicas(logs, minHW, false); len(diffs) > 0 {
		t.Errorf("replicas differ below the HW %d:\n  %s", minHW, joinLines(diffs))
	}
	t.Logf("figures: seed %d; zombie b%d paused %v; new leader after %v; rejoined the ISR %v after SIGCONT; checkpointed HWs agree up to %d (settled HW %d); zombie truncations %d %v; acked %d, lost %d, moved %d, duplicates %d, unknown-then-present %d, unknown-then-absent %d; %d batches compared",
		c.Seed, zombie, resumed.Sub(paused).Round(time.Millisecond), failover.Round(time.Millisecond), rejoin.Round(time.Millisecond),
		minHW, settled.HighWatermark, len(truncs), truncs, r.Acked, r.Lost, r.Moved, r.Duplicates, r.UnknownPresent, r.UnknownAbsent, len(logs[0].Batches))
}

// TestISRShrinkThenLeaderDies cuts both followers of partition 0 off the
// leader until the ISR is the leader alone, writes with acks=1 (acks=all
// must be refused with NOT_ENOUGH_REPLICAS), then kills the leader. The
// partition must go offline rather than elect a follower (no unclean
// election), and lead again with every acknowledged record once the old
// leader returns.
func TestISRShrinkThenLeaderDies(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	produceOK(c, h, 0, 10, "all", 15*time.Second)
	pi := c.WaitLeader(topic, 0, 10*time.Second, nil)
	leader := pi.Leader
	followers := others(c.BrokerIDs(), leader)
	for _, f := range followers {
		c.Link(f, leader).Cut()
	}
	shrink := c.WaitFor(fmt.Sprintf("the ISR of p0 to shrink to [%d]", leader), 20*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(pi.ISR, []int32{leader}), fmt.Sprintf("%+v", pi)
	})
	c.Logf("ISR shrank to [%d] %v after the cut", leader, shrink.Round(time.Millisecond))
	produceOK(c, h, 0, 20, "1", 10*time.Second)
	op := h.Produce(context.Background(), h.NewProducer(), 0, 1, "all", time.Second)
	if op.Outcome != Failed || op.Code != api.CodeNotEnoughReplicas {
		t.Errorf("acks=all with the ISR at [%d] (min.insync.replicas 2): %s; want NOT_ENOUGH_REPLICAS", leader, op)
	}
	pre, _ := c.Partition(topic, 0)

	killed := time.Now()
	c.Kill(leader)
	offline := c.WaitFor("p0 to go offline", 30*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		if pi.Leader > 0 && pi.Leader != leader {
			t.Fatalf("unclean election: b%d leads p0 (%+v)", pi.Leader, pi)
		}
		return pi.Offline && pi.Leader == -1 && pi.LeaderEpoch > pre.LeaderEpoch, fmt.Sprintf("%+v", pi)
	})
	c.Logf("p0 offline %v after the kill", offline.Round(time.Millisecond))
	// Offline it stays: watch it, and see that writes are refused as such.
	w := h.NewProducer()
	watchUntil := time.Now().Add(3 * time.Second)
	offlineCodes := map[api.Code]int{}
	for time.Now().Before(watchUntil) {
		pi, err := c.Partition(topic, 0)
		if err == nil && (pi.Leader != -1 || !pi.Offline) {
			t.Fatalf("p0 came back with leader %d while its only ISR member b%d is down: %+v", pi.Leader, leader, pi)
		}
		op := h.Produce(context.Background(), w, 0, 1, "1", 300*time.Millisecond)
		if op.Outcome == OK {
			t.Fatalf("a write to offline p0 was acknowledged: %s", op)
		}
		offlineCodes[op.Code]++
	}
	c.Restart(leader)
	back := c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool { return pi.Leader == leader })
	produceOK(c, h, 0, 1, "1", 15*time.Second)
	gap := time.Since(killed)
	c.Logf("b%d leads p0 again at epoch %d; first write acknowledged %v after the kill", leader, back.LeaderEpoch, gap.Round(time.Millisecond))
	for _, f := range followers {
		if lines := c.GrepBrokerLog(f, "msg=leading", "partition="+topic+"-0"); len(lines) > 0 {
			t.Errorf("follower b%d led p0: %v", f, lines)
		}
	}
	for _, f := range followers {
		c.Link(f, leader).Restore()
	}
	r := settle(t, c, h, parts)
	if r.LostAcks1 > 0 {
		t.Errorf("%d acks=1 records lost though their only replica came back and no unclean election happened: %v", r.LostAcks1, r.LostAcks1Ops)
	}
	t.Logf("figures: seed %d; ISR shrank %v after the cut; offline %v after the kill; availability gap (kill to first acknowledged write) %v; writes while offline %v; acked %d (acks=1 and all), lost %d, moved %d",
		c.Seed, shrink.Round(time.Millisecond), offline.Round(time.Millisecond), gap.Round(time.Millisecond), offlineCodes, r.Acked, r.Lost, r.Moved)
}

// TestMinISRWithFollowersCutOff cuts both followers of partition 0 off the
// leader and keeps producing with acks=all for 8 s: once the followers are
// cut, no write may be acknowledged (the HW cannot move past where it was).
// Then the links are restored and the partition must recover.
func TestMinISRWithFollowersCutOff(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	warm := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	waitAcked(c, h, 30, 15*time.Second)
	warm.Stop()
	tp := c.WaitFullISR(topic, 15*time.Second, true)
	hw0, leader := tp.Partitions[0].HighWatermark, tp.Partitions[0].Leader
	before := len(h.Ops())

	followers := others(c.BrokerIDs(), leader)
	for _, f := range followers {
		c.Link(f, leader).Cut()
	}
	cut := time.Now()
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	var shrunk time.Duration
	for time.Since(cut) < 8*time.Second {
		if pi, err := c.Partition(topic, 0); err == nil && shrunk == 0 && len(pi.ISR) == 1 {
			shrunk = time.Since(cut)
			c.Logf("ISR shrank to %v %v after the cut", pi.ISR, shrunk.Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	load.Stop()
	during := h.Ops()[before:]
	codes := map[string]int{}
	for _, op := range during {
		if op.Outcome == OK {
			t.Errorf("acks=all write acknowledged while both followers were cut off (HW before the cut %d): %s", hw0, op)
		}
		codes[op.Outcome.String()+" "+string(op.Code)]++
	}
	if shrunk == 0 {
		t.Errorf("the ISR did not shrink within 8 s of the cut")
	}
	if t.Failed() {
		t.Logf("the leader's ISR changes: %v", c.GrepBrokerLog(leader, "ISR changed"))
	}
	// The HW itself may move once the ISR is the leader alone (the records
	// are then on one replica only, and consumers see them): Kafka does the
	// same (before KIP-966). Only acknowledgments are checked.
	pi, _ := c.Partition(topic, 0)
	c.Logf("after the 8 s cut: %+v (HW before the cut %d)", pi, hw0)
	for _, f := range followers {
		c.Link(f, leader).Restore()
	}
	restored := time.Now()
	c.WaitFullISR(topic, 30*time.Second, false)
	recover := time.Since(restored)
	fails := produceOK(c, h, 0, 5, "all", 15*time.Second)
	r := settle(t, c, h, parts)
	t.Logf("figures: seed %d; %d acks=all requests during the 8 s cut: %v; ISR shrank %v after the cut; full ISR %v after the restore; %d failed attempts before 5 acks=all succeeded; acked %d, lost %d, unknown-then-present %d, unknown-then-absent %d",
		c.Seed, len(during), codes, shrunk.Round(time.Millisecond), recover.Round(time.Millisecond), len(fails), r.Acked, r.Lost, r.UnknownPresent, r.UnknownAbsent)
}

// TestKIP101DoubleFailover kills the leader of partition 0 and a follower
// together, restarts them in a random order, and after each round checks
// that the replicas hold the same batches (offsets, leader epoch, CRC) up
// to the HW. Just before the kill, the surviving follower is cut off the
// leader for 300 ms, so that the two killed replicas hold a tail the
// survivor lacks: when the survivor is elected (the restart comes after
// the dead sessions expired), that tail is not committed and the restarted
// replicas must truncate it by leader epoch (KIP-101). When the restart
// comes first, the old leader still holds its leadership and the survivor
// catches up from it instead.
func TestKIP101DoubleFailover(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	co := c.StartConsumer(topic, parts)
	var notes []string
	for round := 1; round <= 3; round++ {
		load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
		waitAcked(c, h, 20*round, 20*time.Second)
		c.WaitFullISR(topic, 20*time.Second, false)
		pi := c.WaitLeader(topic, 0, 20*time.Second, nil)
		leader := pi.Leader
		fs := others(pi.Replicas, leader)
		k := c.Rand.IntN(len(fs))
		follower, survivor := fs[k], fs[1-k]
		order := []int32{leader, follower}
		if c.Rand.IntN(2) == 0 {
			order = []int32{follower, leader}
		}
		delay := []time.Duration{7 * time.Second, 0, 7 * time.Second}[round-1]
		c.Logf("round %d: b%d falls behind; killing leader b%d and follower b%d (epoch %d, isr %v); restart order %v after %v",
			round, survivor, leader, follower, pi.LeaderEpoch, pi.ISR, order, delay)
		c.Link(survivor, leader).Cut()
		time.Sleep(300 * time.Millisecond)
		c.Kill(leader)
		c.Kill(follower)
		c.Link(survivor, leader).Restore()
		time.Sleep(delay)
		for _, id := range order {
			c.StartBroker(id)
			time.Sleep(time.Duration(c.Rand.IntN(1000)) * time.Millisecond)
		}
		for _, id := range order {
			c.waitBrokerReady(id, 30*time.Second)
		}
		full := c.WaitFullISR(topic, 30*time.Second, false)
		load.Stop()
		tp := c.WaitFullISR(topic, 30*time.Second, true)
		hw := tp.Partitions[0].HighWatermark
		logs := c.SnapshotReplicas(topic, 0)
		if diffs := CompareReplicas(logs, hw, true); len(diffs) > 0 {
			t.Errorf("round %d: replicas differ (HW %d):%s\n  %s", round, hw, DescribeReplicas(logs), joinLines(diffs))
		}
		note := fmt.Sprintf("round %d: kill b%d+b%d, restart %v after %v → leader b%d epoch %d, HW %d, %d batches identical", round, leader, follower, order, delay,
			full.Partitions[0].Leader, full.Partitions[0].LeaderEpoch, hw, len(logs[0].Batches))
		c.Logf("%s", note)
		notes = append(notes, note)
	}
	r := settle(t, c, h, parts, co)
	var truncs []string
	for _, id := range c.BrokerIDs() {
		truncs = append(truncs, c.GrepBrokerLog(id, "truncated to the leader's lineage")...)
	}
	c.Logf("KIP-101 truncations: %d\n  %s", len(truncs), joinLines(truncs))
	t.Logf("figures: seed %d; %d truncations; %s; acked %d, lost %d, moved %d, duplicates %d, unknown-then-present %d, unknown-then-absent %d",
		c.Seed, len(truncs), strings.Join(notes, "; "), r.Acked, r.Lost, r.Moved, r.Duplicates, r.UnknownPresent, r.UnknownAbsent)
}
