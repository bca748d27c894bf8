package commitlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// File names of a segment: the base offset as 20 zero-padded digits, so that
// a directory listing sorts segments by offset.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
)

func segmentName(dir string, base int64, suffix string) string {
	return path.Join(dir, fmt.Sprintf("%020d%s", base, suffix))
}

// parseSegmentName returns the base offset of a "%020d.log" name.
func parseSegmentName(name string) (int64, bool) {
	if !strings.HasSuffix(name, logSuffix) || len(name) != 20+len(logSuffix) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(name, logSuffix), 10, 64)
	return n, err == nil && n >= 0
}

// segment is one log file with its two indexes. All fields are guarded by the
// owning Log's mutex (a clean's new segments, not yet in the log, by the
// clean). No descriptor is held for the segment as such: they are leased
// from the log's FilePool for each use, but for the writer's lease, held
// from a write until the fsync that covers it.
type segment struct {
	dir  string
	base int64
	// suffix ends every file name of the segment: "" for the log's own,
	// cleanedSuffix while a clean writes its replacement.
	suffix string
	fs     FS
	file   *poolFile // the .log file
	// wlease is the writer's lease, taken by the first write (or cut)
	// after an fsync and released by the next fsync: a descriptor holding
	// writes that are not yet on disk is never closed, so the fsync that
	// covers them runs on the descriptor they went through and sees their
	// writeback errors.
	wlease *lease
	writes uint64 // writes through wlease, for an fsync that runs without the lock

	size  int64 // bytes of whole, written batches; nothing past it is ever read
	next  int64 // offset after the last batch
	maxTS int64 // largest batch max timestamp, -1 when empty
	// maxTSRel is the relative offset of the batch that carried maxTS.
	maxTSRel uint32
	rollAt   time.Time

	index        offsetIndex
	timeIndex    timeIndex
	sinceIndexed int64 // log bytes written since the last offset-index entry
	// indexDirty is set when the in-memory indexes hold what their files do
	// not: they are written whole when the segment closes and when the log
	// does (saveIndexes). After a crash the active segment's are rebuilt
	// from the log anyway, and a closed segment's were written at its roll.
	indexDirty bool
}

// newSegment describes the segment at base; it opens nothing.
func newSegment(fsys FS, pool *FilePool, dir string, base int64, suffix string) *segment {
	return &segment{
		dir: dir, base: base, suffix: suffix, fs: fsys, next: base, maxTS: -1,
		file: pool.file(fsys, segmentName(dir, base, logSuffix)+suffix),
	}
}

// createSegment creates the three files of a new, empty segment at base
// (truncating leftovers when trunc is set, as a clean does). On error the
// caller removes whatever was created.
func createSegment(fsys FS, pool *FilePool, dir string, base int64, suffix string, trunc bool) (*segment, error) {
	flag := os.O_CREATE
	if trunc {
		flag |= os.O_TRUNC
	}
	s := newSegment(fsys, pool, dir, base, suffix)
	l, err := s.file.acquire(false, flag)
	if err != nil {
		s.close()
		return nil, err
	}
	l.release()
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		f, err := fsys.OpenFile(s.fileName(suf), os.O_WRONLY|flag, 0o644)
		if err != nil {
			s.close()
			return nil, err
		}
		_ = f.Close() // empty, nothing written
	}
	return s, nil
}

// fileName is the name of the segment's file of kind suf.
func (s *segment) fileName(suf string) string { return segmentName(s.dir, s.base, suf) + s.suffix }

// use leases a descriptor of the log file for positional reads.
func (s *segment) use() (*lease, error) { return s.file.acquire(false, 0) }

// writer returns the descriptor writes go through, leasing it if the
// segment holds none since its last fsync.
func (s *segment) writer() (File, error) {
	if s.wlease == nil {
		l, err := s.file.acquire(false, 0)
		if err != nil {
			return nil, err
		}
		s.wlease = l
	}
	s.writes++
	return s.wlease.f, nil
}

// syncLog fsyncs what was written since the last fsync and lets the
// writer's descriptor go. Without a write since, there is nothing to do.
func (s *segment) syncLog() error {
	if s.wlease == nil {
		return nil
	}
	if err := s.wlease.f.Sync(); err != nil {
		return err
	}
	s.wlease.release()
	s.wlease = nil
	return nil
}

