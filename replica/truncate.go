package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
)

// lineage is what agreeing on a leader's epoch lineage needs for one
// partition: where to ask and what to cut. guard runs each change of the
// log, and refuses it (errLeft) once the partition left its stream, so that
// nothing touches a log after its role moved on.
type lineage struct {
	topic       string
	partition   int32
	leaderEpoch int32
	log         *commitlog.Log
	client      *brokerapi.Client
	addr        string
	guard       func(change func() error) error
}

// truncateToLeader asks the leader where our latest epoch ends in its log and
// cuts our log there (KIP-101), repeating while our lineage still runs ahead
// of what the leader confirmed (KIP-279).
func truncateToLeader(ctx context.Context, cfg lineage, log *slog.Logger) error {
	for round := 0; round < 8; round++ {
		mine := cfg.log.LatestEpoch()
		o := cfg.log.Offsets()
		if mine < 0 || o.LogEnd == o.LogStart {
			return nil // nothing written that could diverge
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := cfg.client.EpochEnd(rctx, cfg.addr, cfg.topic, cfg.partition, mine, cfg.leaderEpoch)
		cancel()
		if err != nil {
			return err
		}
		var target int64
		switch {
		case res.Epoch < 0:
			// The leader knows nothing at or below our latest epoch: none of
			// our log is in its lineage.
			target = o.LogStart
		case res.Epoch == mine:
			target = min(res.EndOffset, o.LogEnd)
		default:
			_, myEnd := cfg.log.EndOffsetForEpoch(res.Epoch)
			target = min(res.EndOffset, myEnd)
		}
		if target >= o.LogEnd {
			return nil
		}
		var end int64
		if err := cfg.guard(func() (err error) {
			end, err = cfg.log.TruncateTo(target)
			return err
		}); err != nil {
			return err
		}
		log.Info("truncated to the leader's lineage", "from", o.LogEnd, "to", end, "my_epoch", mine, "leader_epoch_end", res.EndOffset)
		if cfg.log.LatestEpoch() <= res.Epoch || res.Epoch < 0 {
			return nil
		}
	}
	return nil
}

// resetIfBehind restarts the local log at the leader's log start when all of
// it lies below that start (retention removed what we would fetch next).
func resetIfBehind(ctx context.Context, cfg lineage, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := cfg.client.ListOffsets(rctx, cfg.addr, cfg.topic, cfg.partition, "earliest")
	if err != nil {
		return err
	}
	leo := cfg.log.Offsets().LogEnd
	if leo >= res.LocalStartOffset {
		return nil
	}
	// The producers whose batches lie below the leader's start come with its
	// snapshot there; without it (a leader that has none) this replica,
	// should it lead, would write a retry of one of those batches again.
	snap, err := cfg.client.ProducerSnapshot(rctx, cfg.addr, cfg.topic, cfg.partition, res.LocalStartOffset, cfg.leaderEpoch)
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		// Either the leader's start moved on since we asked (its snapshot
		// there went with the segments: ask again later) or it has none.
		again, lerr := cfg.client.ListOffsets(rctx, cfg.addr, cfg.topic, cfg.partition, "earliest")
		if lerr != nil {
			return lerr
		}
		if again.LocalStartOffset != res.LocalStartOffset {
			return fmt.Errorf("the leader's local log start moved from %d to %d", res.LocalStartOffset, again.LocalStartOffset)
		}
		log.Warn("the leader has no producer snapshot at its local log start; starting over without the producers below it", "leader_local_start", res.LocalStartOffset)
		snap = nil
	case err != nil:
		return err
	}
	log.Warn("local log ends below the leader's local log start; starting over there", "leo", leo, "leader_local_start", res.LocalStartOffset, "producer_snapshot_bytes", len(snap))
	return cfg.guard(func() error {
		if cfg.log.Offsets().LogEnd != leo {
			return nil // the log moved since: the next round looks again
		}
		return cfg.log.ResetTo(res.LocalStartOffset, snap)
	})
}

// backoff grows from its first pause (20 ms unless set) to 1 s.
type backoff struct{ first, d time.Duration }

func newBackoff() backoff { return newBackoffFrom(20 * time.Millisecond) }

func newBackoffFrom(first time.Duration) backoff {
	return backoff{first: first, d: first}
}

func (b *backoff) reset() { b.d = b.first }

// next is the pause to take now; the one after is twice as long.
func (b *backoff) next() time.Duration {
	d := b.d
	b.d = min(2*b.d, max(time.Second, b.first))
	return d
}

// wait pauses for next, or until ctx ends.
func (b *backoff) wait(ctx context.Context) {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
