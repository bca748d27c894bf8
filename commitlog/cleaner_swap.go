package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// How cleaned segments replace the old ones, so that a crash at any point
// leaves the log either wholly as it was or wholly cleaned:
//
//  1. The cleaner removes any ".cleaned" file an earlier failed clean left,
//     then writes "<name>.cleaned" for the .log, .index and .timeindex of
//     every segment that loses records, and fsyncs them (without the log's
//     lock).
//  2. Under the lock, once it has checked the segments are still the ones it
//     read: every index's ".cleaned" becomes ".swap", then every log's; the
//     directory is synced. The clean is committed once no ".log.cleaned" is
//     left and some ".log.swap" exists.
//  3. Every index's ".swap" is renamed over the old index, the directory is
//     synced, then every ".log.swap" over its old log (the segment in memory
//     is replaced at the same moment), and the directory is synced.
//
// Open (finishCleanSwaps) looks at what a crash left. Committed (".log.swap"
// files and no ".log.cleaned"): it completes every segment whose ".log"
// still exists, renaming what is left of step 3, and deletes an old index
// whose replacement is already gone, so it is rebuilt from the log (a
// ".log.swap" whose ".log" is gone belongs to a segment that retention
// deleted after the commit — it keeps running on a log made read-only by a
// failed swap — and goes too). Not committed: every ".swap" goes. Then every
// ".cleaned" goes.
const (
	cleanedSuffix = ".cleaned"
	swapSuffix    = ".swap"
)

var segmentSuffixes = []string{logSuffix, indexSuffix, timeIndexSuffix}

// createCleanedSegment creates, truncating any leftover, the ".cleaned" files
// of the segment at base. Its log's descriptors come from pool like the
// log's own, and follow the file when the swap renames it.
func createCleanedSegment(fsys FS, pool *FilePool, dir string, base int64) (*segment, error) {
	return createSegment(fsys, pool, dir, base, cleanedSuffix, true)
}

// removeCleaned closes and deletes the ".cleaned" files of segments that
// will not be swapped in. Failures are left to the next Open.
func removeCleaned(fsys FS, outs []cleanedSegment) {
	for _, o := range outs {
		o.seg.close() // the files are removed next
		for _, suf := range segmentSuffixes {
			_ = fsys.Remove(segmentName(o.seg.dir, o.seg.base, suf) + cleanedSuffix)
		}
	}
}

// commitClean swaps the cleaned segments in and writes the cleaner
// checkpoint, under the log's lock. The segments must still be in the log,
// closed, as the clean found them; otherwise nothing is swapped and the
// result is ErrCleanRaced.
func (l *Log) commitClean(p *cleanPlan, outs []cleanedSegment, cp cleanerCheckpoint) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.writableLocked()
	if err == nil && !p.unchangedLocked() {
		err = ErrCleanRaced
	}
	if err != nil {
		removeCleaned(l.fs, outs)
		return err
	}
	if len(outs) > 0 {
		if err := l.swapLocked(outs); err != nil {
			return err
		}
	}
	// The checkpoint only steers the next clean; a failure to write it costs
	// work later (and keeps tombstones longer), not data.
	if err := l.saveCleanerCheckpoint(cp); err != nil {
		return fmt.Errorf("%w: writing the cleaner checkpoint: %v", api.ErrStorage, err)
	}
	return nil
}

