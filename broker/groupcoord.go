package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/offsets"
)

// groupCoordinator hosts the consumer groups of one __consumer_offsets
// partition while this broker leads it. Operations are serialized: each runs
// on the state, its records are appended with acks=all in the leader epoch
// the state was loaded at, and only then applied. An append that fails may
// still have landed, so the state is dropped and rebuilt from the log before
// the next operation: memory never disagrees with the log for long.
//
// The leader epoch is the fence: a deposed coordinator's appends fail (the
// partition refuses them, or they never reach the ISR), so it can change
// nothing, whatever it still believes.
type groupCoordinator struct {
	p *Partition

	mu     sync.Mutex // serializes operations; guards the fields below
	st     *offsets.State
	epoch  int32 // the leader epoch st was loaded in; meaningful while st != nil
	loadMs int64 // how long the last load took, for logs
}

// op is one group operation on the state: the records to append, or an error.
type op func(st *offsets.State, now time.Time) ([]offsets.Record, error)

// run loads the state if this broker leads the partition and has not loaded
// it in the current epoch, runs f, appends its records and applies them.
// after, when set, reads the result from the state once it is applied (under
// the same lock).
func (gc *groupCoordinator) run(ctx context.Context, f op, after func(st *offsets.State) error) error {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	epoch, _, leading := gc.p.leaderState()
	if !leading {
		gc.st = nil
		return api.Errorf(api.CodeNotCoordinator, "broker %d does not lead %s", gc.p.deps.self, gc.p)
	}
	if gc.st == nil || gc.epoch != epoch {
		if err := gc.loadLocked(epoch); err != nil {
			return err
		}
	}
	now := time.Now()
	recs, err := f(gc.st, now)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		if err := gc.appendLocked(ctx, recs); err != nil {
			gc.st = nil // it may have landed: rebuild from the log next time
			return err
		}
		for _, r := range recs {
			if err := gc.st.Apply(r, now); err != nil {
				gc.st = nil
				return err
			}
		}
	}
	if after != nil {
		return after(gc.st)
	}
	return nil
}

// read runs f on a loaded state without appending anything.
func (gc *groupCoordinator) read(ctx context.Context, f func(st *offsets.State) error) error {
	return gc.run(ctx, func(*offsets.State, time.Time) ([]offsets.Record, error) { return nil, nil }, f)
}

// loadLocked replays the partition from its start to its log end. Records
// past the HW are included: as leader this replica's log is the one the
// followers converge to.
func (gc *groupCoordinator) loadLocked(epoch int32) error {
	start := time.Now()
	st := offsets.NewState()
	o := gc.p.log.Offsets()
	for off := o.LogStart; off < o.LogEnd; {
		res, err := gc.p.log.Read(off, 4<<20, o.LogEnd)
		if err != nil {
			return api.Errorf(api.CodeCoordinatorLoading, "%s: reading the group log at %d: %v", gc.p, off, err)
		}
		next := res.NextOffset
		raw, err := res.ReadAll()
		if err != nil {
			return err
		}
		if len(raw) == 0 {
			break
		}
		if _, err := api.ScanBatches(raw, false, func(h api.BatchHeader, b []byte) error {
			_, recs, err := api.DecodeBatch(b)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if err := st.Apply(offsets.Record{Key: r.Key, Value: r.Value}, start); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return api.Errorf(api.CodeCoordinatorLoading, "%s: replaying the group log: %v", gc.p, err)
		}
		if next <= off {
			break
		}
		off = next
	}
	gc.st, gc.epoch = st, epoch
	gc.loadMs = time.Since(start).Milliseconds()
	gc.p.deps.log.Info("group coordinator loaded", "partition", gc.p.String(), "epoch", epoch, "groups", len(st.Groups()), "records_to", o.LogEnd, "ms", gc.loadMs)
	return nil
}

// appendLocked writes records as one batch, acks=all, in the loaded epoch.
func (gc *groupCoordinator) appendLocked(ctx context.Context, recs []offsets.Record) error {
	rs := make([]api.Record, len(recs))
	for i, r := range recs {
		rs[i] = api.Record{Key: r.Key, Value: r.Value}
	}
	batch, err := api.EncodeBatch(nil, rs, api.BatchOptions{})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := gc.p.Produce(wctx, batch, AcksAll, gc.epoch); err != nil {
		if errors.Is(err, api.ErrNotLeader) || errors.Is(err, api.ErrFencedLeaderEpoch) || errors.Is(err, &api.Error{Code: api.CodeUnknownLeaderEpoch}) {
			return api.Errorf(api.CodeNotCoordinator, "%s: no longer the leader: %v", gc.p, err)
		}
		return fmt.Errorf("%s: writing group records: %w", gc.p, err)
	}
	return nil
}

// drop forgets the state (leadership ended).
func (gc *groupCoordinator) drop() {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	gc.st = nil
}

// loaded reports whether a state is held.
func (gc *groupCoordinator) loaded() bool {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.st != nil
}
