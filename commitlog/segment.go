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
// owning Log's mutex; the file handles are safe for concurrent ReadAt.
type segment struct {
	dir  string
	base int64
	log  File

	size   int64 // bytes of whole, written batches; nothing past it is ever read
	next   int64 // offset after the last batch
	maxTS  int64 // largest batch max timestamp, -1 when empty
	rollAt time.Time

	index        offsetIndex
	timeIndex    timeIndex
	sinceIndexed int64 // log bytes written since the last offset-index entry
}

// openSegment opens (creating if asked) the three files of the segment at base.
func openSegment(fsys FS, dir string, base int64, create bool) (*segment, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	s := &segment{dir: dir, base: base, next: base, maxTS: -1}
	var err error
	if s.log, err = fsys.OpenFile(segmentName(dir, base, logSuffix), flag, 0o644); err != nil {
		return nil, err
	}
	if s.index.f, err = fsys.OpenFile(segmentName(dir, base, indexSuffix), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		_ = s.close() // the open error is the one to report
		return nil, err
	}
	if s.timeIndex.f, err = fsys.OpenFile(segmentName(dir, base, timeIndexSuffix), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		_ = s.close() // the open error is the one to report
		return nil, err
	}
	return s, nil
}

func (s *segment) close() error {
	var errs []error
	for _, f := range []File{s.log, s.index.f, s.timeIndex.f} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

func (s *segment) sync() error {
	return errors.Join(s.log.Sync(), s.index.f.Sync(), s.timeIndex.f.Sync())
}

// remove closes and deletes the segment's files.
func (s *segment) remove(fsys FS) error {
	err := s.close()
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if rerr := fsys.Remove(segmentName(s.dir, s.base, suf)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// readHeader reads and parses the batch header at pos.
func (s *segment) readHeader(pos int64, buf []byte) (recordbatch.Header, error) {
	buf = buf[:recordbatch.HeaderSize]
	if _, err := s.log.ReadAt(buf, pos); err != nil {
		return recordbatch.Header{}, fmt.Errorf("%w: reading batch header at %d: %v", api.ErrStorage, pos, err)
	}
	return recordbatch.ParseHeader(buf)
}

// find returns the position of the batch that holds offset, scanning forward from
// the nearest offset-index entry, and the header there. found is false when offset
// is at or past the segment's end.
func (s *segment) find(offset int64) (pos int64, h recordbatch.Header, found bool, err error) {
	r := s.headers()
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
	if _, err := s.log.WriteAt(buf, s.size); err != nil {
		return err
	}
	if s.size == 0 {
		s.rollAt = now
	}
	pos := s.size
	for _, h := range hs {
		if err := s.indexBatch(h, pos, intervalBytes); err != nil {
			return err
		}
		pos += int64(h.Size())
	}
	s.size = pos
	return nil
}

// indexBatch records one batch written at pos in the in-memory state and, every
// intervalBytes, in the indexes.
func (s *segment) indexBatch(h recordbatch.Header, pos int64, intervalBytes int64) error {
	rel := uint32(h.BaseOffset - s.base)
	if pos == 0 || s.sinceIndexed >= intervalBytes {
		if err := s.index.add(rel, uint32(pos)); err != nil {
			return err
		}
		s.sinceIndexed = 0
	}
	s.sinceIndexed += int64(h.Size())
	if h.MaxTimestamp > s.maxTS {
		s.maxTS = h.MaxTimestamp
		if last, ok := s.timeIndex.last(); !ok || (h.MaxTimestamp > last.ts && rel > last.rel) {
			if err := s.timeIndex.add(h.MaxTimestamp, rel); err != nil {
				return err
			}
		}
	}
	s.next = h.NextOffset()
	return nil
}

// recover rebuilds the segment's state and indexes by reading every batch and
// checking its CRC. The log is truncated at the first batch that is torn,
// corrupt or out of sequence; truncated reports whether that happened.
// onBatch sees every valid batch, in order.
func (s *segment) recover(fileSize int64, intervalBytes int64, onBatch func(recordbatch.Header)) (truncated bool, err error) {
	if err := s.index.reset(); err != nil {
		return false, err
	}
	if err := s.timeIndex.reset(); err != nil {
		return false, err
	}
	s.size, s.next, s.maxTS, s.sinceIndexed = 0, s.base, -1, 0
	var hbuf [recordbatch.HeaderSize]byte
	var body []byte
	pos := int64(0)
	for pos+recordbatch.HeaderSize <= fileSize {
		if _, err := s.log.ReadAt(hbuf[:], pos); err != nil {
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
		if _, err := s.log.ReadAt(body, pos); err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		if _, err := recordbatch.Verify(body); err != nil {
			break
		}
		if err := s.indexBatch(h, pos, intervalBytes); err != nil {
			return false, err
		}
		if onBatch != nil {
			onBatch(h)
		}
		pos += int64(h.Size())
	}
	s.size = pos
	if pos < fileSize {
		if err := s.log.Truncate(pos); err != nil {
			return true, err
		}
		return true, nil
	}
	return false, nil
}

// loadIndexes trusts a cleanly closed segment: it loads both indexes, checks
// them against the log, and derives size, next offset and max timestamp from
// the last batch. It falls back to recover when anything is inconsistent.
func (s *segment) loadIndexes(fileSize int64, intervalBytes int64) error {
	okIdx, err := s.index.load(fileSize)
	if err != nil {
		return err
	}
	okTime, err := s.timeIndex.load(^uint32(0))
	if err != nil {
		return err
	}
	if okIdx && okTime && fileSize > 0 && len(s.index.entries) > 0 && s.index.entries[0].pos == 0 {
		// Walk from the last index entry to the end to find the last batch.
		pos := int64(s.index.entries[len(s.index.entries)-1].pos)
		var hbuf [recordbatch.HeaderSize]byte
		var last recordbatch.Header
		for pos < fileSize {
			h, err := s.readHeader(pos, hbuf[:])
			if err != nil || pos+int64(h.Size()) > fileSize {
				okIdx = false
				break
			}
			last = h
			s.sinceIndexed += int64(h.Size())
			pos += int64(h.Size())
		}
		if okIdx {
			s.size, s.next = fileSize, last.NextOffset()
			s.maxTS = last.MaxTimestamp
			if e, ok := s.timeIndex.last(); ok && e.ts > s.maxTS {
				s.maxTS = e.ts
			}
			return nil
		}
	}
	if fileSize == 0 && len(s.index.entries) == 0 && len(s.timeIndex.entries) == 0 {
		return nil
	}
	_, err = s.recover(fileSize, intervalBytes, nil)
	return err
}
