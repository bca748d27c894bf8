package faulttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// TestKafkaZombieLeader is TestZombieLeader through the Kafka listener:
// two franz-go producers with acks=all, one idempotent and one not, write
// to partition 0 while its leader is taken out of ZooKeeper's sight, by
// SIGSTOP past its session or by cutting its ZooKeeper link while clients
// and followers still reach it. Another broker leads at a higher epoch,
// the producers go on through it, and the old leader comes back, answering
// what its socket or its clients still hold. No acknowledged record may be
// lost or moved: the idempotent producer's are stored exactly once, the
// other's at least once (a retried batch may be stored twice), each where
// it was acknowledged; and the replicas agree.
func TestKafkaZombieLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fault takes broker id out of ZooKeeper's sight; heal undoes it.
		fault, heal func(c *Cluster, id int32)
		// hold is how long the fault lasts at least, counted from it:
		// past the session timeout (ZooKeeper's minimum, 4 s), and long
		// enough that the producers write through the new leader.
		hold time.Duration
	}{
		{"paused", (*Cluster).Pause, (*Cluster).Resume, 6 * time.Second},
		{"cut from zookeeper",
			func(c *Cluster, id int32) { c.Broker(id).ZKLink.Cut() },
			func(c *Cluster, id int32) { c.Broker(id).ZKLink.Restore() },
			8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Start(t, Options{Kafka: true})
			c.CreateTopic(topic, 1, 3, 2)
			c.WaitFullISR(topic, 45*time.Second, false)
			parts := []int32{0}
			var seeds []string
			for _, id := range c.BrokerIDs() {
				seeds = append(seeds, c.Broker(id).KafkaAddr)
			}
			h := NewHistory(c, topic)
			idem := h.StartKafkaLoad(KafkaLoadOptions{Seeds: seeds, Idempotent: true})
			plain := h.StartKafkaLoad(KafkaLoadOptions{Seeds: seeds})
			waitKafkaAcked(c, time.Time{}, 50, 30*time.Second, idem, plain)

			before := c.WaitLeader(topic, 0, 10*time.Second, nil)
			zombie := before.Leader
			faulted := time.Now()
			tc.fault(c, zombie)
			after := c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool {
				return pi.Leader != zombie && pi.LeaderEpoch > before.LeaderEpoch
			})
			failover := time.Since(faulted)
			c.Logf("p0: b%d (epoch %d) %s; b%d leads at epoch %d after %v", zombie, before.LeaderEpoch, tc.name, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond))
			if rest := tc.hold - time.Since(faulted); rest > 0 {
				time.Sleep(rest)
			}
			tc.heal(c, zombie)
			healed := time.Now()
			rejoin := c.WaitFor(fmt.Sprintf("b%d back in the ISR", zombie), 30*time.Second, func() (bool, string) {
				pi, err := c.Partition(topic, 0)
				if err != nil {
					return false, err.Error()
				}
				return slices.Contains(pi.ISR, zombie), fmt.Sprintf("%+v", pi)
			})
			// Both producers write through the new leader, and past the
			// old one's return.
			progress := waitKafkaAcked(c, healed, 50, 60*time.Second, idem, plain)
			idem.Stop()
			plain.Stop()
			r := settle(t, c, h, parts)
			truncs := c.GrepBrokerLog(zombie, "truncated to the leader's lineage")
			var answered, acked int
			for _, l := range []*KafkaLoad{idem, plain} {
				an, ac := l.Answers(zombie, faulted)
				answered, acked = answered+an, acked+ac
			}
			t.Logf("figures: seed %d; zombie b%d %s for %v; new leader b%d after %v; rejoined the ISR %v after the heal; 50 acks each after it within %v; the zombie answered %d Produce requests sent after the fault and acknowledged %d batches after it; zombie truncations %d; acked %d (idempotent %d, not %d), lost %d, moved %d, duplicates %d, rewritten %d, unknown-then-present %d, unknown-then-absent %d; codes %v",
				c.Seed, zombie, tc.name, healed.Sub(faulted).Round(time.Millisecond), after.Leader, failover.Round(time.Millisecond), rejoin.Round(time.Millisecond), progress.Round(time.Millisecond),
				answered, acked, len(truncs), r.Acked, idem.Acked(time.Time{}), plain.Acked(time.Time{}), r.Lost, r.Moved, r.Duplicates, r.Rewritten, r.UnknownPresent, r.UnknownAbsent, r.Codes)
		})
	}
}

// waitKafkaAcked waits until each load has n records acknowledged that it
// sent after since (zero: ever).
func waitKafkaAcked(c *Cluster, since time.Time, n int, timeout time.Duration, loads ...*KafkaLoad) time.Duration {
	c.T.Helper()
	return c.WaitFor(fmt.Sprintf("%d acknowledged records from each Kafka producer", n), timeout, func() (bool, string) {
		ok, status := true, ""
		for _, l := range loads {
			a := l.Acked(since)
			ok = ok && a >= n
			status += fmt.Sprintf("w%d: %d acknowledged; ", l.Producer(), a)
		}
		return ok, status
	})
}
