package broker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Hand-backs. A restarted broker finds itself recorded as the leader of the
// partitions it led before it stopped, and hands each back (see
// Partition.applyState): the partition goes leaderless with a new epoch and
// without this replica in its ISR (unless it is the only member), so the
// controller elects a replica that kept everything, and this one rejoins as
// a follower after truncating to the new leader's lineage.
//
// A broker that led a thousand partitions has a thousand to hand back, all
// found in its first reconcile. So resign only queues them, and one loop
// (resignLoop) writes what is queued in batches (writeStates), each write
// conditional on the state's version: first on the state the View read,
// then, for those that lost a race, on the state as it is now (read back, a
// batch at once), until the write lands or the state no longer names this
// broker leader in that epoch.

// handBack is one leadership to hand back: the state that recorded it and,
// once a write lost its race, the need to read it again.
type handBack struct {
	p       *Partition
	epoch   int32              // the leader epoch handed back
	st      api.PartitionState // the state as last read (first by the View)
	version int32              // its znode version
	reread  bool               // a write lost a race: read the state again first
}

// handBacks is the queue of leaderships waiting to be handed back.
type handBacks struct {
	mu    sync.Mutex // guards queue; leaf (taken under Partition.mu)
	queue []handBack
	kick  chan struct{} // cap 1: something was queued
}

// resign queues a leadership for the hand-back loop. It returns at once
// and takes only the queue's lock (callers hold Partition.mu).
func (b *Broker) resign(p *Partition, st api.PartitionState, version int32) {
	b.handBacks.mu.Lock()
	b.handBacks.queue = append(b.handBacks.queue, handBack{p: p, epoch: st.LeaderEpoch, st: st, version: version})
	b.handBacks.mu.Unlock()
	select {
	case b.handBacks.kick <- struct{}{}:
	default:
	}
}

// resignLoop hands back what resign queued, a batch at a time, until ctx
// ends (what is still queued then is moot: the next start finds the
// leaderships recorded again and queues them anew).
func (b *Broker) resignLoop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for attempt := 0; ; attempt++ {
		select {
		case <-b.handBacks.kick:
		case <-retry.C:
		case <-ctx.Done():
			return
		}
		b.handBacks.mu.Lock()
		todo := b.handBacks.queue
		b.handBacks.queue = nil
		b.handBacks.mu.Unlock()
		if len(todo) == 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		again, failed := b.handBackBatch(wctx, todo, attempt)
		cancel()
		if len(again) == 0 {
			continue
		}
		b.handBacks.mu.Lock()
		b.handBacks.queue = append(b.handBacks.queue, again...)
		b.handBacks.mu.Unlock()
		if failed {
			retry.Reset(200 * time.Millisecond)
		} else {
			// Only lost races: look again at once.
			select {
			case b.handBacks.kick <- struct{}{}:
			default:
			}
		}
	}
}

// handBackBatch hands back each of todo and returns those to try again
// (failed is set when any failed for a reason other than a lost race).
func (b *Broker) handBackBatch(ctx context.Context, todo []handBack, attempt int) (again []handBack, failed bool) {
	// Those that lost a race are read again, all at once.
	_ = coord.Pipeline(ctx, len(todo), 0, func(ctx context.Context, i int) error {
		h := &todo[i]
		if !h.reread {
			return nil
		}
		data, stat, err := b.opts.Coord.Get(ctx, cluster.PartitionStatePath(h.p.Topic, h.p.ID))
		switch {
		case errors.Is(err, coord.ErrNoNode):
			h.version = -1 // gone: moot
		case err != nil:
			h.version = -2 // not read: try again later
		default:
			var cur api.PartitionState
			if json.Unmarshal(data, &cur) != nil {
				h.version = -2
				return nil
			}
			h.st, h.version, h.reread = cur, stat.Version, false
		}
		return nil
	})
	var (
		writes []stateWrite
		from   []int // index in todo of each write
	)
	for i, h := range todo {
		switch {
		case h.reread && h.version == -1:
			continue // the partition is gone
		case h.reread:
			again, failed = append(again, h), true
			continue
		}
		next, ok := handedBack(h.st, b.opts.ID, h.epoch)
		if !ok {
			continue // moot: the state no longer names this broker in that epoch
		}
		writes = append(writes, stateWrite{topic: h.p.Topic, partition: h.p.ID, state: next, version: h.version})
		from = append(from, i)
	}
	results := writeStates(ctx, b.opts.Coord, nil, writes)
	logged := false
	for k, r := range results {
		h := todo[from[k]]
		switch r.outcome {
		case writeDone:
			b.log.Info("handed back a leadership from before the restart", "partition", h.p.String(), "epoch", h.st.LeaderEpoch)
		case writeLost:
			h.reread = true
			again = append(again, h)
		default:
			h.reread = true // the write may have landed: look before writing again
			again, failed = append(again, h), true
			if !logged && attempt%10 == 0 {
				logged = true
				b.log.Warn("handing back a leadership failed; retrying", "partition", h.p.String(), "err", r.err)
			}
		}
	}
	return again, failed
}

// handedBack is the state that hands leadership of cur back from broker
// self, which handed back epoch: leaderless, a new epoch, self out of the
// ISR unless it is the only member. ok is false when cur no longer names
// self leader at or below that epoch (moot).
func handedBack(cur api.PartitionState, self, epoch int32) (api.PartitionState, bool) {
	if cur.Leader != self || cur.LeaderEpoch > epoch {
		return cur, false
	}
	next := cur
	next.Leader, next.LeaderEpoch = -1, cur.LeaderEpoch+1
	if len(cur.ISR) > 1 {
		next.ISR = slices.DeleteFunc(slices.Clone(cur.ISR), func(id int32) bool { return id == self })
	}
	return next, true
}
