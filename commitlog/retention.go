package commitlog

import (
	"fmt"
	"math"

	"github.com/sluice-io/sluice/api"
)

// ApplyRetention deletes closed segments that retention no longer keeps, oldest
// first: those whose newest record is older than RetentionAge, then while the
// log is larger than RetentionBytes. It never deletes the active segment nor a
// segment holding offsets at or above the HW (uncommitted data is not retention's
// to drop). It returns how many segments it deleted.
func (l *Log) ApplyRetention() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	now := l.opts.Now().UnixMilli()
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	n := 0
	for len(l.segments)-n > 1 {
		s := l.segments[n]
		if s.next > l.hw {
			break
		}
		byAge := l.opts.RetentionAge > 0 && s.maxTS >= 0 && now-s.maxTS > l.opts.RetentionAge.Milliseconds()
		bySize := l.opts.RetentionBytes >= 0 && total-s.size >= l.opts.RetentionBytes
		if !byAge && !bySize {
			break
		}
		total -= s.size
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, l.deleteOldestLocked(n)
}

// DeleteSegmentsBelow deletes the closed segments that end at or below offset,
// for callers (tiered storage) that keep those offsets elsewhere.
func (l *Log) DeleteSegmentsBelow(offset int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	n := 0
	for len(l.segments)-n > 1 && l.segments[n].next <= offset && l.segments[n].next <= l.hw {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, l.deleteOldestLocked(n)
}

// deleteOldestLocked drops the first n segments: they leave the segment list
// first (so no new reader finds them), then their files go. Readers that
// already opened a descriptor keep reading the unlinked file.
func (l *Log) deleteOldestLocked(n int) error {
	doomed := append([]*segment(nil), l.segments[:n]...)
	l.segments = append(l.segments[:0:0], l.segments[n:]...)
	if l.epochs.truncateBefore(l.startLocked()) {
		if err := l.saveEpochsLocked(); err != nil {
			return l.failLocked(err)
		}
	}
	for _, s := range doomed {
		if err := s.remove(l.fs); err != nil {
			return fmt.Errorf("%w: deleting segment %d: %v", api.ErrStorage, s.base, err)
		}
	}
	// The snapshot at the new start stays: it holds the producers of the
	// segments just deleted.
	if err := l.removeProducerSnapshotsLocked(l.startLocked(), math.MaxInt64); err != nil {
		return fmt.Errorf("%w: deleting producer snapshots: %v", api.ErrStorage, err)
	}
	l.notifyLocked(AnyMoves)
	return nil
}
