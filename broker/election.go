package broker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// serve runs the controller's duties until its /controller node changes
// (gone is the watch on it) or ctx ends. Each pass is level-triggered: it
// looks at the whole metadata snapshot and fixes what is wrong, so a missed
// event is repaired by the next one.
func (ctl *controller) serve(ctx context.Context, gone <-chan coord.Event) {
	changed := ctl.view.Subscribe()
	var rebalance <-chan time.Time
	if ctl.rebalanceEvery > 0 {
		t := time.NewTicker(ctl.rebalanceEvery)
		defer t.Stop()
		rebalance = t.C
	}
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	ctl.ahead = nil // what an earlier term wrote is in the snapshots by now
	// The first pass right away: the previous controller may have died
	// with work undone.
	if err := ctl.viewRefresh(ctx); err == nil {
		if err := ctl.finishPending(ctx); err != nil {
			ctl.log.Warn("finishing half-written topics failed; a retried create or delete finishes them", "err", err)
		}
		ctl.electLeaders(ctx, ctl.view.Current(), false)
	}
	for {
		preferred := false
		select {
		case <-gone:
			return
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry.C:
		case <-rebalance:
			preferred = true
		}
		if !ctl.isActive() {
			return
		}
		if !ctl.electLeaders(ctx, ctl.view.Current(), preferred) {
			retry.Reset(200 * time.Millisecond)
		}
	}
}

func (ctl *controller) viewRefresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ctl.view.Refresh(rctx)
}

// electLeaders makes one pass over every partition and writes the states
// that must change in batches (writeStates), each conditional on the
// version the snapshot read and led by the controller's fence. A partition
// that lost its race is left for the next pass, which the snapshot its
// change brings (or the retry timer) starts. It reports whether every write
// it needed went through.
//
// A partition this controller wrote at a version the snapshot has not
// reached yet (its View is still reading the change) is passed over: the
// decision would rest on the state before the write, and the write could
// only fail. Called only from serve's goroutine, which owns ctl.ahead.
func (ctl *controller) electLeaders(ctx context.Context, md *cluster.Metadata, preferred bool) bool {
	fence, err := ctl.fence()
	if err != nil {
		return true
	}
	epoch := ctl.currentEpoch()
	var (
		writes []stateWrite
		keys   []partitionKey
		was    []int32
	)
	ahead := map[partitionKey]int32{}
	failedLogs := failedReplicas(md)
	for _, name := range md.TopicNames() {
		tm := md.Topics[name]
		cfg, _ := api.ParseTopicConfig(tm.Record.Configs, len(firstOr(tm.Record.Replicas)))
		for p, replicas := range tm.Record.Replicas {
			if tm.StateVersions[p] < 0 {
				continue
			}
			key := partitionKey{tm.Record.ID, int32(p)}
			if v, ok := ctl.ahead[key]; ok && tm.StateVersions[p] < v {
				ahead[key] = v
				continue
			}
			live := md.Brokers
			if failedLogs != nil {
				live = withoutFailed(md.Brokers, failedLogs, partitionDir(name, int32(p)), replicas)
			}
			next, change := decideLeader(tm.States[p], replicas, live, cfg.UncleanElection, preferred)
			if !change {
				continue
			}
			next.ControllerEpoch = epoch
			writes = append(writes, stateWrite{topic: name, partition: int32(p), state: next, version: tm.StateVersions[p]})
			keys = append(keys, key)
			was = append(was, tm.States[p].Leader)
		}
	}
	ok := true
	if len(writes) == 0 {
		ctl.ahead = ahead
		return ok
	}
	leadersFirst(writes, keys, was)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	results := writeStates(wctx, ctl.c, &fence, writes)
	cancel()
	var done, lost, failed int
	var fenced error
	for i, r := range results {
		w := writes[i]
		switch r.outcome {
		case writeDone:
			done++
			ahead[keys[i]] = r.version
			ctl.log.Info("partition state changed", "partition", partitionDir(w.topic, w.partition),
				"leader", w.state.Leader, "epoch", w.state.LeaderEpoch, "isr", w.state.ISR, "was_leader", was[i])
		case writeLost:
			// Someone wrote first (a leader changing its ISR, or a newer
			// controller); the next snapshot brings it.
			lost++
		case writeFenced:
			fenced = r.err
		default:
			failed++
			if failed == 1 {
				ctl.log.Warn("partition state write failed", "partition", partitionDir(w.topic, w.partition), "err", r.err)
			}
		}
	}
	ctl.ahead = ahead
	if fenced != nil {
		ctl.log.Warn("partition state writes refused: another controller took office", "err", fenced)
	}
	ctl.log.Info("election pass", "written", done, "lost_races", lost, "failed", failed, "fenced", fenced != nil)
	return done == len(writes)
}

// leadersFirst orders writes (and keys and was beside them) so that every
// change of leader goes before the changes of an ISR alone,
// keeping each group's order. A broker's death changes the ISR of every
// partition it followed but the leader of only those it led: written in
// topic order, the elections would wait behind twice as many ISR
// shrinks, and clients see no leader until theirs lands.
func leadersFirst(writes []stateWrite, keys []partitionKey, was []int32) {
	type entry struct {
		w   stateWrite
		key partitionKey
		was int32
	}
	moves := make([]entry, 0, len(writes))
	var rest []entry
	for i, w := range writes {
		e := entry{w, keys[i], was[i]}
		if w.state.Leader != was[i] {
			moves = append(moves, e)
		} else {
			rest = append(rest, e)
		}
	}
	for i, e := range append(moves, rest...) {
		writes[i], keys[i], was[i] = e.w, e.key, e.was
	}
}

