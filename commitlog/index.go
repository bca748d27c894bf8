package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
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

// offsetIndex is a segment's sparse offset index, kept whole in memory and
// written whole to its file (segment.saveIndexes). Its fields are guarded
// by the owning Log's mutex.
type offsetIndex struct {
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

func (ix *offsetIndex) add(rel, pos uint32) {
	ix.entries = append(ix.entries, offsetEntry{rel, pos})
}

// load parses an index file's bytes and checks them against the log's
// size; ok is false when the file is torn or inconsistent and must be
// rebuilt.
func (ix *offsetIndex) load(b []byte, logSize int64) (ok bool) {
	ix.entries = nil
	if len(b)%offsetEntrySize != 0 {
		return false
	}
	entries := make([]offsetEntry, 0, len(b)/offsetEntrySize)
	for i := 0; i < len(b); i += offsetEntrySize {
		e := offsetEntry{binary.BigEndian.Uint32(b[i:]), binary.BigEndian.Uint32(b[i+4:])}
		if int64(e.pos) >= logSize {
			return false
		}
		if n := len(entries); n > 0 && (e.rel <= entries[n-1].rel || e.pos <= entries[n-1].pos) {
			return false
		}
		entries = append(entries, e)
	}
	ix.entries = entries
	return true
}

// encode puts entry i in b, for writeIndexFile.
func (ix *offsetIndex) encode(i int, b []byte) (n int, ok bool) {
	if i >= len(ix.entries) {
		return 0, false
	}
	binary.BigEndian.PutUint32(b[0:], ix.entries[i].rel)
	binary.BigEndian.PutUint32(b[4:], ix.entries[i].pos)
	return offsetEntrySize, true
}

func (ix *offsetIndex) reset() { ix.entries = ix.entries[:0] }

// timeIndex is a segment's sparse time index; guarded by the owning Log's mutex.
type timeIndex struct {
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

func (ix *timeIndex) add(ts int64, rel uint32) {
	ix.entries = append(ix.entries, timeEntry{ts, rel})
}

// load parses a time index file's bytes; ok is false when they are torn or
// inconsistent.
func (ix *timeIndex) load(b []byte, maxRel uint32) (ok bool) {
	ix.entries = nil
	if len(b)%timeEntrySize != 0 {
		return false
	}
	entries := make([]timeEntry, 0, len(b)/timeEntrySize)
	for i := 0; i < len(b); i += timeEntrySize {
		e := timeEntry{int64(binary.BigEndian.Uint64(b[i:])), binary.BigEndian.Uint32(b[i+8:])}
		if e.rel > maxRel {
			return false
		}
		if n := len(entries); n > 0 && (e.ts <= entries[n-1].ts || e.rel <= entries[n-1].rel) {
			return false
		}
		entries = append(entries, e)
	}
	ix.entries = entries
	return true
}

// encode puts entry i in b, for writeIndexFile.
func (ix *timeIndex) encode(i int, b []byte) (n int, ok bool) {
	if i >= len(ix.entries) {
		return 0, false
	}
	binary.BigEndian.PutUint64(b[0:], uint64(ix.entries[i].ts))
	binary.BigEndian.PutUint32(b[8:], ix.entries[i].rel)
	return timeEntrySize, true
}

func (ix *timeIndex) reset() { ix.entries = ix.entries[:0] }

func (ix *timeIndex) last() (timeEntry, bool) {
	if len(ix.entries) == 0 {
		return timeEntry{}, false
	}
	return ix.entries[len(ix.entries)-1], true
}

// readIndexFile returns an index file's bytes; a missing file is an empty
// index (a crash between creating a segment's files), rebuilt when the log
// is not empty.
func readIndexFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened read-only
	return readWhole(f)
}

// indexWriteBuffer is how many bytes of entries writeIndexFile writes at once.
const indexWriteBuffer = 64 << 10

// writeIndexFile replaces an index file's content with the entries encode
// gives (entry 0, 1, ... until it reports none) and fsyncs it, through a
// descriptor of its own, closed before it returns. A crash meanwhile
// leaves a short or empty index, which Open rebuilds from the log.
func writeIndexFile(fsys FS, name string, encode func(i int, b []byte) (int, bool)) error {
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	var buf []byte
	var off int64
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := f.WriteAt(buf, off)
		off += int64(len(buf))
		buf = buf[:0]
		return err
	}
	var entry [timeEntrySize]byte
	for i := 0; err == nil; i++ {
		n, ok := encode(i, entry[:])
		if !ok {
			break
		}
		if buf == nil {
			buf = make([]byte, 0, indexWriteBuffer)
		}
		buf = append(buf, entry[:n]...)
		if len(buf)+timeEntrySize > cap(buf) {
			err = flush()
		}
	}
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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
