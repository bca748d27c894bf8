package commitlog

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
)

// SegmentInfo describes one closed segment, for callers that copy segments
// elsewhere (tiered storage).
type SegmentInfo struct {
	Base         int64 // first offset
	Next         int64 // offset after the last batch
	Size         int64 // bytes of the .log file
	MaxTimestamp int64 // largest record timestamp, -1 when unknown
}

// Segment file kinds for OpenSegment.
const (
	SegmentLog       = logSuffix
	SegmentIndex     = indexSuffix
	SegmentTimeIndex = timeIndexSuffix
)

// ClosedSegments lists the segments that no longer take appends and lie
// wholly below the HW, oldest first. Their files do not change until they
// are deleted.
func (l *Log) ClosedSegments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []SegmentInfo
	for _, s := range l.segments[:len(l.segments)-1] {
		if s.next > l.hw {
			break
		}
		out = append(out, SegmentInfo{Base: s.base, Next: s.next, Size: s.size, MaxTimestamp: s.maxTS})
	}
	return out
}

// OpenSegment opens one file of a closed segment for reading (kind is
// SegmentLog, SegmentIndex or SegmentTimeIndex). The caller closes it; the
// descriptor stays readable even if retention deletes the segment meanwhile.
// A log file's descriptor is leased from the log's FilePool, as a reader's
// (no other reader shares its offset): Close gives it back.
func (l *Log) OpenSegment(base int64, kind string) (File, int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := l.segmentIndexLocked(base)
	if i < 0 || l.segments[i].base != base || i == len(l.segments)-1 {
		return nil, 0, api.Errorf(api.CodeOffsetOutOfRange, "no closed segment at %d", base)
	}
	seg := l.segments[i]
	if kind == SegmentLog {
		rl, err := seg.file.acquire(true, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
		return &leasedFile{File: rl.f, l: rl}, seg.size, nil
	}
	f, err := l.fs.OpenFile(segmentName(l.dir, base, kind), os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // opened read-only
		return nil, 0, fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	return f, fi.Size(), nil
}

// leasedFile is a pooled descriptor handed out as a File: Close ends the
// lease instead of closing it, and later calls fail with os.ErrClosed.
type leasedFile struct {
	File
	l      *lease
	closed atomic.Bool
}

func (f *leasedFile) Close() error {
	if f.closed.Swap(true) {
		return os.ErrClosed
	}
	f.l.release()
	return nil
}

// EpochsIn returns the leader-epoch lineage entries that apply to offsets in
// [from, to): the epoch in force at from (starting at from) and every epoch
// that starts inside the range.
func (l *Log) EpochsIn(from, to int64) []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []EpochEntry
	for i, e := range l.epochs.entries {
		end := int64(1<<63 - 1)
		if i+1 < len(l.epochs.entries) {
			end = l.epochs.entries[i+1].StartOffset
		}
		if e.StartOffset >= to || end <= from {
			continue
		}
		out = append(out, EpochEntry{Epoch: e.Epoch, StartOffset: max(e.StartOffset, from)})
	}
	return out
}

// SectionReader reads n bytes of f from off; for uploads, where the size must
// be known up front.
func SectionReader(f File, off, n int64) io.Reader { return io.NewSectionReader(f, off, n) }

// BytesAbove sums the sizes of the segments, the active one included, that
// hold offsets at or above offset: the local bytes not yet elsewhere when
// offset is the end of what another tier holds.
func (l *Log) BytesAbove(offset int64) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segments {
		if s.next > offset {
			n += s.size
		}
	}
	return n
}
