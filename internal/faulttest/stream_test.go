package faulttest

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestOneReplicationStreamCut cuts one (follower, leader) pair's link: the
// follower fetches every partition it follows on that leader over one
// replication stream, so exactly those partitions lose it from their ISR
// (after replica.lag.time.max.ms), while every other partition, idle and
// so left out of its stream's incremental fetches, keeps its full ISR.
// Restored, the stream starts a new session and the ISRs are full again.
func TestOneReplicationStreamCut(t *testing.T) {
	c := Start(t, Options{})
	const partitions = 9
	c.CreateTopic(topic, partitions, 3, 1)
	tp := c.WaitFullISR(topic, 30*time.Second, true)
	leaders := map[int32]int{}
	for _, p := range tp.Partitions {
		leaders[p.Leader]++
	}
	// The cut leader: one that leads some partitions (the controller
	// spreads them, so usually every broker does).
	var leader int32 = -1
	for _, id := range c.BrokerIDs() {
		if leaders[id] > 0 && leader < 0 {
			leader = id
		}
	}
	follower := others(c.BrokerIDs(), leader)[c.Rand.IntN(2)]
	var cutParts, keptParts []int32
	for i, p := range tp.Partitions {
		if p.Leader == leader {
			cutParts = append(cutParts, int32(i))
		} else {
			keptParts = append(keptParts, int32(i))
		}
	}
	c.Logf("cutting b%d→b%d: partitions %v lose b%d, partitions %v keep every replica", follower, leader, cutParts, follower, keptParts)
	c.Link(follower, leader).Cut()
	cut := time.Now()

	// Wait for the cut partitions to drop the follower; all along, every
	// other partition must keep its full ISR.
	var kept []string
	waited := c.WaitFor(fmt.Sprintf("b%d to leave the ISR of %v", follower, cutParts), 30*time.Second, func() (bool, string) {
		t, err := c.Topic(topic)
		if err != nil {
			return false, err.Error()
		}
		for _, i := range keptParts {
			if p := t.Partitions[i]; len(p.ISR) != len(p.Replicas) {
				kept = append(kept, fmt.Sprintf("p%d ISR %v %v after the cut", i, p.ISR, time.Since(cut).Round(time.Millisecond)))
			}
		}
		for _, i := range cutParts {
			if p := t.Partitions[i]; slices.Contains(p.ISR, follower) || p.Leader != leader {
				return false, DescribePartitions(t)
			}
		}
		return true, ""
	})
	for _, k := range kept {
		t.Errorf("a partition off the cut stream lost an ISR member: %s", k)
	}
	// One more lag window with the link still cut: the others still stay.
	t0 := time.Now()
	c.WaitFor("another replica.lag.time.max.ms with the link cut", 30*time.Second, func() (bool, string) {
		t, err := c.Topic(topic)
		if err != nil {
			return false, err.Error()
		}
		for _, i := range keptParts {
			if p := t.Partitions[i]; len(p.ISR) != len(p.Replicas) {
				kept = append(kept, fmt.Sprintf("p%d ISR %v", i, p.ISR))
			}
		}
		return time.Since(t0) > c.opts.ReplicaLagTimeMax, DescribePartitions(t)
	})
	for _, k := range kept {
		t.Errorf("a partition off the cut stream lost an ISR member: %s", k)
	}

	c.Link(follower, leader).Restore()
	restored := time.Now()
	c.WaitFullISR(topic, 30*time.Second, true)
	t.Logf("figures: seed %d; b%d left the ISR of %d partitions %v after the cut (lag limit %v); %d other partitions kept their ISR; full ISR %v after the restore",
		c.Seed, follower, len(cutParts), waited.Round(time.Millisecond), c.opts.ReplicaLagTimeMax, len(keptParts), time.Since(restored).Round(time.Millisecond))
}
