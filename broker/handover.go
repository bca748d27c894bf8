package broker

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// Handing a leadership over. A controlled shutdown moves a leadership
// while producers are writing to it; an acks=all write appended by the old
// leader but not yet replicated when the new epoch arrives has an unknown
// outcome (the new leader may or may not hold it), which a producer without
// idempotence must not retry. So before its registration says it is
// shutting down, the broker closes each leadership it is about to lose to
// new writes (NOT_LEADER: nothing written, safe to retry on the new leader)
// and waits until what it already appended is committed. Only then does
// the controller see the mark and move the leaderships, with nothing left
// in flight: every acks=all write of the old epoch was answered, and the
// producers' retries land on the new leader. Partitions with no other live
// ISR member to go to stay open: the broker keeps leading them to the end.

// maxHandoverWait bounds the wait for in-flight writes to commit: a
// follower that stopped fetching leaves the ISR after
// replica.lag.time.max.ms, which lets the HW move on, but the shutdown
// goes on after this long regardless.
const maxHandoverWait = 15 * time.Second

// closeForHandover refuses new writes to the leaderships the broker is
// about to hand over (movable in md) and waits until each of them has
// committed everything appended, it stopped leading, or the wait is over
// (half of what is left of ctx, at most maxHandoverWait). It returns the
// partitions closed and those still not committed when it gave up.
func (b *Broker) closeForHandover(ctx context.Context, md *cluster.Metadata) (closed, pending int) {
	var parts []*Partition
	for _, p := range b.parts.all() {
		if p.closeForHandover(func(st api.PartitionState) bool { return movable(md, b.opts.ID, st) }) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return 0, 0
	}
	wait := maxHandoverWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	deadline := time.Now().Add(wait)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		left := parts[:0]
		for _, p := range parts {
			if !p.handedOverOrCommitted() {
				left = append(left, p)
			}
		}
		parts = left
		if len(parts) == 0 || !time.Now().Before(deadline) {
			return cap(parts), len(parts)
		}
		select {
		case <-ctx.Done():
			return cap(parts), len(parts)
		case <-t.C:
		}
	}
}

// movable reports whether st, a partition self leads, has another live ISR
// member not shutting down: one the controller would move it to.
func movable(md *cluster.Metadata, self int32, st api.PartitionState) bool {
	if st.Leader != self {
		return false
	}
	for _, id := range st.ISR {
		if reg, ok := md.Brokers[id]; ok && id != self && !reg.ShuttingDown {
			return true
		}
	}
	return false
}

// closeForHandover closes the partition's present leadership to new
// writes when it leads and movable says the leadership will move. A later
// leadership (a new epoch) is open again.
func (p *Partition) closeForHandover(movable func(api.PartitionState) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leaderLocked() != nil || !movable(p.state) {
		return false
	}
	p.handingOver = p.state.LeaderEpoch
	return true
}

// handingOverLocked is the refusal of a write to a leadership closed for
// its hand-over, nil otherwise.
func (p *Partition) handingOverLocked() error {
	if p.handingOver >= 0 && p.handingOver == p.state.LeaderEpoch {
		return api.Errorf(api.CodeNotLeader, "broker %d is shutting down: the leadership of %s (epoch %d) is moving to another replica", p.deps.self, p, p.state.LeaderEpoch)
	}
	return nil
}

// handedOverOrCommitted reports whether the leadership closed for its
// hand-over has nothing uncommitted left, or has ended.
func (p *Partition) handedOverOrCommitted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leaderLocked() != nil || p.state.LeaderEpoch != p.handingOver {
		return true
	}
	o := p.log.Offsets()
	return o.HighWatermark >= o.LogEnd
}
