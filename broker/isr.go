package broker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// isrLoop is the leader side of ISR maintenance: on a tick (a quarter of the
// lag limit, at most a second) and whenever a follower outside the ISR
// fetches, each partition this broker leads is checked for followers to drop
// (not caught up for ReplicaLagTimeMax) or to add back (caught up to the HW).
// The change is a conditional write on the partition-state znode version the
// leader applied, so it fails when the controller changed the state first.
func (b *Broker) isrLoop(ctx context.Context) {
	tick := min(b.opts.ReplicaLagTimeMax/4, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.isrKick:
		case <-ctx.Done():
			return
		}
		now := time.Now()
		for _, p := range b.parts.all() {
			st, version, ok := p.isrChange(now, b.opts.ReplicaLagTimeMax)
			if !ok {
				continue
			}
			data, _ := json.Marshal(st)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			stat, err := b.opts.Coord.Set(wctx, cluster.PartitionStatePath(p.Topic, p.ID), data, version)
			cancel()
			switch {
			case err == nil:
				b.log.Info("ISR changed", "partition", p.String(), "isr", st.ISR, "epoch", st.LeaderEpoch)
				p.applyISR(st, stat.Version)
			case errors.Is(err, coord.ErrBadVersion):
				// The controller moved first; the view brings its state.
			default:
				b.log.Warn("ISR change failed", "partition", p.String(), "err", err)
			}
		}
	}
}

// sessionLoop watches the coordinator session. Once the session is gone (or
// has been unreachable for longer than its timeout, after which the ensemble
// has expired it) the controller may have moved every leadership this broker
// held: all partitions are fenced until fresh states are applied, so a
// deposed leader acknowledges nothing.
func (b *Broker) sessionLoop(ctx context.Context) {
	events := b.opts.Coord.SessionEvents()
	var cutoff <-chan time.Time
	var timer *time.Timer
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, cutoff = nil, nil
		}
	}
	defer stopTimer()
	fenced := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-cutoff:
			stopTimer()
			if !fenced {
				b.log.Warn("coordinator unreachable past the session timeout; fencing all partitions")
				b.parts.fenceAll()
				fenced = true
			}
		case st, ok := <-events:
			if !ok {
				return
			}
			switch st {
			case coord.StateDisconnected:
				if timer == nil {
					timer = time.NewTimer(b.opts.SessionTimeout)
					cutoff = timer.C
				}
			case coord.StateExpired:
				stopTimer()
				b.log.Warn("coordinator session expired; fencing all partitions")
				b.parts.fenceAll()
				fenced = true
			case coord.StateConnected:
				stopTimer()
				if fenced {
					// Re-read everything and re-apply: that lifts the fence
					// where this broker still holds its role.
					rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					if err := b.view.Refresh(rctx); err == nil {
						b.parts.reconcile(b.view.Current())
						fenced = false
					}
					cancel()
				}
			}
		}
	}
}