// close lets go of the segment's descriptors: they close now, or when the
// reads in flight on them end.
func (s *segment) close() {
	s.wlease.release()
	s.wlease = nil
	s.file.retire()
}

// sync makes the segment durable: its log and, written whole, its indexes.
func (s *segment) sync() error {
	return errors.Join(s.syncLog(), s.saveIndexes())
}

// saveIndexes writes both indexes whole and fsyncs them, when they hold
// what their files do not.
func (s *segment) saveIndexes() error {
	if !s.indexDirty {
		return nil
	}
	if err := writeIndexFile(s.fs, s.fileName(indexSuffix), s.index.encode); err != nil {
		return err
	}
	if err := writeIndexFile(s.fs, s.fileName(timeIndexSuffix), s.timeIndex.encode); err != nil {
		return err
	}
	s.indexDirty = false
	return nil
}

// remove closes and deletes the segment's files.
func (s *segment) remove(fsys FS) error {
	s.close()
	var err error
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if rerr := fsys.Remove(s.fileName(suf)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// readHeader reads and parses the batch header at pos of a segment's log.
func readHeader(f File, pos int64, buf []byte) (recordbatch.Header, error) {
	buf = buf[:recordbatch.HeaderSize]
	if _, err := f.ReadAt(buf, pos); err != nil {
		return recordbatch.Header{}, fmt.Errorf("%w: reading batch header at %d: %v", api.ErrStorage, pos, err)
	}
	return recordbatch.ParseHeader(buf)
}

// find returns the position of the batch that holds offset, scanning forward from
// the nearest offset-index entry, and the header there, reading through f.
// found is false when offset is at or past the segment's end.
func (s *segment) find(f File, offset int64) (pos int64, h recordbatch.Header, found bool, err error) {
	r := s.headers(f)
	defer r.close()
	return s.findWith(r, offset)
}

// findWith is find reading headers through r.
func (s *segment) findWith(r *headerReader, offset int64) (pos int64, h recordbatch.Header, found bool, err error) {
	if offset >= s.next {
		return 0, recordbatch.Header{}, false, nil
	}
	rel := uint32(0)
	if offset > s.base {
		rel = uint32(offset - s.base)
	}
	pos = s.index.lookup(rel)
	for pos < s.size {
		h, err = r.at(pos)
		if err != nil {
			return 0, h, false, err
		}
		if h.NextOffset() > offset {
			return pos, h, true, nil
		}
		pos += int64(h.Size())
	}
	return 0, h, false, nil
}

// appendBatches writes already-stamped batches at the segment's end and updates
// the indexes. hs describes each batch in order.
func (s *segment) appendBatches(buf []byte, hs []recordbatch.Header, intervalBytes int64, now time.Time) error {
	f, err := s.writer()
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(buf, s.size); err != nil {
		return err
	}
	if s.size == 0 {
		s.rollAt = now
	}
	pos := s.size
	for _, h := range hs {
		s.indexBatch(h, pos, intervalBytes)
		pos += int64(h.Size())
	}
	s.size = pos
	return nil
}

// indexBatch records one batch written at pos in the in-memory state and, every
// intervalBytes, in the indexes: an offset-index entry for the batch, and a
// time-index entry for the largest timestamp so far (this batch's
// included) when it grew since the last one, as Kafka does. Both indexes
// are thus sparse alike: a time entry per batch would cost 16 bytes of
// memory per batch, more than the log itself for small ones.
func (s *segment) indexBatch(h recordbatch.Header, pos int64, intervalBytes int64) {
	rel := uint32(h.BaseOffset - s.base)
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSRel = h.MaxTimestamp, rel
	}
	if pos == 0 || s.sinceIndexed >= intervalBytes {
		s.index.add(rel, uint32(pos))
		if last, ok := s.timeIndex.last(); s.maxTS >= 0 && (!ok || (s.maxTS > last.ts && s.maxTSRel > last.rel)) {
			s.timeIndex.add(s.maxTS, s.maxTSRel)
		}
		s.indexDirty = true
		s.sinceIndexed = 0
	}
	s.sinceIndexed += int64(h.Size())
	s.next = h.NextOffset()
}

// recover rebuilds the segment's state and indexes by reading every batch and
// checking its CRC. The log is truncated at the first batch that is torn,
// corrupt or out of sequence; truncated reports whether that happened.
// onBatch sees every valid batch, in order.
func (s *segment) recover(fileSize int64, intervalBytes int64, onBatch func(recordbatch.Header)) (truncated bool, err error) {
	s.index.reset()
	s.timeIndex.reset()
	s.indexDirty = true
	s.size, s.next, s.maxTS, s.maxTSRel, s.sinceIndexed = 0, s.base, -1, 0, 0
	ls, err := s.use()
	if err != nil {
		return false, err
	}
	defer ls.release()
	var hbuf [recordbatch.HeaderSize]byte
	var body []byte
	pos := int64(0)
	for pos+recordbatch.HeaderSize <= fileSize {
		if _, err := ls.f.ReadAt(hbuf[:], pos); err != nil {
			return false, err
		}
		h, err := recordbatch.ParseHeader(hbuf[:])
		// Offsets only go up; gaps are what log compaction leaves (and what a
		// follower copying a compacted log writes, even at a segment's start).
		if err != nil || pos+int64(h.Size()) > fileSize || h.BaseOffset < s.next {
			break
		}
		if cap(body) < h.Size() {
			body = make([]byte, h.Size())
		}
		body = body[:h.Size()]
		if _, err := ls.f.ReadAt(body, pos); err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		if _, err := recordbatch.Verify(body); err != nil {
			break
		}
		s.indexBatch(h, pos, intervalBytes)
		if onBatch != nil {
			onBatch(h)
		}
		pos += int64(h.Size())
	}
	s.size = pos
	if pos < fileSize {
		w, err := s.writer()
		if err != nil {
			return true, err
		}
		if err := w.Truncate(pos); err != nil {
			return true, err
		}
		return true, nil
	}
	return false, nil
}

// loadIndexes trusts a cleanly closed segment: it loads both indexes, checks
// them against the log, and derives size and next offset from the last
// batch, reading the log through f, and the max timestamp from the batches
// after the last offset-index entry and the last time-index entry (which
// covers every batch up to that offset-index entry's). It falls back to
// recover when anything is inconsistent.
func (s *segment) loadIndexes(f File, fileSize int64, intervalBytes int64) error {
	b, err := readIndexFile(s.fs, s.fileName(indexSuffix))
	if err != nil {
		return err
	}
	okIdx := s.index.load(b, fileSize)
	if b, err = readIndexFile(s.fs, s.fileName(timeIndexSuffix)); err != nil {
		return err
	}
	okTime := s.timeIndex.load(b, ^uint32(0))
	if okIdx && okTime && fileSize > 0 && len(s.index.entries) > 0 && s.index.entries[0].pos == 0 {
		// Walk from the last index entry to the end to find the last batch.
		pos := int64(s.index.entries[len(s.index.entries)-1].pos)
		var hbuf [recordbatch.HeaderSize]byte
		var last recordbatch.Header
		s.maxTS, s.maxTSRel = -1, 0
		if e, ok := s.timeIndex.last(); ok {
			s.maxTS, s.maxTSRel = e.ts, e.rel
		}
		for pos < fileSize {
			h, err := readHeader(f, pos, hbuf[:])
			if err != nil || pos+int64(h.Size()) > fileSize {
				okIdx = false
				break
			}
			last = h
			if h.MaxTimestamp > s.maxTS {
				s.maxTS, s.maxTSRel = h.MaxTimestamp, uint32(h.BaseOffset-s.base)
			}
			s.sinceIndexed += int64(h.Size())
			pos += int64(h.Size())
		}
		if okIdx {
			s.size, s.next = fileSize, last.NextOffset()
			return nil
		}
	}
	if fileSize == 0 && len(s.index.entries) == 0 && len(s.timeIndex.entries) == 0 {
		return nil
	}
	_, err = s.recover(fileSize, intervalBytes, nil)
	return err
}
