package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
)

// FollowerConfig describes one follower run: one partition following one
// leader in one leader epoch. A change of leader or epoch ends the run (its
// context is cancelled) and starts a new one.
type FollowerConfig struct {
	Topic       string
	Partition   int32
	Self        int32
	Log         *commitlog.Log
	Client      *brokerapi.Client
	LeaderID    int32
	LeaderAddr  string
	LeaderEpoch int32
	// MaxBytes per fetch; default 4 MiB.
	MaxBytes int64
	// MaxWait is the long-poll bound of a fetch; default 500 ms.
	MaxWait time.Duration
	Logger  *slog.Logger
}

// RunFollower truncates the local log to where it agrees with the leader's
// epoch lineage (KIP-101: never to the local HW, which may be stale), then
// copies batches from the leader until ctx ends. Errors are retried with
// backoff; a disk error stops the run (the log is read-only).
func RunFollower(ctx context.Context, cfg FollowerConfig) {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 4 << 20
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	log := cfg.Logger.With("partition", cfg.Topic, "p", cfg.Partition, "leader", cfg.LeaderID, "epoch", cfg.LeaderEpoch)
	backoff := newBackoff()
	truncated := false
	var scratch []byte // reused by every fetch of this run
	for ctx.Err() == nil {
		if !truncated {
			if err := truncateToLeader(ctx, cfg, log); err != nil {
				if ctx.Err() == nil {
					log.Debug("epoch truncation failed; retrying", "err", err)
				}
				backoff.wait(ctx)
				continue
			}
			truncated = true
		}
		err := fetchOnce(ctx, cfg, &scratch)
		switch {
		case err == nil:
			backoff.reset()
		case ctx.Err() != nil:
			return
		case errors.Is(err, api.ErrOffsetOutOfRange):
			// Either our log end is past the leader's (agree on the lineage
			// again) or below its log start (start over where it starts).
			if rerr := resetIfBehind(ctx, cfg, log); rerr != nil && ctx.Err() == nil {
				log.Debug("reset check failed", "err", rerr)
			}
			truncated = false
			backoff.wait(ctx)
		case errors.Is(err, api.ErrStorage):
			log.Error("follower stops: local disk error", "err", err)
			return
		case errors.Is(err, api.ErrCorruptRecord):
			// The leader's batches do not continue our log: our lineage
			// diverged after all. Agree on it again.
			log.Warn("leader's batches do not continue the local log; truncating again", "err", err)
			truncated = false
			backoff.wait(ctx)
		default:
			log.Debug("follower fetch failed; retrying", "err", err)
			backoff.wait(ctx)
		}
	}
}

// fetchOnce fetches from the local log end and appends what comes back,
// reading into *scratch (grown as needed; the log copies what it appends).
// A buffer grown past cfg.MaxBytes, for an outsized batch (batches are
// fetched whole: a 32 MiB produce request is one batch per partition), is
// dropped after use: kept, every follower would hold the largest batch it
// ever copied for as long as it runs.
func fetchOnce(ctx context.Context, cfg FollowerConfig, scratch *[]byte) error {
	defer func() {
		if int64(cap(*scratch)) > cfg.MaxBytes {
			*scratch = nil
		}
	}()
	leo := cfg.Log.Offsets().LogEnd
	fctx, cancel := context.WithTimeout(ctx, cfg.MaxWait+30*time.Second)
	defer cancel()
	fr, err := cfg.Client.Fetch(fctx, cfg.LeaderAddr, cfg.Topic, cfg.Partition, brokerapi.FetchParams{
		Offset: leo, MaxBytes: cfg.MaxBytes, MaxWait: cfg.MaxWait, ReplicaID: cfg.Self, LeaderEpoch: cfg.LeaderEpoch,
	})
	if err != nil {
		return err
	}
	defer fr.Body.Close()
	if fr.Size > 0 {
		if int64(cap(*scratch)) < fr.Size {
			*scratch = make([]byte, fr.Size)
		}
		buf := (*scratch)[:fr.Size]
		if _, err := io.ReadFull(fr.Body, buf); err != nil {
			return api.Errorf(api.CodeBrokerUnavailable, "fetch body cut short: %v", err)
		}
		if _, err := cfg.Log.AppendReplica(buf); err != nil {
			return err
		}
	}
	// A follower's HW trails the leader's and never passes its own log end.
	cfg.Log.SetHighWatermark(min(fr.HighWatermark, cfg.Log.Offsets().LogEnd))
	return nil
}

// truncateToLeader asks the leader where our latest epoch ends in its log and
// cuts our log there (KIP-101), repeating while our lineage still runs ahead
// of what the leader confirmed (KIP-279).
func truncateToLeader(ctx context.Context, cfg FollowerConfig, log *slog.Logger) error {
	for round := 0; round < 8; round++ {
		mine := cfg.Log.LatestEpoch()
		o := cfg.Log.Offsets()
		if mine < 0 || o.LogEnd == o.LogStart {
			return nil // nothing written that could diverge
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := cfg.Client.EpochEnd(rctx, cfg.LeaderAddr, cfg.Topic, cfg.Partition, mine, cfg.LeaderEpoch)
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
			_, myEnd := cfg.Log.EndOffsetForEpoch(res.Epoch)
			target = min(res.EndOffset, myEnd)
		}
		if target >= o.LogEnd {
			return nil
		}
		end, err := cfg.Log.TruncateTo(target)
		if err != nil {
			return err
		}
		log.Info("truncated to the leader's lineage", "from", o.LogEnd, "to", end, "my_epoch", mine, "leader_epoch_end", res.EndOffset)
		if cfg.Log.LatestEpoch() <= res.Epoch || res.Epoch < 0 {
			return nil
		}
	}
	return nil
}

// resetIfBehind restarts the local log at the leader's log start when all of
// it lies below that start (retention removed what we would fetch next).
func resetIfBehind(ctx context.Context, cfg FollowerConfig, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := cfg.Client.ListOffsets(rctx, cfg.LeaderAddr, cfg.Topic, cfg.Partition, "earliest")
	if err != nil {
		return err
	}
	leo := cfg.Log.Offsets().LogEnd
	if leo >= res.LocalStartOffset {
		return nil
	}
	// The producers whose batches lie below the leader's start come with its
	// snapshot there; without it (a leader that has none) this replica,
	// should it lead, would write a retry of one of those batches again.
	snap, err := cfg.Client.ProducerSnapshot(rctx, cfg.LeaderAddr, cfg.Topic, cfg.Partition, res.LocalStartOffset, cfg.LeaderEpoch)
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		// Either the leader's start moved on since we asked (its snapshot
		// there went with the segments: ask again later) or it has none.
		again, lerr := cfg.Client.ListOffsets(rctx, cfg.LeaderAddr, cfg.Topic, cfg.Partition, "earliest")
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
	return cfg.Log.ResetTo(res.LocalStartOffset, snap)
}

// backoff grows from 20 ms to 1 s.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 20 * time.Millisecond} }
func (b *backoff) reset()  { b.d = 20 * time.Millisecond }
func (b *backoff) wait(ctx context.Context) {
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	b.d = min(2*b.d, time.Second)
}
