package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// load opens every segment in the directory and brings the log to a consistent
// state. After a clean Close (the marker file is present) indexes are trusted
// once they pass validation. After a crash the active segment is re-read batch
// by batch with CRC checks and cut at the first torn or corrupt batch; closed
// segments were fsynced when they were rolled, so only their indexes are
// checked (and rebuilt when they do not match the log).
func (l *Log) load() error {
	if err := l.finishCleanSwaps(); err != nil {
		return fmt.Errorf("%w: finishing an interrupted clean in %s: %v", api.ErrStorage, l.dir, err)
	}
	ents, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("%w: listing %s: %v", api.ErrStorage, l.dir, err)
	}
	var bases []int64
	clean := false
	logs := map[int64]bool{}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			_ = l.fs.Remove(path.Join(l.dir, name)) // a checkpoint write that never finished
		case name == cleanMarkerFile:
			clean = true
		default:
			if base, ok := parseSegmentName(name); ok {
				bases = append(bases, base)
				logs[base] = true
			}
		}
	}
	// Indexes whose log is gone (a crash between deleting a segment's files).
	for _, e := range ents {
		for _, suf := range []string{indexSuffix, timeIndexSuffix} {
			if base, ok := parseSegmentName(strings.TrimSuffix(e.Name(), suf) + logSuffix); ok && strings.HasSuffix(e.Name(), suf) && !logs[base] {
				_ = l.fs.Remove(path.Join(l.dir, e.Name()))
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	l.listProducerSnapshots(names)

	if b, ok, err := ReadFile(l.fs, l.dir, epochFile); err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	} else if ok {
		if entries, derr := decodeEpochs(b); derr == nil {
			l.epochs.entries = entries
		} else {
			l.opts.Logger.Warn("ignoring unreadable leader epoch checkpoint", "dir", l.dir, "err", derr)
		}
	}

	if len(bases) == 0 {
		seg, err := createSegment(l.fs, l.files, l.dir, 0, "", false)
		if err != nil {
			return fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
		l.segments = []*segment{seg}
	}
	for i, base := range bases {
		seg := newSegment(l.fs, l.files, l.dir, base, "")
		l.segments = append(l.segments, seg)
		// Age-based rolling counts from when this process first saw the
		// segment: a restart must not roll every reopened segment at once.
		seg.rollAt = l.opts.Now()
		if err := l.loadSegment(seg, i == len(bases)-1, clean); err != nil {
			return err
		}
	}
	// Segments must chain: each starts where the previous ended. A gap means a
	// closed segment lost its tail; what follows it cannot be trusted to be in
	// order, so it goes, as Kafka does.
	for i := 1; i < len(l.segments); i++ {
		if l.segments[i].base != l.segments[i-1].next {
			l.opts.Logger.Error("segments do not chain; dropping the rest", "dir", l.dir,
				"segment", l.segments[i-1].base, "ends", l.segments[i-1].next, "next_base", l.segments[i].base)
			for _, s := range l.segments[i:] {
				if err := s.remove(l.fs); err != nil {
					return fmt.Errorf("%w: %v", api.ErrStorage, err)
				}
			}
			l.segments = l.segments[:i]
			break
		}
	}

	leo := l.endLocked()
	changed := l.epochs.truncateFrom(leo)
	changed = l.epochs.truncateBefore(l.startLocked()) || changed
	if changed || !clean {
		if err := l.saveEpochsLocked(); err != nil {
			return fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
	}
	if err := l.rebuildProducersLocked(); err != nil {
		return fmt.Errorf("%w: producer state: %v", api.ErrStorage, err)
	}
	hw, ok, err := readInt64File(l.fs, l.dir, hwFile)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	if !ok {
		hw = 0
	}
	l.hw = min(max(hw, l.startLocked()), leo)
	l.hwSaved = hw

	if clean {
		// From here on a crash must trigger recovery again.
		if err := l.fs.Remove(path.Join(l.dir, cleanMarkerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
	}
	return nil
}

// loadSegment brings one segment's in-memory state back at Open: the
// active one after a crash by recovery, every other from its indexes
// (or by recovery when they do not match the log).
func (l *Log) loadSegment(seg *segment, active, clean bool) error {
	ls, err := seg.use()
	if err != nil {
		return fmt.Errorf("%w: opening segment %d: %v", api.ErrStorage, seg.base, err)
	}
	defer ls.release()
	fi, err := ls.f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	if !active || clean {
		if err := seg.loadIndexes(ls.f, fi.Size(), l.opts.IndexIntervalBytes); err != nil {
			return fmt.Errorf("%w: loading segment %d: %v", api.ErrStorage, seg.base, err)
		}
	} else {
		truncated, err := seg.recover(fi.Size(), l.opts.IndexIntervalBytes, func(h recordbatch.Header) {
			l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset)
		})
		if err != nil {
			return fmt.Errorf("%w: recovering segment %d: %v", api.ErrStorage, seg.base, err)
		}
		if truncated {
			l.opts.Logger.Warn("truncated a torn tail after an unclean shutdown",
				"dir", l.dir, "segment", seg.base, "kept_bytes", seg.size, "file_bytes", fi.Size())
		}
	}
	// A recovery that cut the log is fsynced now, rather than pin the
	// writer's descriptor until the segment's next fsync.
	if err := seg.syncLog(); err != nil {
		return fmt.Errorf("%w: recovering segment %d: %v", api.ErrStorage, seg.base, err)
	}
	return nil
}