// partitionKey names a partition across topic re-creations: the topic's ID,
// not its name.
type partitionKey struct {
	topicID   string
	partition int32
}

// decideLeader is the election rule, as a pure function of the state, the
// assignment and the live brokers:
//
//   - leader alive: drop dead brokers from the ISR (same epoch); with
//     preferred, move leadership to the first replica if it is alive and in
//     the ISR (new epoch).
//   - leader dead or none: the first live ISR member in assignment order
//     leads (new epoch), the ISR keeps its live members.
//   - no live ISR member: with unclean election the first live replica leads
//     with an ISR of itself (acknowledged data may be lost); otherwise the
//     partition goes offline (leader -1, new epoch) and keeps its last ISR, so
//     that the first of those to return leads again with nothing lost.
//
// A broker that is shutting down (controlled shutdown) is passed over: a
// leadership it holds moves to the first live ISR member that is not
// shutting down (new epoch) and it leaves that ISR, none is given to it,
// and it leads only when no other ISR member is alive (it is better than
// offline). In the ISRs of the partitions it follows it stays while it
// drains.
//
// Once such a broker is stopping (it handed over what could move and is
// about to stop following), it leaves every ISR but the one of a partition
// it still leads (same epoch), so that acks=all writes do not wait for it;
// a partition with no leader keeps its ISR, the members to wait for.
//
// A broker whose replica of the partition failed (its registration's
// failed_logs) is left out of live by the caller (withoutFailed): for that
// partition it is dead.
func decideLeader(st api.PartitionState, replicas []int32, live map[int32]api.BrokerRegistration, unclean, preferred bool) (api.PartitionState, bool) {
	next, change := electLeader(st, replicas, live, unclean, preferred)
	if next.Leader < 0 {
		return next, change
	}
	if isr := withoutStopping(next.ISR, next.Leader, live); len(isr) != len(next.ISR) {
		next.ISR = isr
		change = true
	}
	return next, change
}

// withoutStopping is isr without the brokers whose registration says they
// are stopping (a controlled shutdown that handed over its leaderships),
// but for leader, which the ISR always holds.
func withoutStopping(isr []int32, leader int32, live map[int32]api.BrokerRegistration) []int32 {
	if !slices.ContainsFunc(isr, func(id int32) bool { return id != leader && live[id].Stopping }) {
		return isr
	}
	out := make([]int32, 0, len(isr))
	for _, id := range isr {
		if id == leader || !live[id].Stopping {
			out = append(out, id)
		}
	}
	return out
}

// electLeader is decideLeader's choice of a leader, before stopping
// brokers leave the ISR.
func electLeader(st api.PartitionState, replicas []int32, live map[int32]api.BrokerRegistration, unclean, preferred bool) (api.PartitionState, bool) {
	alive := func(id int32) bool { _, ok := live[id]; return ok }
	eligible := func(id int32) bool { reg, ok := live[id]; return ok && !reg.ShuttingDown }
	var liveISR, eligibleISR []int32
	for _, id := range replicas {
		if slices.Contains(st.ISR, id) && alive(id) {
			liveISR = append(liveISR, id)
			if eligible(id) {
				eligibleISR = append(eligibleISR, id)
			}
		}
	}
	next := st
	if st.Leader >= 0 && alive(st.Leader) {
		if !eligible(st.Leader) && len(eligibleISR) > 0 {
			// The leader it hands over from leaves the ISR with it: it
			// closed the leadership and let its writes commit first
			// (handover.go), and the new leader's writes must not wait for
			// the fetch of a broker on its way out.
			isr := slices.DeleteFunc(slices.Clone(liveISR), func(id int32) bool { return id == st.Leader })
			next.Leader, next.LeaderEpoch, next.ISR = eligibleISR[0], st.LeaderEpoch+1, isr
			return next, true
		}
		if pref := replicas[0]; preferred && pref != st.Leader && slices.Contains(eligibleISR, pref) {
			next.Leader, next.LeaderEpoch, next.ISR = pref, st.LeaderEpoch+1, liveISR
			return next, true
		}
		if len(liveISR) != len(st.ISR) {
			next.ISR = liveISR
			return next, true
		}
		return st, false
	}
	switch {
	case len(eligibleISR) > 0:
		next.Leader, next.LeaderEpoch, next.ISR = eligibleISR[0], st.LeaderEpoch+1, liveISR
	case len(liveISR) > 0:
		next.Leader, next.LeaderEpoch, next.ISR = liveISR[0], st.LeaderEpoch+1, liveISR
	case unclean:
		for _, id := range replicas {
			if alive(id) {
				next.Leader, next.LeaderEpoch, next.ISR = id, st.LeaderEpoch+1, []int32{id}
				return next, true
			}
		}
		if st.Leader == -1 {
			return st, false
		}
		next.Leader, next.LeaderEpoch = -1, st.LeaderEpoch+1
	default:
		if st.Leader == -1 {
			return st, false // already offline; waiting for an ISR member
		}
		next.Leader, next.LeaderEpoch = -1, st.LeaderEpoch+1
	}
	return next, true
}

// withoutFailed is live without the brokers whose replica of partition dir
// failed (failedReplicas): for the election of that partition such a
// replica is as good as dead. live itself when none of replicas failed.
func withoutFailed(live map[int32]api.BrokerRegistration, failed map[int32]map[string]string, dir string, replicas []int32) map[int32]api.BrokerRegistration {
	var out map[int32]api.BrokerRegistration
	for _, id := range replicas {
		if _, bad := failed[id][dir]; !bad {
			continue
		}
		if out == nil {
			out = maps.Clone(live)
		}
		delete(out, id)
	}
	if out == nil {
		return live
	}
	return out
}
