package broker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// resign hands back a leadership a restarted broker found recorded for
// itself: the partition goes leaderless with a new epoch and without this
// replica in its ISR (unless it is the only member), so the controller elects
// a replica that kept everything, and this one rejoins as a follower after
// truncating to the new leader's lineage. It works on the state as it is now
// (the controller may have changed the ISR meanwhile) and retries until the
// write lands or the state no longer names this broker in that epoch. Runs on
// a goroutine owned by the broker (goFunc).
func (b *Broker) resign(p *Partition, st api.PartitionState, _ int32) {
	path := cluster.PartitionStatePath(p.Topic, p.ID)
	b.goFunc(func() {
		for attempt := 0; b.runCtx.Err() == nil; attempt++ {
			ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
			err := b.resignOnce(ctx, path, st.LeaderEpoch)
			cancel()
			switch {
			case err == nil:
				b.log.Info("handed back a leadership from before the restart", "partition", p.String(), "epoch", st.LeaderEpoch)
				return
			case errors.Is(err, errMoot):
				return
			case errors.Is(err, coord.ErrBadVersion):
				continue // changed between read and write: look again
			}
			if attempt%10 == 0 {
				b.log.Warn("handing back a leadership failed; retrying", "partition", p.String(), "err", err)
			}
			sleep(b.runCtx, 200*time.Millisecond)
		}
	})
}

var errMoot = errors.New("the state no longer names this broker as leader in that epoch")

func (b *Broker) resignOnce(ctx context.Context, path string, epoch int32) error {
	data, stat, err := b.opts.Coord.Get(ctx, path)
	if errors.Is(err, coord.ErrNoNode) {
		return errMoot
	}
	if err != nil {
		return err
	}
	var cur api.PartitionState
	if err := json.Unmarshal(data, &cur); err != nil {
		return err
	}
	if cur.Leader != b.opts.ID || cur.LeaderEpoch > epoch {
		return errMoot
	}
	next := cur
	next.Leader, next.LeaderEpoch = -1, cur.LeaderEpoch+1
	if len(cur.ISR) > 1 {
		next.ISR = slices.DeleteFunc(slices.Clone(cur.ISR), func(id int32) bool { return id == b.opts.ID })
	}
	out, _ := json.Marshal(next)
	_, err = b.opts.Coord.Set(ctx, path, out, stat.Version)
	return err
}
