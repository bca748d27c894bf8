package commitlog

import (
	"fmt"
	"io"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// ReadResult locates whole batches in one segment file. File is a
// descriptor leased to the caller until Close: no other reader holds it,
// so the caller may Seek it and hand it to sendfile (io.Copy of an
// io.LimitReader over it into a TCP connection) without disturbing other
// readers; it stays readable until Close even if the segment is deleted
// meanwhile. The caller must Close the result, never File itself (the
// descriptor goes back to the log's FilePool). File is nil when Size is 0.
type ReadResult struct {
	File       File
	Position   int64 // where the first batch starts in File
	Size       int64 // bytes of whole batches from Position
	NextOffset int64 // the offset to ask for next
	Offsets

	lease *lease
}

// Close gives the result's descriptor back. It may be called more than once.
func (r *ReadResult) Close() error {
	r.lease.release()
	r.lease, r.File = nil, nil
	return nil
}

// ReadAll reads the located bytes into memory and closes the result.
func (r *ReadResult) ReadAll() ([]byte, error) {
	defer r.Close()
	if r.Size == 0 {
		return nil, nil
	}
	b := make([]byte, r.Size)
	if _, err := r.File.ReadAt(b, r.Position); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	return b, nil
}

// Read locates whole batches starting with the one that holds offset, up to
// maxBytes (but always at least one batch, so a batch larger than maxBytes
// still gets through), none of them reaching past limit: pass the HW for
// consumers, the log end for followers. Bytes come from one segment only.
//
// offset equal to limit (or to the log end) gives an empty result, for long
// polling. An offset below the log start or past the log end is
// OFFSET_OUT_OF_RANGE.
func (l *Log) Read(offset, maxBytes, limit int64) (ReadResult, error) {
	return l.ReadRecords(offset, maxBytes, limit, 0)
}

// ReadRecords is Read that also stops after the batch that brings the
// records from offset to maxRecords (0: no such bound). A reader that takes
// that many records and leaves the rest is sent only what it will use.
func (l *Log) ReadRecords(offset, maxBytes, limit, maxRecords int64) (ReadResult, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ReadResult{}, ErrClosed
	}
	offs := Offsets{LogStart: l.startLocked(), HighWatermark: l.hw, LogEnd: l.endLocked()}
	res := ReadResult{NextOffset: offset, Offsets: offs}
	if offset < offs.LogStart || offset > offs.LogEnd {
		return res, api.Errorf(api.CodeOffsetOutOfRange, "offset %d is outside [%d, %d]", offset, offs.LogStart, offs.LogEnd)
	}
	limit = min(limit, offs.LogEnd)
	if offset >= limit {
		return res, nil
	}
	for i := l.segmentIndexLocked(offset); i < len(l.segments); i++ {
		seg := l.segments[i]
		if offset >= seg.next {
			continue
		}
		// The reader's descriptor reads the headers too: one lease a read.
		rl, err := seg.file.acquire(true, 0)
		if err != nil {
			return res, fmt.Errorf("%w: opening segment: %v", api.ErrStorage, err)
		}
		start, end, next, found, err := seg.locate(rl.f, offset, maxBytes, limit, maxRecords)
		if err != nil || !found || end == start {
			rl.release()
			if err != nil || found {
				return res, err // found but past limit: nothing to read yet
			}
			continue
		}
		res.File, res.Position, res.Size, res.NextOffset, res.lease = rl.f, start, end-start, next, rl
		return res, nil
	}
	return res, nil
}

// locate finds, reading headers through f, the whole batches from the one
// holding offset, up to maxBytes (at least one batch) and maxRecords (0:
// no bound), none past limit. found is false when offset is not in the
// segment; end equals start when the first batch reaches past limit.
func (s *segment) locate(f File, offset, maxBytes, limit, maxRecords int64) (start, end, next int64, found bool, err error) {
	hr := s.headers(f)
	defer hr.close()
	pos, h, found, err := s.findWith(hr, offset)
	if err != nil || !found {
		return 0, 0, 0, false, err
	}
	if h.NextOffset() > limit {
		return pos, pos, offset, true, nil
	}
	start, end = pos, pos+int64(h.Size())
	next = h.NextOffset()
	for end < s.size && (maxRecords <= 0 || next-offset < maxRecords) {
		nh, err := hr.at(end)
		if err != nil {
			return 0, 0, 0, false, err
		}
		if nh.NextOffset() > limit || end+int64(nh.Size())-start > maxBytes {
			break
		}
		end += int64(nh.Size())
		next = nh.NextOffset()
	}
	return start, end, next, true, nil
}

