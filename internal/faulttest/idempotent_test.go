package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// TestIdempotentProducerDroppedResponses (issue 3, scenario 6): idempotent
// producers write acks=all through a proxy that relays every request to the
// gateway but loses the answer of 30% of them; each producer resends the
// same request (same producer id, epoch and sequences) until it is
// acknowledged, then moves on. Meanwhile the leader of partition 0 is
// SIGKILLed once and restarted. Every value must be stored exactly once, at
// the offset finally acknowledged, each producer's values in sequence order
// per partition, offsets dense, and the replicas identical.
func TestIdempotentProducerDroppedResponses(t *testing.T) {
	c := Start(t, Options{})
	c.CreateTopic(topic, 2, 3, 2)
	parts := allPartitions(2)
	px := c.GatewayProxy("client→gw")
	px.DropResponses(0.3, c.NewRand())
	// The kill comes right after a producer lost the acknowledgment of a
	// request to p0: its retry goes to a dead leader, then to the new one,
	// which must recognise the records it already holds.
	type lostAck struct {
		r *IdemRequest
		a IdemAttempt
	}
	var armed atomic.Bool
	caught := make(chan lostAck, 1)
	release := make(chan struct{})
	hook := func(r *IdemRequest, a IdemAttempt) {
		if r.Partition != 0 || a.Result != "no answer" || !armed.Load() {
			return
		}
		if !strings.HasPrefix(a.Dropped, "HTTP/1.1 200 ") || !armed.CompareAndSwap(true, false) {
			return
		}
		caught <- lostAck{r, a}
		select { // the producer retries once the leader is dead
		case <-release:
		case <-time.After(30 * time.Second):
		}
	}
	load := c.StartIdempotentLoad(topic, IdemOptions{URL: "http://" + px.Addr(), Proxy: px, Producers: 4, Partitions: parts, OnAttempt: hook})
	acked := load.Acked
	started := time.Now()
	c.WaitFor("200 acknowledged idempotent requests over 2 s", 20*time.Second, func() (bool, string) {
		n := acked()
		return n >= 200 && time.Since(started) > 2*time.Second, fmt.Sprintf("%d acknowledged", n)
	})

	before := c.WaitLeader(topic, 0, 10*time.Second, nil)
	victim := before.Leader
	armed.Store(true)
	var held lostAck
	select {
	case held = <-caught:
	case <-time.After(15 * time.Second):
		t.Fatal("no acknowledgment of a request to p0 was dropped within 15 s")
	}
	_, ackBody, _ := strings.Cut(held.a.Dropped, "\r\n\r\n")
	c.Logf("i%d lost the acknowledgment %s of p0 seq %d; killing its leader before the retry", held.r.Producer, strings.TrimSpace(ackBody), held.r.FirstSeq)
	killed := time.Now()
	c.Kill(victim)
	close(release)
	after := c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool {
		return pi.Leader != victim && pi.LeaderEpoch > before.LeaderEpoch
	})
	failover := time.Since(killed)
	c.Logf("p0: b%d killed at epoch %d; b%d leads at epoch %d after %v", victim, before.LeaderEpoch, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond))
	ackedAtFailover := acked()
	c.WaitFor("30 more acknowledged requests under the new leader", 15*time.Second, func() (bool, string) {
		n := acked() - ackedAtFailover
		return n >= 30, fmt.Sprintf("%d more", n)
	})
	restarted := time.Now()
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
	rejoin := time.Since(restarted)
	c.Logf("b%d back in every ISR %v after its restart", victim, rejoin.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	load.Stop()
	tp := c.WaitFullISR(topic, 30*time.Second, true)
	c.Logf("settled: %s", DescribePartitions(tp))

	r := load.Check(parts)
	t.Logf("idempotent history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations", r.Violations())
	}
	// Requests caught by the failover: sent before the kill, acknowledged
	// after the new leader was in place. And p0's availability gap: from
	// the kill to its first acknowledgment.
	var straddled int
	var straddlers []string
	gap := time.Duration(0)
	for _, q := range load.Requests() {
		if q.Partition == 0 && q.OK {
			if end := q.Attempts[len(q.Attempts)-1].End; end.After(killed) && (gap == 0 || end.Sub(killed) < gap) {
				gap = end.Sub(killed)
			}
		}
		if len(q.Attempts) > 1 && q.Attempts[0].Start.Before(killed) && q.OK && q.Attempts[len(q.Attempts)-1].End.After(killed.Add(failover)) {
			straddled++
			if len(straddlers) < 5 {
				straddlers = append(straddlers, q.String())
			}
		}
	}
	c.Logf("requests retried across the failover: %d, e.g.\n  %s", straddled, joinLines(straddlers))
	c.Logf("the request whose acknowledgment was lost at the kill: %s", held.r)
	if !held.r.OK || !strings.Contains(ackBody, fmt.Sprintf(`"offset":%d}`, held.r.Offsets[0])) {
		t.Errorf("the request whose acknowledgment %s was lost before the kill ended as %s", strings.TrimSpace(ackBody), held.r)
	}
	never := r.Results[string(api.CodeOutOfOrderSequence)] + r.Results[string(api.CodeProducerFenced)]
	if never > 0 {
		t.Errorf("%d answers OUT_OF_ORDER_SEQUENCE/PRODUCER_FENCED to a producer that only ever resent its current request: %v", never, r.Results)
	}
	if px.Dropped() == 0 || r.RetriedOK == 0 {
		t.Errorf("the fault did not happen: %d answers dropped by the proxy, %d requests acknowledged after a lost answer", px.Dropped(), r.RetriedOK)
	}
	for _, p := range parts {
		hw := tp.Partitions[p].HighWatermark
		logs := c.SnapshotReplicas(topic, p)
		if diffs := CompareReplicas(logs, hw, true); len(diffs) > 0 {
			t.Errorf("p%d: replicas differ below the HW %d:%s\n  %s", p, hw, DescribeReplicas(logs), joinLines(diffs))
		}
	}
	t.Logf("figures: seed %d; requests %d, attempts %d, retries %d; answers dropped by the proxy %d (seen by producers %d; acknowledgments %d, retried to the same offsets %d); requests acknowledged after a lost answer %d; requests retried across the failover %d; records %d, duplicates %d, missing %d, moved %d, out of order %d; time to new leader %v (b%d → b%d, epoch %d → %d), p0's first acknowledgment %v after the kill; b%d back in the ISR %v after restart; answers %v",
		c.Seed, r.Requests, r.Attempts, r.Attempts-r.Requests, px.Dropped(), r.AnswersLost, r.LostAcks, r.LostAcksSame, r.RetriedOK, straddled, r.Records, r.Duplicates, r.Missing, r.Moved, r.OutOfOrder,
		failover.Round(time.Millisecond), victim, after.Leader, before.LeaderEpoch, after.LeaderEpoch, gap.Round(time.Millisecond), victim, rejoin.Round(time.Millisecond), r.Results)
}
