package commitlog

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"sort"
	"time"
)

// The cleaner checkpoint, file "cleaner-checkpoint", is JSON written
// atomically at the end of every clean:
//
//	{"cleaned_to": N, "passes": [{"to": N, "at": ms, "tombstones": k, "pending": j}, ...]}
//
// cleaned_to is the end of what the cleaner has covered at least once:
// the bytes of closed segments above it are the "dirty" part of the log that
// the trigger weighs against the whole.
//
// passes remembers when each offset range was first cleaned, which is what
// delete.retention.ms counts from: an offset below passes[i].to and at or
// above passes[i-1].to was first covered by a clean at passes[i].at. Only
// ranges that still hold tombstones are kept (a range dropped merges into the
// next, later one, which only delays its tombstones), and ranges whose
// tombstones are all due merge into one, so the list stays short. pending
// counts the tombstones that were not yet due at the last clean: once they
// are, a clean is worth running even without new data. (A due tombstone that
// stayed because of min.compaction.lag waits for the next clean new data
// brings, rather than making every interval rewrite the log.)
const cleanerCheckpointFile = "cleaner-checkpoint"

type cleanerCheckpoint struct {
	CleanedTo int64       `json:"cleaned_to"`
	Passes    []cleanPass `json:"passes,omitempty"`
}

type cleanPass struct {
	To         int64 `json:"to"`         // first offset the pass did not cover
	At         int64 `json:"at"`         // when, in ms since the epoch
	Tombstones int64 `json:"tombstones"` // tombstones still in the range
	Pending    int64 `json:"pending"`    // of which not yet due at the last clean
}

// loadCleanerCheckpoint reads the checkpoint; a missing or unreadable one is
// an empty one (the next clean then treats the whole log as dirty and every
// tombstone as not yet cleaned, which only delays their removal).
func (l *Log) loadCleanerCheckpoint() cleanerCheckpoint {
	b, ok, err := ReadFile(l.fs, l.dir, cleanerCheckpointFile)
	if err != nil || !ok {
		return cleanerCheckpoint{}
	}
	var cp cleanerCheckpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		l.opts.Logger.Warn("ignoring an unreadable cleaner checkpoint", "dir", l.dir, "err", err)
		return cleanerCheckpoint{}
	}
	return cp
}

func (l *Log) saveCleanerCheckpoint(cp cleanerCheckpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return WriteFileAtomic(l.fs, l.dir, cleanerCheckpointFile, b)
}

// firstCleaned returns when offset was first covered by a clean, or false
// when no clean has covered it yet.
func (cp cleanerCheckpoint) firstCleaned(offset int64) (time.Time, bool) {
	i := sort.Search(len(cp.Passes), func(i int) bool { return cp.Passes[i].To > offset })
	if i == len(cp.Passes) {
		return time.Time{}, false
	}
	return time.UnixMilli(cp.Passes[i].At), true
}

// tombstonesDue reports whether some range still holds tombstones whose
// delete.retention.ms has run out: then a clean is worth running even with
// no new data.
func (cp cleanerCheckpoint) tombstonesDue(now time.Time, retention time.Duration) bool {
	for _, p := range cp.Passes {
		if p.Pending > 0 && now.Sub(time.UnixMilli(p.At)) >= retention {
			return true
		}
	}
	return false
}

// withPass returns cp extended by a clean that covered everything below
// limit at now: the new range is [CleanedTo, limit).
func (cp cleanerCheckpoint) withPass(limit int64, now time.Time) cleanerCheckpoint {
	out := cleanerCheckpoint{CleanedTo: max(cp.CleanedTo, limit), Passes: append([]cleanPass(nil), cp.Passes...)}
	if limit > cp.CleanedTo {
		out.Passes = append(out.Passes, cleanPass{To: limit, At: now.UnixMilli()})
	}
	return out
}

// passIndex is the index of the range holding offset, or -1.
func (cp cleanerCheckpoint) passIndex(offset int64) int {
	i := sort.Search(len(cp.Passes), func(i int) bool { return cp.Passes[i].To > offset })
	if i == len(cp.Passes) {
		return -1
	}
	return i
}

// compacted drops the ranges below the log start and those without
// tombstones, and merges neighbouring ranges whose tombstones are all due
// (any tombstone in either may go, so one entry says as much as two).
func (cp cleanerCheckpoint) compacted(logStart int64, now time.Time, retention time.Duration) cleanerCheckpoint {
	out := cleanerCheckpoint{CleanedTo: cp.CleanedTo}
	due := func(p cleanPass) bool { return now.Sub(time.UnixMilli(p.At)) >= retention }
	for _, p := range cp.Passes {
		if p.To <= logStart || p.Tombstones == 0 {
			continue
		}
		if n := len(out.Passes); n > 0 && due(out.Passes[n-1]) && due(p) {
			prev := out.Passes[n-1]
			out.Passes[n-1] = cleanPass{To: p.To, At: p.At, Tombstones: prev.Tombstones + p.Tombstones, Pending: prev.Pending + p.Pending}
			continue
		}
		out.Passes = append(out.Passes, p)
	}
	return out
}

// clampCleanerLocked makes the checkpoint forget everything at or above end,
// after a truncation: offsets there will be written anew, so they are dirty
// and none of their tombstones has been cleaned yet.
func (l *Log) clampCleanerLocked(end int64) error {
	cp := l.loadCleanerCheckpoint()
	if cp.CleanedTo <= end {
		return nil
	}
	out := cleanerCheckpoint{CleanedTo: end}
	for _, p := range cp.Passes {
		if p.To >= end {
			p.To = end
			out.Passes = append(out.Passes, p)
			break
		}
		out.Passes = append(out.Passes, p)
	}
	return l.saveCleanerCheckpoint(out)
}

// removeCleanerCheckpointLocked forgets every clean (the log restarted
// elsewhere).
func (l *Log) removeCleanerCheckpointLocked() error {
	if err := l.fs.Remove(path.Join(l.dir, cleanerCheckpointFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