// OffsetForTimestamp returns the offset of the first record whose timestamp is
// at or after ts (ms), reading only below the HW. ok is false when every
// committed record is older.
//
// Like Read, it holds the log's read lock only to find a candidate batch (the
// first below the HW whose max timestamp reaches ts, from headers alone) and
// to lease a descriptor for it; the batch is read and decompressed after
// the lock is released, so appends never wait on a decompression. A batch
// whose records are all older (compaction keeps a batch's max timestamp)
// sends the search on from the batch after it. One batch is in memory at a
// time: its stored size, and at most recordbatch.MaxUncompressedSize decoded.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, ok bool, err error) {
	from := int64(-1)
	for {
		c, err := l.timestampCandidate(from, ts)
		if err != nil || c.f == nil {
			return 0, false, err
		}
		off, found, err := c.firstAtOrAfter(ts)
		if err != nil || found {
			return off, found, err
		}
		from = c.next
	}
}

// timestampBatch is a batch OffsetForTimestamp decodes outside the lock,
// through a descriptor leased to it, f (nil when there is no candidate).
type timestampBatch struct {
	f    File
	l    *lease
	pos  int64
	size int64
	next int64 // the offset after the batch
}

// timestampCandidate finds, under the read lock, the first batch at or
// after offset from (-1: anywhere) that starts below the HW and whose max
// timestamp is at or after ts, and leases a descriptor for it.
func (l *Log) timestampCandidate(from, ts int64) (timestampBatch, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return timestampBatch{}, ErrClosed
	}
	var hbuf [recordbatch.HeaderSize]byte
	for i := max(l.segmentIndexLocked(from), 0); i < len(l.segments); i++ {
		seg := l.segments[i]
		if seg.base >= l.hw {
			break
		}
		if seg.maxTS < ts {
			continue
		}
		start := max(from, seg.base)
		if rel, ok := seg.timeIndex.lookup(ts); ok {
			start = max(start, seg.base+int64(rel))
		}
		if start >= seg.next {
			continue
		}
		sl, err := seg.use()
		if err != nil {
			return timestampBatch{}, fmt.Errorf("%w: opening segment: %v", api.ErrStorage, err)
		}
		c, err := seg.timestampCandidate(sl.f, start, ts, l.hw, hbuf[:])
		if err != nil || c.f == nil {
			sl.release()
			if err != nil {
				return timestampBatch{}, err
			}
			continue
		}
		c.l = sl
		return c, nil
	}
	return timestampBatch{}, nil
}

// timestampCandidate is the first batch of the segment from offset start
// that begins below hw and reaches ts, read through f; its f is nil when
// there is none.
func (s *segment) timestampCandidate(f File, start, ts, hw int64, hbuf []byte) (timestampBatch, error) {
	pos, h, found, err := s.find(f, start)
	if err != nil {
		return timestampBatch{}, err
	}
	for found && h.BaseOffset < hw {
		if h.MaxTimestamp >= ts {
			return timestampBatch{f: f, pos: pos, size: int64(h.Size()), next: h.NextOffset()}, nil
		}
		pos += int64(h.Size())
		if pos >= s.size {
			break
		}
		if h, err = readHeader(f, pos, hbuf); err != nil {
			return timestampBatch{}, err
		}
	}
	return timestampBatch{}, nil
}

// firstAtOrAfter reads and decodes the batch (the lock is not held) and
// returns its first record at or after ts. It releases the descriptor.
func (c timestampBatch) firstAtOrAfter(ts int64) (int64, bool, error) {
	defer c.l.release()
	body := make([]byte, c.size)
	if _, err := c.f.ReadAt(body, c.pos); err != nil {
		return 0, false, fmt.Errorf("%w: reading the batch at %d: %v", api.ErrStorage, c.pos, err)
	}
	_, recs, err := recordbatch.Decode(body)
	if err != nil {
		return 0, false, err
	}
	for _, r := range recs {
		if r.Timestamp >= ts {
			return r.Offset, true, nil
		}
	}
	return 0, false, nil
}
