package commitlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// Producer snapshots: file "%020d.producers" holds, as JSON, the producer
// table as of that offset (every batch below it is in it, none at or above).
// One is written at each roll, at the new segment's base, so every segment
// start has the table as of that start: when retention or tiering deletes the
// segments below it, the table of the producers they held survives, and the
// snapshot at the first segment's base is what a follower that starts over at
// this log's start needs (see ProducerSnapshotAt and ResetTo; Kafka keeps a
// snapshot per segment for the same reasons). Snapshots below the log start
// go with the segments; those above the log end go with a truncation.
//
// Before per-offset snapshots a log kept one file, "producer-snapshot", with
// the offset inside; it is renamed to the new form when the log opens.
const (
	producerSnapshotSuffix = ".producers"
	legacyProducerSnapshot = "producer-snapshot"
)

// ErrNoProducerSnapshot is returned by ProducerSnapshotAt when no snapshot
// exists at the offset asked for.
var ErrNoProducerSnapshot = errors.New("commitlog: no producer snapshot at that offset")

type producerSnapshot struct {
	Offset    int64                   `json:"offset"`
	Producers map[int64]snapshotEntry `json:"producers"`
}

type snapshotEntry struct {
	Epoch         int16           `json:"epoch"`
	Batches       []snapshotBatch `json:"batches"`
	LastTimestamp int64           `json:"last_timestamp,omitempty"`
}

type snapshotBatch struct {
	FirstSeq    int32 `json:"first_seq"`
	LastSeq     int32 `json:"last_seq"`
	FirstOffset int64 `json:"first_offset"`
	LastOffset  int64 `json:"last_offset"`
}

func (s producerSnapshot) state() producerState {
	ps := producerState{producers: map[int64]*producerEntry{}}
	for id, e := range s.Producers {
		pe := &producerEntry{epoch: e.Epoch, lastTimestamp: e.LastTimestamp}
		for _, b := range e.Batches {
			pe.batches = append(pe.batches, producerBatch{b.FirstSeq, b.LastSeq, b.FirstOffset, b.LastOffset})
		}
		ps.producers[id] = pe
	}
	return ps
}

// validate refuses a snapshot that could not have come from a log: it is
// outside input when a follower receives it from its leader.
func (s producerSnapshot) validate() error {
	if s.Offset < 0 {
		return fmt.Errorf("producer snapshot offset %d", s.Offset)
	}
	for id, e := range s.Producers {
		if id < 0 || len(e.Batches) == 0 || len(e.Batches) > producerBatches {
			return fmt.Errorf("producer snapshot: producer %d has %d batches", id, len(e.Batches))
		}
		for _, b := range e.Batches {
			if b.LastSeq < b.FirstSeq || b.LastOffset < b.FirstOffset || b.FirstOffset < 0 || b.LastOffset >= s.Offset {
				return fmt.Errorf("producer snapshot: producer %d has a batch %+v not below %d", id, b, s.Offset)
			}
		}
	}
	return nil
}

func snapshotOf(ps producerState, offset int64) producerSnapshot {
	snap := producerSnapshot{Offset: offset, Producers: map[int64]snapshotEntry{}}
	for id, e := range ps.producers {
		se := snapshotEntry{Epoch: e.epoch, LastTimestamp: e.lastTimestamp}
		for _, b := range e.batches {
			se.Batches = append(se.Batches, snapshotBatch{b.firstSeq, b.lastSeq, b.firstOffset, b.lastOffset})
		}
		snap.Producers[id] = se
	}
	return snap
}

func producerSnapshotName(offset int64) string {
	return fmt.Sprintf("%020d%s", offset, producerSnapshotSuffix)
}

func parseProducerSnapshotName(name string) (int64, bool) {
	if !strings.HasSuffix(name, producerSnapshotSuffix) || len(name) != 20+len(producerSnapshotSuffix) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(name, producerSnapshotSuffix), 10, 64)
	return n, err == nil && n >= 0
}

// saveProducerSnapshotLocked writes the table as of the log end.
func (l *Log) saveProducerSnapshotLocked() error {
	return l.writeProducerSnapshotLocked(snapshotOf(l.producers, l.endLocked()))
}

func (l *Log) writeProducerSnapshotLocked(snap producerSnapshot) error {
	data, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	if err = WriteFileAtomic(l.fs, l.dir, producerSnapshotName(snap.Offset), data); err != nil {
		return err
	}
	if i, found := slices.BinarySearch(l.snapshots, snap.Offset); !found {
		l.snapshots = slices.Insert(l.snapshots, i, snap.Offset)
	}
	// Keep one snapshot per segment base and the newest: those a close
	// left inside the active segment are superseded by this one.
	base := l.activeLocked().base
	l.snapshots = slices.DeleteFunc(l.snapshots, func(o int64) bool {
		if o <= base || o >= snap.Offset {
			return false
		}
		if rerr := l.fs.Remove(path.Join(l.dir, producerSnapshotName(o))); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return true
	})
	return err
}

