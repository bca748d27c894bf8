package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/offsets"
	"github.com/sluice-io/sluice/recordbatch"
)

// groupCoordinator hosts the consumer groups of one __consumer_offsets
// partition while this broker leads it. Operations are serialized: each runs
// on the state, its records are appended to the partition in the leader
// epoch the state was loaded in and applied at once, and the lock is
// released; the answer waits (outside the lock) until the HW has passed
// every record applied so far, so no answer ever shows state that is not
// on the ISR, and concurrent commits wait for replication together.
//
// The leader epoch is the fence: a deposed coordinator's appends are
// refused or never reach the ISR, so it can change nothing, whatever it
// still believes. A new leadership replays the log before serving.
type groupCoordinator struct {
	p         *Partition
	maxGroups int // max.groups.per.coordinator

	mu      sync.Mutex // serializes operations; guards the fields below
	st      *offsets.State
	epoch   int32 // the leader epoch st was loaded in; meaningful while st != nil
	applied int64 // the log end after the last record st holds; answers wait for the HW to reach it
}

// op is one group operation on the state: the records to append, or an error.
type op func(st *offsets.State, now time.Time) ([]offsets.Record, error)

// run loads the state if this broker leads the partition and has not loaded
// it in the current epoch, runs f, appends its records and applies them.
// after, when set, reads the result from the state once they are applied
// (under the same lock). run returns once the HW covers everything applied.
func (gc *groupCoordinator) run(ctx context.Context, f op, after func(st *offsets.State) error) error {
	wrote, end, epoch, err := gc.runLocked(f, after)
	if err != nil {
		return err
	}
	return gc.waitReplicated(ctx, wrote, end, epoch)
}

func (gc *groupCoordinator) runLocked(f op, after func(st *offsets.State) error) (wrote bool, end int64, epoch int32, err error) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	epoch, _, leading := gc.p.leaderState()
	if !leading {
		gc.st = nil
		return false, 0, 0, api.Errorf(api.CodeNotCoordinator, "broker %d does not lead %s", gc.p.deps.self, gc.p)
	}
	if gc.st == nil || gc.epoch != epoch {
		if err := gc.loadLocked(epoch); err != nil {
			return false, 0, 0, err
		}
	}
	now := time.Now()
	recs, err := f(gc.st, now)
	if err != nil {
		return false, 0, 0, err
	}
	if len(recs) > 0 {
		next, err := gc.appendLocked(recs)
		if err != nil {
			gc.st = nil // replay before the next operation, whatever the log holds
			return false, 0, 0, err
		}
		gc.applied = next
		for _, r := range recs {
			if err := gc.st.Apply(r, now); err != nil {
				gc.st = nil
				return false, 0, 0, err
			}
		}
	}
	if after != nil {
		if err := after(gc.st); err != nil {
			return false, 0, 0, err
		}
	}
	return len(recs) > 0, gc.applied, gc.epoch, nil
}

// waitReplicated waits until the HW reaches end. A write is acks=all: it
// also fails when the ISR is below min.insync.replicas. An answer whose
// records may or may not be committed (the leadership moved) is
// NOT_COORDINATOR: retried elsewhere, it finds the outcome in the log.
func (gc *groupCoordinator) waitReplicated(ctx context.Context, write bool, end int64, epoch int32) error {
	if !write && gc.p.log.Offsets().HighWatermark >= end {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := gc.p.waitCommitted(wctx, epoch, end)
	if err != nil && errors.Is(err, api.ErrRequestTimedOut) {
		if _, _, leading := gc.p.leaderState(); !leading {
			return api.Errorf(api.CodeNotCoordinator, "%s: leadership moved before the group change was replicated: %v", gc.p, err)
		}
	}
	return err
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
	st.SetMaxGroups(gc.maxGroups)
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
		if len(raw) == 0 || next <= off {
			// A replay that stops short would serve a state missing
			// commits: refuse to serve instead, and try again later.
			return api.Errorf(api.CodeCoordinatorLoading, "%s: the group log reads nothing at %d, below its end %d", gc.p, off, o.LogEnd)
		}
		if _, err := recordbatch.Scan(raw, false, func(h recordbatch.Header, b []byte) error {
			_, recs, err := recordbatch.Decode(b)
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
		off = next
	}
	gc.st, gc.epoch, gc.applied = st, epoch, o.LogEnd
	gc.p.deps.log.Info("group coordinator loaded", "partition", gc.p.String(), "epoch", epoch, "groups", len(st.Groups()), "records_to", o.LogEnd, "ms", time.Since(start).Milliseconds())
	return nil
}

// appendLocked writes records as one batch to the leader's log in the
// loaded epoch, and returns the log end after it. The wait for the ISR
// comes later, outside the lock.
func (gc *groupCoordinator) appendLocked(recs []offsets.Record) (int64, error) {
	rs := make([]recordbatch.Record, len(recs))
	for i, r := range recs {
		rs[i] = recordbatch.Record{Key: r.Key, Value: r.Value}
	}
	batch, err := recordbatch.Encode(nil, rs, recordbatch.Options{})
	if err != nil {
		return 0, err
	}
	res, _, err := gc.p.appendAsLeader(batch, AcksAll, gc.epoch)
	if err != nil {
		if errors.Is(err, api.ErrNotLeader) || errors.Is(err, api.ErrFencedLeaderEpoch) || errors.Is(err, &api.Error{Code: api.CodeUnknownLeaderEpoch}) {
			return 0, api.Errorf(api.CodeNotCoordinator, "%s: no longer the leader: %v", gc.p, err)
		}
		return 0, fmt.Errorf("%s: writing group records: %w", gc.p, err)
	}
	return res.LastOffset + 1, nil
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
