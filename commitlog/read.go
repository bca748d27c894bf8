package commitlog

import (
	"fmt"
	"io"
	"os"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// ReadResult locates whole batches in one segment file. The caller owns File
// and must Close it; it is a descriptor of its own, so the caller may Seek it
// and hand it to sendfile (io.Copy of an io.LimitReader over it into a TCP
// connection) without disturbing other readers. File is nil when Size is 0.
type ReadResult struct {
	File       File
	Position   int64 // where the first batch starts in File
	Size       int64 // bytes of whole batches from Position
	NextOffset int64 // the offset to ask for next
	Offsets
}

// Close releases the result's descriptor.
func (r *ReadResult) Close() error {
	if r.File == nil {
		return nil
	}
	err := r.File.Close()
	r.File = nil
	return err
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
		hr := seg.headers()
		pos, h, found, err := seg.findWith(hr, offset)
		if err != nil || !found {
			hr.close()
			if err != nil {
				return res, err
			}
			continue
		}
		defer hr.close()
		if h.NextOffset() > limit {
			return res, nil
		}
		start, end := pos, pos+int64(h.Size())
		next := h.NextOffset()
		for end < seg.size && (maxRecords <= 0 || next-offset < maxRecords) {
			nh, err := hr.at(end)
			if err != nil {
				return res, err
			}
			if nh.NextOffset() > limit || end+int64(nh.Size())-start > maxBytes {
				break
			}
			end += int64(nh.Size())
			next = nh.NextOffset()
		}
		f, err := l.fs.OpenFile(segmentName(seg.dir, seg.base, logSuffix), os.O_RDONLY, 0)
		if err != nil {
			return res, fmt.Errorf("%w: opening segment: %v", api.ErrStorage, err)
		}
		res.File, res.Position, res.Size, res.NextOffset = f, start, end-start, next
		return res, nil
	}
	return res, nil
}

// OffsetForTimestamp returns the offset of the first record whose timestamp is
// at or after ts (ms), reading only below the HW. ok is false when every
// committed record is older.
//
// Like Read, it holds the log's read lock only to find a candidate batch (the
// first below the HW whose max timestamp reaches ts, from headers alone) and
// to open a descriptor of its own; the batch is read and decompressed after
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
// through its own descriptor f (nil when there is no candidate).
type timestampBatch struct {
	f    File
	pos  int64
	size int64
	next int64 // the offset after the batch
}

// timestampCandidate finds, under the read lock, the first batch at or
// after offset from (-1: anywhere) that starts below the HW and whose max
// timestamp is at or after ts, and opens a descriptor for it.
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
		pos, h, found, err := seg.find(start)
		if err != nil {
			return timestampBatch{}, err
		}
		for found && h.BaseOffset < l.hw {
			if h.MaxTimestamp >= ts {
				f, err := l.fs.OpenFile(segmentName(seg.dir, seg.base, logSuffix), os.O_RDONLY, 0)
				if err != nil {
					return timestampBatch{}, fmt.Errorf("%w: opening segment: %v", api.ErrStorage, err)
				}
				return timestampBatch{f: f, pos: pos, size: int64(h.Size()), next: h.NextOffset()}, nil
			}
			pos += int64(h.Size())
			if pos >= seg.size {
				break
			}
			if h, err = seg.readHeader(pos, hbuf[:]); err != nil {
				return timestampBatch{}, err
			}
		}
	}
	return timestampBatch{}, nil
}

// firstAtOrAfter reads and decodes the batch (the lock is not held) and
// returns its first record at or after ts. It closes the descriptor.
func (c timestampBatch) firstAtOrAfter(ts int64) (int64, bool, error) {
	defer func() { _ = c.f.Close() }() // a read descriptor
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
