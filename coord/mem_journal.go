package coord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"strconv"
)

// A persisted MemStore is two files: the snapshot (Path, written whole and
// replaced atomically) and its journal (Path + ".journal"), to which each
// mutation appends one entry, fsynced before the mutation returns, holding
// the new state of every node it changed. So a write costs the size of what
// it changed, not of the tree: issuing n producer ids costs O(n), where
// rewriting the tree at every write cost O(n²). When the journal outgrows
// the snapshot (and MemOptions.CompactBytes), a new snapshot is written and the journal
// emptied, which keeps the amortized cost per write constant.
//
// Crash safety: an entry is a line "<crc32c hex> <json>\n"; a torn last
// line (a crash mid-append) fails its checksum and is cut off at load, a bad
// line before a good one is corruption and fails the load. Entries carry a
// sequence number and the snapshot the number of the last entry it holds,
// so a crash between writing a snapshot and emptying the journal replays
// nothing twice.

// memDisk is the persisted store's file state; MemStore.mu guards it.
type memDisk struct {
	path         string // the snapshot; the journal is path + ".journal"
	seq          int64  // the last journal entry written (or in the snapshot)
	snapshotSize int64
	journalSize  int64
	compactBytes int64 // MemOptions.CompactBytes
}

// defaultCompactBytes is MemOptions.CompactBytes's default.
const defaultCompactBytes = 1 << 20

// journalEntry is one mutation's changes.
type journalEntry struct {
	Seq     int64         `json:"seq"`
	Set     []memFileNode `json:"set,omitempty"`     // nodes created or changed, whole
	Deleted []string      `json:"deleted,omitempty"` // paths deleted
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func (d *memDisk) journalPath() string { return d.path + ".journal" }

// replay applies the journal's entries after the snapshot to flat, and cuts
// off a torn last entry.
func (d *memDisk) replay(flat map[string]memFileNode) error {
	raw, err := os.ReadFile(d.journalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("coord: load %s: %w", d.journalPath(), err)
	}
	good := 0 // bytes of whole, valid entries
	for rest := raw; len(rest) > 0; {
		line, tail, whole := bytes.Cut(rest, []byte("\n"))
		e, ok := parseEntry(line)
		if !ok || !whole {
			if len(bytes.TrimSpace(tail)) > 0 {
				return fmt.Errorf("coord: load %s: entry at byte %d is damaged and entries follow it", d.journalPath(), good)
			}
			// A torn last entry: its mutation never returned.
			if err := os.Truncate(d.journalPath(), int64(good)); err != nil {
				return fmt.Errorf("coord: load %s: cutting a torn entry: %w", d.journalPath(), err)
			}
			break
		}
		good += len(line) + 1
		rest = tail
		if e.Seq <= d.seq {
			continue // already in the snapshot
		}
		if e.Seq != d.seq+1 {
			return fmt.Errorf("coord: load %s: entry %d follows %d", d.journalPath(), e.Seq, d.seq)
		}
		for _, fn := range e.Set {
			if err := ValidatePath(fn.Path); err != nil {
				return fmt.Errorf("coord: load %s: entry %d: %w", d.journalPath(), e.Seq, err)
			}
			flat[fn.Path] = fn
		}
		for _, p := range e.Deleted {
			if p != "/" {
				delete(flat, p)
			}
		}
		d.seq = e.Seq
	}
	d.journalSize = int64(good)
	return nil
}

func parseEntry(line []byte) (journalEntry, bool) {
	var e journalEntry
	sum, body, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(sum) != 8 {
		return e, false
	}
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if err != nil || crc32.Checksum(body, crcTable) != uint32(want) {
		return e, false
	}
	return e, json.Unmarshal(body, &e) == nil
}

// persistLocked appends the nodes the events name, in their state now, to
// the journal and fsyncs it; an error means the mutation may not be on disk
// and must be taken back. A journal past the snapshot's size is then
// compacted; a failed compaction leaves the mutation durable but makes the
// store read-only. Callers hold m.mu.
func (m *MemStore) persistLocked(events []memChange) error {
	d := m.disk
	if d == nil {
		return nil
	}
	e := journalEntry{Seq: d.seq + 1}
	seen := make(map[string]bool, len(events))
	for _, ev := range events {
		if seen[ev.path] {
			continue
		}
		seen[ev.path] = true
		switch n := m.nodes[ev.path]; {
		case n == nil:
			e.Deleted = append(e.Deleted, ev.path)
		case n.owner == 0:
			e.Set = append(e.Set, fileNode(ev.path, n))
		}
	}
	body, err := json.Marshal(&e)
	if err != nil {
		return fmt.Errorf("coord: persist %s: %w", d.journalPath(), err)
	}
	line := make([]byte, 0, len(body)+10)
	line = fmt.Appendf(line, "%08x ", crc32.Checksum(body, crcTable))
	line = append(append(line, body...), '\n')
	if err := appendSync(d.journalPath(), line); err != nil {
		return fmt.Errorf("coord: persist %s: %w", d.journalPath(), err)
	}
	d.seq, d.journalSize = e.Seq, d.journalSize+int64(len(line))
	if d.journalSize > max(d.compactBytes, d.snapshotSize) {
		if err := m.compactLocked(); err != nil {
			m.writeErr = fmt.Errorf("coord: compacting %s: %w", d.journalPath(), err)
		}
	}
	return nil
}

// compactLocked writes a snapshot of the tree as of the last entry, then
// empties the journal.
func (m *MemStore) compactLocked() error {
	d := m.disk
	size, err := m.snapshotLocked(d.seq)
	if err != nil {
		return err
	}
	d.snapshotSize = int64(size)
	f, err := os.OpenFile(d.journalPath(), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d.journalSize = 0
	return nil
}

// appendSync appends b to the file at path (created if missing, and then
// its directory fsynced) and fsyncs it. The file is opened for each append,
// so a store whose directory is gone fails its next write.
func appendSync(path string, b []byte) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // the sync error is the one to report
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		return syncDir(path)
	}
	return nil
}
