package commitlog

import (
	"fmt"

	"github.com/sluice-io/sluice/api"
)

// TruncateTo cuts the log so that its end is offset: segments starting at or
// after it are deleted and the one holding it is cut at the batch boundary at
// or below offset. A follower does this after asking the leader where its
// epochs diverge (KIP-101). The HW and the epoch lineage follow the cut.
// It returns the new log end, which is below offset when offset fell inside a batch.
func (l *Log) TruncateTo(offset int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return 0, err
	}
	if offset >= l.endLocked() {
		return l.endLocked(), nil
	}
	l.truncs++
	if offset < l.startLocked() {
		offset = l.startLocked()
	}
	// The segment the cut falls in is leased first: a descriptor that
	// cannot be had now fails the truncation before anything changed.
	sl, err := l.segments[max(0, l.segmentIndexLocked(offset-1))].use()
	if err != nil {
		if outOfDescriptors(err) {
			return 0, fmt.Errorf("%w: %w: %s: no file descriptor to truncate with: %v", api.ErrStorage, errNoDescriptors, l.dir, err)
		}
		return 0, l.failLocked(err)
	}
	defer sl.release()
	// Drop whole segments above the cut, keeping at least the first one.
	for len(l.segments) > 1 && l.activeLocked().base >= offset {
		seg := l.activeLocked()
		l.segments = l.segments[:len(l.segments)-1]
		if err := seg.remove(l.fs); err != nil {
			return 0, l.failLocked(err)
		}
	}
	seg := l.activeLocked()
	pos, _, found, err := seg.find(sl.f, offset)
	if err != nil {
		return 0, l.failLocked(err)
	}
	if found {
		// The batch holding offset goes whole: batches are never split, so an
		// offset inside one cuts before it.
		if err := l.cutSegmentLocked(seg, pos); err != nil {
			return 0, l.failLocked(err)
		}
	}
	if err := l.rebuildProducersLocked(); err != nil {
		return 0, l.failLocked(err)
	}
	// A snapshot from above the cut must not come back at the next open.
	if err := l.saveProducerSnapshotLocked(); err != nil {
		return 0, l.failLocked(err)
	}
	end := seg.next
	if l.hw > end {
		l.hw = end
	}
	if err := l.clampCleanerLocked(end); err != nil {
		return 0, l.failLocked(err)
	}
	if l.epochs.truncateFrom(end) {
		if err := l.saveEpochsLocked(); err != nil {
			return 0, l.failLocked(err)
		}
	}
	l.notifyLocked(AnyMoves)
	return end, nil
}

// cutSegmentLocked truncates seg's log at pos and rebuilds its in-memory state.
func (l *Log) cutSegmentLocked(seg *segment, pos int64) error {
	w, err := seg.writer()
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	if err := w.Truncate(pos); err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	if err := seg.syncLog(); err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	_, err = seg.recover(pos, l.opts.IndexIntervalBytes, nil)
	return err
}

// ResetTo empties the log and restarts it at offset: every segment goes and a
// new empty one starts there. A follower does this when its whole log lies
// below the leader's log start (retention ran while it was away), since no
// truncation can make the two agree. producers, when not nil, is the
// leader's producer snapshot as of offset (ProducerSnapshotAt): the table of
// the producers whose batches lie below the new start, without which a retry
// of one of them would be written again should this log lead. A snapshot
// that does not parse or is not as of offset is refused (ErrCorruptRecord)
// before anything changes.
func (l *Log) ResetTo(offset int64, producers []byte) error {
	var snap *producerSnapshot
	if producers != nil {
		s, err := decodeProducerSnapshot(producers, offset)
		if err != nil {
			return err
		}
		snap = &s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	l.truncs++
	for _, s := range l.segments {
		if err := s.remove(l.fs); err != nil {
			return l.failLocked(err)
		}
	}
	ns, err := createSegment(l.fs, l.files, l.dir, offset, "", false)
	if err != nil {
		return l.failLocked(err)
	}
	l.segments = []*segment{ns}
	l.hw = offset
	l.epochs.entries = nil
	l.producers = producerState{}
	// Stale snapshots must not come back at the next open.
	if err := l.removeProducerSnapshotsLocked(0, -1); err != nil {
		return l.failLocked(err)
	}
	if snap != nil {
		l.producers = snap.state()
		if err := l.writeProducerSnapshotLocked(*snap); err != nil {
			return l.failLocked(err)
		}
	}
	if err := l.removeCleanerCheckpointLocked(); err != nil {
		return l.failLocked(err)
	}
	if err := l.saveEpochsLocked(); err != nil {
		return l.failLocked(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.failLocked(err)
	}
	l.notifyLocked(AnyMoves)
	return nil
}