// swapLocked runs steps 2 and 3 of the protocol.
func (l *Log) swapLocked(outs []cleanedSegment) error {
	idx := make([]int, len(outs))
	for j, o := range outs {
		idx[j] = l.indexOfLocked(o.old)
	}

	// Step 2, up to the commit point. A failure here leaves the old files in
	// force.
	rename := func(o cleanedSegment, suf, from, to string) error {
		name := segmentName(o.seg.dir, o.seg.base, suf)
		return l.fs.Rename(name+from, name+to)
	}
	step2 := func() error {
		for _, suf := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
			for _, o := range outs {
				if err := rename(o, suf, cleanedSuffix, swapSuffix); err != nil {
					return err
				}
			}
			if suf == indexSuffix {
				continue // both indexes, then one sync, then the logs
			}
			if err := l.fs.SyncDir(l.dir); err != nil {
				return err
			}
		}
		return nil
	}
	if err := step2(); err != nil {
		// Undo: the ".swap" files first, so that should one stay, so do the
		// ".cleaned" ones, which tell the next Open not to complete it. A
		// log that could not undo turns read-only: nothing may change its
		// segments until that Open.
		undone := true
		for _, o := range outs {
			o.seg.close() // the files are removed next
			for _, suf := range segmentSuffixes {
				rerr := l.fs.Remove(segmentName(o.seg.dir, o.seg.base, suf) + swapSuffix)
				undone = undone && (rerr == nil || errors.Is(rerr, os.ErrNotExist))
			}
		}
		if !undone {
			return l.failLocked(err)
		}
		removeCleaned(l.fs, outs)
		return fmt.Errorf("%w: swapping in cleaned segments: %v", api.ErrStorage, err)
	}

	// Step 3. From here a failure makes the log read-only: the files on disk
	// are past the commit point, and the next Open finishes the swap.
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		for _, o := range outs {
			if err := rename(o, suf, swapSuffix, ""); err != nil {
				return l.failLocked(err)
			}
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.failLocked(err)
	}
	for j, o := range outs {
		if err := rename(o, logSuffix, swapSuffix, ""); err != nil {
			return l.failLocked(err)
		}
		// The name now holds the new bytes: the log must locate batches in
		// them from this moment. Readers that already leased a descriptor
		// of the old file keep it; its idle descriptors close.
		o.seg.suffix = ""
		o.seg.file.rename(segmentName(o.seg.dir, o.seg.base, logSuffix))
		o.seg.rollAt = o.old.rollAt
		l.segments[idx[j]] = o.seg
		o.old.close()
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.failLocked(err)
	}
	l.notifyLocked(AnyMoves)
	return nil
}

// indexOfLocked returns where s is in the segment list, or -1.
func (l *Log) indexOfLocked(s *segment) int {
	i := l.segmentIndexLocked(s.base)
	if i < 0 || l.segments[i] != s {
		return -1
	}
	return i
}

// finishCleanSwaps brings the directory to a state without leftovers of a
// clean, before Open reads it (see the protocol above).
func (l *Log) finishCleanSwaps() error {
	ents, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	committed, cleanedLogs := false, false
	for _, e := range ents {
		names[e.Name()] = true
		committed = committed || strings.HasSuffix(e.Name(), logSuffix+swapSuffix)
		cleanedLogs = cleanedLogs || strings.HasSuffix(e.Name(), logSuffix+cleanedSuffix)
	}
	committed = committed && !cleanedLogs
	changed := false
	remove := func(name string) error {
		changed = true
		if err := l.fs.Remove(path.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	rename := func(from, to string) error {
		changed = true
		return l.fs.Rename(path.Join(l.dir, from), path.Join(l.dir, to))
	}
	if committed {
		for _, e := range ents {
			logName, ok := strings.CutSuffix(e.Name(), logSuffix+swapSuffix)
			if !ok {
				continue
			}
			final := logName + logSuffix
			if _, ok := parseSegmentName(final); !ok {
				continue
			}
			if !names[final] {
				l.opts.Logger.Warn("dropping a cleaned segment whose segment was deleted", "dir", l.dir, "segment", final)
				if err := remove(final + swapSuffix); err != nil {
					return err
				}
				continue
			}
			for _, suf := range []string{indexSuffix, timeIndexSuffix} {
				if names[logName+suf+swapSuffix] {
					if err := rename(logName+suf+swapSuffix, logName+suf); err != nil {
						return err
					}
					names[logName+suf+swapSuffix] = false
					continue
				}
				// Renamed already, or lost: either way it is rebuilt.
				if err := remove(logName + suf); err != nil {
					return err
				}
			}
			if err := rename(final+swapSuffix, final); err != nil {
				return err
			}
			l.opts.Logger.Info("finished swapping in a cleaned segment", "dir", l.dir, "segment", final)
		}
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, cleanedSuffix) || (strings.HasSuffix(name, swapSuffix) && names[name] && !committed) ||
			(committed && names[name] && (strings.HasSuffix(name, indexSuffix+swapSuffix) || strings.HasSuffix(name, timeIndexSuffix+swapSuffix))) {
			if err := remove(name); err != nil {
				return err
			}
		}
	}
	if changed {
		return l.fs.SyncDir(l.dir)
	}
	return nil
}

// removeStaleCleaned deletes the ".cleaned" files an earlier clean failed to
// remove, so that those in the directory during a swap are all this clean's.
// (".swap" files are never stale in a writable log: a clean that cannot
// undo its step 2, or fails in step 3, makes the log read-only, and Clean
// does not run on a read-only log.)
func (l *Log) removeStaleCleaned() error {
	ents, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), cleanedSuffix) {
			if err := l.fs.Remove(path.Join(l.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