func (l *Log) readProducerSnapshotLocked(offset int64) (producerSnapshot, bool) {
	b, ok, err := ReadFile(l.fs, l.dir, producerSnapshotName(offset))
	if err != nil || !ok {
		return producerSnapshot{}, false
	}
	var snap producerSnapshot
	if err := json.Unmarshal(b, &snap); err != nil || snap.Offset != offset || snap.validate() != nil {
		l.opts.Logger.Warn("ignoring an unreadable producer snapshot", "dir", l.dir, "offset", offset, "err", err)
		return producerSnapshot{}, false
	}
	return snap, true
}

// removeProducerSnapshotsLocked deletes the snapshots below from or above to.
func (l *Log) removeProducerSnapshotsLocked(from, to int64) error {
	kept := l.snapshots[:0]
	var err error
	for _, o := range l.snapshots {
		if o >= from && o <= to {
			kept = append(kept, o)
			continue
		}
		if rerr := l.fs.Remove(path.Join(l.dir, producerSnapshotName(o))); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	l.snapshots = kept
	return err
}

// listProducerSnapshots finds the snapshot files of a directory listing
// (renaming a legacy one) for load.
func (l *Log) listProducerSnapshots(names []string) {
	l.snapshots = nil
	for _, name := range names {
		if o, ok := parseProducerSnapshotName(name); ok {
			l.snapshots = append(l.snapshots, o)
		}
	}
	slices.Sort(l.snapshots)
	if !slices.Contains(names, legacyProducerSnapshot) {
		return
	}
	b, _, err := ReadFile(l.fs, l.dir, legacyProducerSnapshot)
	var snap producerSnapshot
	if err == nil && json.Unmarshal(b, &snap) == nil && snap.validate() == nil {
		if i, found := slices.BinarySearch(l.snapshots, snap.Offset); !found {
			if l.fs.Rename(path.Join(l.dir, legacyProducerSnapshot), path.Join(l.dir, producerSnapshotName(snap.Offset))) == nil {
				l.snapshots = slices.Insert(l.snapshots, i, snap.Offset)
				return
			}
		}
	}
	_ = l.fs.Remove(path.Join(l.dir, legacyProducerSnapshot))
}

// rebuildProducersLocked loads the newest snapshot at or below the log end
// and replays the batch headers from its offset; without one it replays the
// whole local log. Snapshots above the log end are dropped first: they
// describe batches a truncation removed.
func (l *Log) rebuildProducersLocked() error {
	end := l.endLocked()
	if err := l.removeProducerSnapshotsLocked(-1, end); err != nil {
		return err
	}
	l.producers = producerState{}
	from := int64(-1)
	for i := len(l.snapshots) - 1; i >= 0; i-- {
		if snap, ok := l.readProducerSnapshotLocked(l.snapshots[i]); ok {
			l.producers, from = snap.state(), snap.Offset
			break
		}
	}
	for _, seg := range l.segments {
		if seg.next <= from || seg.size == 0 {
			continue
		}
		if err := l.replayProducersLocked(seg, from); err != nil {
			return err
		}
	}
	return nil
}

// replayProducersLocked records the producer batches of seg from offset from.
func (l *Log) replayProducersLocked(seg *segment, from int64) error {
	sl, err := seg.use()
	if err != nil {
		return err
	}
	defer sl.release()
	hr := seg.headers(sl.f)
	defer hr.close()
	for pos := int64(0); pos < seg.size; {
		h, err := hr.at(pos)
		if err != nil {
			return err
		}
		if h.BaseOffset >= from {
			l.producers.record(h)
		}
		pos += int64(h.Size())
	}
	return nil
}

// ProducerSnapshotAt returns the encoded producer table as of offset, which
// must be where a snapshot was taken (a segment's base): a leader serves the
// one at its log start to a follower that starts over there. It returns
// ErrNoProducerSnapshot when there is none.
func (l *Log) ProducerSnapshotAt(offset int64) ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if _, found := slices.BinarySearch(l.snapshots, offset); !found {
		return nil, ErrNoProducerSnapshot
	}
	b, ok, err := ReadFile(l.fs, l.dir, producerSnapshotName(offset))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	if !ok {
		return nil, ErrNoProducerSnapshot
	}
	return b, nil
}

// decodeProducerSnapshot parses a snapshot received from elsewhere, which
// must be as of offset.
func decodeProducerSnapshot(b []byte, offset int64) (producerSnapshot, error) {
	var snap producerSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return snap, fmt.Errorf("%w: producer snapshot: %v", api.ErrCorruptRecord, err)
	}
	if snap.Offset != offset {
		return snap, fmt.Errorf("%w: producer snapshot is as of %d, not %d", api.ErrCorruptRecord, snap.Offset, offset)
	}
	if err := snap.validate(); err != nil {
		return snap, fmt.Errorf("%w: %v", api.ErrCorruptRecord, err)
	}
	return snap, nil
}
