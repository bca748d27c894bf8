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
