package broker

import (
	"context"
	"time"
)

// isrLoop is the leader side of ISR maintenance: on a tick (a quarter of the
// lag limit, at most a second) and whenever a follower outside the ISR
// fetches, each partition this broker leads is checked for followers to drop
// (not caught up for ReplicaLagTimeMax) or to add back (caught up to the HW).
// The change is a conditional write on the partition-state znode version the
// leader applied, so it fails when the controller changed the state first.
// A turn's changes go together (writeStates): a broker back from a restart
// rejoins the ISRs of every partition it follows in a few requests, not one
// round trip each.
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
		var (
			parts  []*Partition
			writes []stateWrite
		)
		for _, p := range b.parts.all() {
			st, version, ok := p.isrChange(now, b.opts.ReplicaLagTimeMax)
			if !ok {
				continue
			}
			parts = append(parts, p)
			writes = append(writes, stateWrite{topic: p.Topic, partition: p.ID, state: st, version: version})
		}
		if len(writes) == 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		results := writeStates(wctx, b.opts.Coord, nil, writes)
		cancel()
		for i, r := range results {
			p, st := parts[i], writes[i].state
			switch r.outcome {
			case writeDone:
				b.log.Info("ISR changed", "partition", p.String(), "isr", st.ISR, "epoch", st.LeaderEpoch)
				p.applyISR(st, r.version)
			case writeLost:
				// The controller moved first; the view brings its state.
			default:
				b.log.Warn("ISR change failed", "partition", p.String(), "err", r.err)
			}
		}
	}
}
