package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// stateChanges counts the partition-state writes every broker logged (ISR
// changes by leaders, elections and ISR changes by the controller) for
// partition 0 of the topic.
func stateChanges(c *Cluster) int {
	n := 0
	for _, id := range c.BrokerIDs() {
		n += len(c.GrepBrokerLog(id, "ISR changed", "partition="+topic+"-0"))
		n += len(c.GrepBrokerLog(id, "partition state changed", "partition="+topic+"-0"))
	}
	return n
}

// TestFollowerZKPartition cuts a follower of partition 0 off ZooKeeper
// only: it keeps fetching from the leader, but its session expires and it
// is no longer a registered broker. The controller drops it from the ISR;
// the ISR must then stay put (not flap between leader and controller)
// until the link is restored, and nothing acknowledged may be lost.
func TestFollowerZKPartition(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	waitAcked(c, h, 30, 15*time.Second)
	pi := c.WaitLeader(topic, 0, 10*time.Second, nil)
	fs := others(pi.Replicas, pi.Leader)
	follower := fs[c.Rand.IntN(len(fs))]
	c.Broker(follower).ZKLink.Cut()
	cut := time.Now()
	out := c.WaitFor(fmt.Sprintf("b%d out of the ISR", follower), 20*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		return !slices.Contains(pi.ISR, follower), fmt.Sprintf("%+v", pi)
	})
	c.Logf("b%d out of the ISR %v after its ZooKeeper link was cut", follower, out.Round(time.Millisecond))
	changesAtDrop := stateChanges(c)
	time.Sleep(5 * time.Second)
	flaps := stateChanges(c) - changesAtDrop
	c.Broker(follower).ZKLink.Restore()
	restored := time.Now()
	back := c.WaitFor(fmt.Sprintf("b%d registered and in the ISR", follower), 30*time.Second, func() (bool, string) {
		ci, err := c.ClusterInfo()
		if err != nil {
			return false, err.Error()
		}
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		alive := slices.ContainsFunc(ci.Brokers, func(b api.BrokerStatus) bool { return b.ID == follower && b.Alive })
		return alive && len(pi.ISR) == 3, fmt.Sprintf("alive %v, %+v", alive, pi)
	})
	load.Stop()
	r := settle(t, c, h, parts)
	if flaps > 2 {
		t.Errorf("%d partition-state writes in the 5 s after the controller dropped b%d from the ISR, while b%d was still fetching but unregistered (ISR flapping between leader and controller); last ones:\n  %s",
			flaps, follower, follower, joinLines(lastN(c.GrepBrokerLog(pi.Leader, "ISR changed"), 6)))
	}
	t.Logf("figures: seed %d; follower b%d cut from ZooKeeper: out of the ISR %v after the cut; %d state writes in the next 5 s; registered and in the ISR %v after the restore (cut lasted %v); acked %d, lost %d, moved %d",
		c.Seed, follower, out.Round(time.Millisecond), flaps, back.Round(time.Millisecond), restored.Sub(cut).Round(time.Millisecond), r.Acked, r.Lost, r.Moved)
}

func lastN(s []string, n int) []string { return s[max(0, len(s)-n):] }

// TestLeaderZKPartition cuts the leader of partition 0 off ZooKeeper only:
// it keeps serving the gateway and its followers until its session expires
// and another broker is elected; then it must stop acknowledging (fenced),
// and rejoin as a follower once the link is restored. Nothing acknowledged
// may be lost or move, and consumers must never be served what is later
// replaced.
func TestLeaderZKPartition(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 1, 3, 2)
	parts := []int32{0}
	h := NewHistory(c, topic)
	co := c.StartConsumer(topic, parts)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	load1 := h.StartLoad(LoadOptions{Producers: 2, Partitions: parts, Timeout: time.Second, Acks: "1"})
	waitAcked(c, h, 30, 15*time.Second)
	before := c.WaitLeader(topic, 0, 10*time.Second, nil)
	old := before.Leader
	c.Broker(old).ZKLink.Cut()
	cut := time.Now()
	after := c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool {
		return pi.Leader != old && pi.LeaderEpoch > before.LeaderEpoch
	})
	failover := time.Since(cut)
	c.Logf("b%d cut from ZooKeeper; b%d leads at epoch %d after %v", old, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond))
	fails := produceOK(c, h, 0, 5, "all", 15*time.Second)
	if rest := 8*time.Second - time.Since(cut); rest > 0 {
		time.Sleep(rest)
	}
	c.Broker(old).ZKLink.Restore()
	restored := time.Now()
	rejoin := c.WaitFor(fmt.Sprintf("b%d back in the ISR", old), 30*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(pi.ISR, old), fmt.Sprintf("%+v", pi)
	})
	load.Stop()
	load1.Stop()
	r := settle(t, c, h, parts, co)

	// When did the controller move the leadership, and when did the old
	// leader fence itself? An acks=1 write sent after the first and lost
	// was acknowledged by the deposed leader (the new one keeps what it
	// acknowledges).
	elected := logTime(t, c.grepAll("partition state changed", "partition="+topic+"-0", fmt.Sprintf("was_leader=%d", old)))
	fenced := logTime(t, c.GrepBrokerLog(old, "fencing all partitions"))
	var late []*Op
	for _, op := range r.LostAcks1Ops {
		if op.Start.After(elected) {
			late = append(late, op)
		}
	}
	c.Logf("leadership moved at %s; b%d fenced itself at %s (%v later); acks=1 lost: %d records, %d requests sent after the move",
		elected.Format("15:04:05.000"), old, fenced.Format("15:04:05.000"), fenced.Sub(elected).Round(time.Millisecond), r.LostAcks1, len(late))
	if len(late) > 0 {
		t.Errorf("the deposed leader b%d acknowledged %d acks=1 requests sent after the controller moved the leadership at %s (it fenced itself only at %s), and they were lost: %v",
			old, len(late), elected.Format("15:04:05.000"), fenced.Format("15:04:05.000"), late)
	}
	truncs := c.GrepBrokerLog(old, "truncated to the leader's lineage")
	t.Logf("figures: seed %d; leader b%d cut from ZooKeeper: new leader after %v; fenced %v after the move; %d failed attempts before 5 acks=all writes succeeded; rejoined the ISR %v after the restore (cut lasted %v); truncations %v; acked %d, lost %d, moved %d, acks=1 lost %d (%d sent after the move), unknown-then-present %d, unknown-then-absent %d",
		c.Seed, old, failover.Round(time.Millisecond), fenced.Sub(elected).Round(time.Millisecond), len(fails), rejoin.Round(time.Millisecond), restored.Sub(cut).Round(time.Millisecond), truncs,
		r.Acked, r.Lost, r.Moved, r.LostAcks1, len(late), r.UnknownPresent, r.UnknownAbsent)
}

// logTime parses the time= field of the first line (broker logs are slog
// text), failing the test when there is none.
func logTime(t *testing.T, lines []string) time.Time {
	t.Helper()
	if len(lines) == 0 {
		t.Fatal("no log line to take a time from")
	}
	_, rest, ok := strings.Cut(lines[0], "time=")
	if !ok {
		t.Fatalf("no time= in %q", lines[0])
	}
	ts, _, _ := strings.Cut(rest, " ")
	tm, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		t.Fatalf("time in %q: %v", lines[0], err)
	}
	return tm
}
