package commitlog

import (
	"fmt"
	"io"
	"os"

	"github.com/sluice-io/sluice/api"
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
		pos, h, found, err := seg.find(offset)
		if err != nil {
			return res, err
		}
		if !found {
			continue
		}
		if h.NextOffset() > limit {
			return res, nil
		}
		start, end := pos, pos+int64(h.Size())
		next := h.NextOffset()
		var hbuf [api.BatchHeaderSize]byte
		for end < seg.size {
			nh, err := seg.readHeader(end, hbuf[:])
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
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, ok bool, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, false, ErrClosed
	}
	for _, seg := range l.segments {
		if seg.maxTS < ts || seg.base >= l.hw {
			continue
		}
		from := seg.base
		if rel, ok := seg.timeIndex.lookup(ts); ok {
			from = seg.base + int64(rel)
		}
		pos, h, found, err := seg.find(from)
		if err != nil {
			return 0, false, err
		}
		for found && pos < seg.size && h.BaseOffset < l.hw {
			if h.MaxTimestamp >= ts {
				body := make([]byte, h.Size())
				if _, err := seg.log.ReadAt(body, pos); err != nil && err != io.EOF {
					return 0, false, fmt.Errorf("%w: %v", api.ErrStorage, err)
				}
				_, recs, err := api.DecodeBatch(body)
				if err != nil {
					return 0, false, err
				}
				for _, r := range recs {
					if r.Timestamp >= ts {
						return r.Offset, true, nil
					}
				}
			}
			pos += int64(h.Size())
			if pos >= seg.size {
				break
			}
			var hbuf [api.BatchHeaderSize]byte
			if h, err = seg.readHeader(pos, hbuf[:]); err != nil {
				return 0, false, err
			}
		}
	}
	return 0, false, nil
}
