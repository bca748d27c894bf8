package commitlog

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// On disk, an offset index is a flat array of 8-byte entries, big-endian:
//
//	relativeOffset uint32  offset - segment base offset, of a batch's first record
//	position       uint32  byte position of that batch in the segment's .log file
//
// A time index is a flat array of 12-byte entries:
//
//	timestamp      int64   the largest timestamp seen in the segment so far (ms)
//	relativeOffset uint32  first offset of the batch that carried it
//
// Both are sparse (an entry per IndexIntervalBytes of log at most) and strictly
// increasing in both columns. They are derived data: whenever an index does not
// pass validation against its log, it is rebuilt from the log.
const (
	offsetEntrySize = 8
	timeEntrySize   = 12
)

type offsetEntry struct {
	rel uint32
	pos uint32
}

type timeEntry struct {
	ts  int64
	rel uint32
}

// offsetIndex is a segment's sparse offset index: kept whole in memory and
// appended to its file. Its fields are guarded by the owning Log's mutex.
type offsetIndex struct {
	f       File
	entries []offsetEntry
}

// lookup returns the position of the last indexed batch starting at or before rel,
// or 0 when there is none.
func (ix *offsetIndex) lookup(rel uint32) int64 {
	i := sort.Search(len(ix.entries), func(i int) bool { return ix.entries[i].rel > rel })
	if i == 0 {
		return 0
	}
	return int64(ix.entries[i-1].pos)
}

func (ix *offsetIndex) add(rel, pos uint32) error {
	var b [offsetEntrySize]byte
	binary.BigEndian.PutUint32(b[0:], rel)
	binary.BigEndian.PutUint32(b[4:], pos)
	if _, err := ix.f.WriteAt(b[:], int64(len(ix.entries))*offsetEntrySize); err != nil {
		return err
	}
	ix.entries = append(ix.entries, offsetEntry{rel, pos})
	return nil
}

// load reads the index file and checks it against the log's size; ok is false
// when the file is torn or inconsistent and must be rebuilt.
func (ix *offsetIndex) load(logSize int64) (ok bool, err error) {
	b, err := readWhole(ix.f)
	if err != nil {
		return false, err
	}
	if len(b)%offsetEntrySize != 0 {
		return false, nil
	}
	ix.entries = make([]offsetEntry, 0, len(b)/offsetEntrySize)
	for i := 0; i < len(b); i += offsetEntrySize {
		e := offsetEntry{binary.BigEndian.Uint32(b[i:]), binary.BigEndian.Uint32(b[i+4:])}
		if int64(e.pos) >= logSize {
			return false, nil
		}
		if n := len(ix.entries); n > 0 && (e.rel <= ix.entries[n-1].rel || e.pos <= ix.entries[n-1].pos) {
			return false, nil
		}
		ix.entries = append(ix.entries, e)
	}
	return true, nil
}

func (ix *offsetIndex) reset() error {
	ix.entries = ix.entries[:0]
	return ix.f.Truncate(0)
}

// timeIndex is a segment's sparse time index; guarded by the owning Log's mutex.
type timeIndex struct {
	f       File
	entries []timeEntry
}

// lookup returns the relative offset of the last entry whose timestamp is below
// ts: every record before it is older than ts. ok is false when there is none.
func (ix *timeIndex) lookup(ts int64) (rel uint32, ok bool) {
	i := sort.Search(len(ix.entries), func(i int) bool { return ix.entries[i].ts >= ts })
	if i == 0 {
		return 0, false
	}
	return ix.entries[i-1].rel, true
}

func (ix *timeIndex) add(ts int64, rel uint32) error {
	var b [timeEntrySize]byte
	binary.BigEndian.PutUint64(b[0:], uint64(ts))
	binary.BigEndian.PutUint32(b[8:], rel)
	if _, err := ix.f.WriteAt(b[:], int64(len(ix.entries))*timeEntrySize); err != nil {
		return err
	}
	ix.entries = append(ix.entries, timeEntry{ts, rel})
	return nil
}

func (ix *timeIndex) load(maxRel uint32) (ok bool, err error) {
	b, err := readWhole(ix.f)
	if err != nil {
		return false, err
	}
	if len(b)%timeEntrySize != 0 {
		return false, nil
	}
	ix.entries = make([]timeEntry, 0, len(b)/timeEntrySize)
	for i := 0; i < len(b); i += timeEntrySize {
		e := timeEntry{int64(binary.BigEndian.Uint64(b[i:])), binary.BigEndian.Uint32(b[i+8:])}
		if e.rel > maxRel {
			return false, nil
		}
		if n := len(ix.entries); n > 0 && (e.ts <= ix.entries[n-1].ts || e.rel <= ix.entries[n-1].rel) {
			return false, nil
		}
		ix.entries = append(ix.entries, e)
	}
	return true, nil
}

func (ix *timeIndex) reset() error {
	ix.entries = ix.entries[:0]
	return ix.f.Truncate(0)
}

func (ix *timeIndex) last() (timeEntry, bool) {
	if len(ix.entries) == 0 {
		return timeEntry{}, false
	}
	return ix.entries[len(ix.entries)-1], true
}

// readWhole reads a file from position 0 to its current size.
func readWhole(f File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > 1<<30 {
		return nil, fmt.Errorf("index file of %d bytes", fi.Size())
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err == io.EOF && n == len(b) {
		err = nil
	}
	return b[:n], err
}
