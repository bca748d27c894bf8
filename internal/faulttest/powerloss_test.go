package faulttest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLeaderPowerLoss simulates a power loss on the leader's machine. The
// topic never fsyncs on its own (flush.ms is an hour, no count), so after a
// power loss any prefix of what was written since the segment was created
// is what the disk may hold: the page cache is gone. The leader is killed,
// its active segment is cut back to the size it had 500 ms earlier (a torn
// tail included), and it is started again at once, before its ZooKeeper
// session expires. The followers hold every acknowledged record (acks=all,
// min.insync.replicas 2): replication must cover the loss, as DESIGN.md
// says it does ("a machine crash can lose up to flush.ms of acknowledged
// appends on a replica that had not fsynced, which replication is there to
// cover").
func TestLeaderPowerLoss(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopicConfigs(topic, 1, 3, map[string]string{"min.insync.replicas": "2", "flush.ms": "3600000"})
	parts := []int32{0}
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: time.Second})
	waitAcked(c, h, 200, 20*time.Second)
	pi := c.WaitLeader(topic, 0, 10*time.Second, nil)
	leader := pi.Leader
	seg := activeSegment(t, filepath.Join(c.Broker(leader).DataDir, topic+"-0"))
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	c.Kill(leader)
	end, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	// The fault must remove something, or this test checks nothing: the
	// load kept writing to this same segment for those 500 ms.
	if now := activeSegment(t, filepath.Join(c.Broker(leader).DataDir, topic+"-0")); now != seg {
		t.Fatalf("the leader rolled to %s during the 500 ms; the power loss would not cut its tail", filepath.Base(now))
	}
	if end.Size() <= st.Size() {
		t.Fatalf("the leader wrote nothing in its last 500 ms (%s at %d bytes): the power loss would remove nothing", filepath.Base(seg), st.Size())
	}
	if err := os.Truncate(seg, st.Size()); err != nil {
		t.Fatal(err)
	}
	c.Logf("FAULT: power loss on b%d: %s cut from %d to %d bytes (what was written in its last 500 ms)", leader, filepath.Base(seg), end.Size(), st.Size())
	c.StartBroker(leader)
	c.waitBrokerReady(leader, 30*time.Second)
	// Check what there is even when replication does not recover.
	_, status, ok := c.Poll(30*time.Second, func() (bool, string) {
		pi, err := c.Partition(topic, 0)
		if err != nil {
			return false, err.Error()
		}
		return !pi.Offline && len(pi.ISR) == 3 && pi.HighWatermark == pi.LogEndOffset, fmt.Sprintf("%+v", pi)
	})
	load.Stop()
	if !ok {
		t.Errorf("replication did not recover within 30 s: %s", status)
	}
	r := h.Check(parts)
	t.Logf("history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations in the history", r.Violations())
	}
	if pi, err := c.Partition(topic, 0); err == nil {
		logs := c.SnapshotReplicas(topic, 0)
		if diffs := CompareReplicas(logs, pi.HighWatermark, false); len(diffs) > 0 {
			t.Errorf("replicas differ below the leader's HW %d:%s\n  %s", pi.HighWatermark, DescribeReplicas(logs), joinLines(diffs))
		}
	}
	var truncs []string
	for _, id := range c.BrokerIDs() {
		truncs = append(truncs, c.GrepBrokerLog(id, "truncated to the leader's lineage")...)
	}
	t.Logf("figures: seed %d; leader b%d lost %d bytes of its log and restarted at once; truncations %d:\n  %s\nacked %d, lost %d, moved %d, unknown-then-present %d, unknown-then-absent %d",
		c.Seed, leader, end.Size()-st.Size(), len(truncs), joinLines(truncs), r.Acked, r.Lost, r.Moved, r.UnknownPresent, r.UnknownAbsent)
}

// activeSegment returns the newest segment file (%020d.log) of a partition dir.
func activeSegment(t *testing.T, dir string) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no segment in %s (%v)", dir, err)
	}
	slices.Sort(logs)
	return logs[len(logs)-1]
}
