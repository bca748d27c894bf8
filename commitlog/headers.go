package commitlog

import (
	"fmt"
	"io"
	"sync"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// headerReader reads one segment's batch headers through a buffer: a scan
// over many small batches (an offset-index entry covers IndexIntervalBytes
// of them, and a fetch walks its batches to find where to stop) costs one
// pread per headerReadAhead bytes, not one per batch. Used under the
// log's lock, like the segment it reads, through a descriptor its caller
// leased.
type headerReader struct {
	seg   *segment
	f     File
	buf   *[headerReadAhead]byte
	start int64 // file position of buf[0]
	n     int   // bytes of buf read
}

// headerReadAhead is twice the default index interval: a find from an
// index entry usually needs one read.
const headerReadAhead = 8 << 10

var headerBufs = sync.Pool{New: func() any { return new([headerReadAhead]byte) }}

func (s *segment) headers(f File) *headerReader {
	return &headerReader{seg: s, f: f, buf: headerBufs.Get().(*[headerReadAhead]byte)}
}

// close gives the buffer back.
func (r *headerReader) close() {
	headerBufs.Put(r.buf)
	r.buf = nil
}

// at returns the header of the batch at pos.
func (r *headerReader) at(pos int64) (recordbatch.Header, error) {
	if pos < r.start || pos+recordbatch.HeaderSize > r.start+int64(r.n) {
		want := max(min(int64(headerReadAhead), r.seg.size-pos), recordbatch.HeaderSize)
		n, err := r.f.ReadAt(r.buf[:want], pos)
		if n < recordbatch.HeaderSize {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			r.n = 0
			return recordbatch.Header{}, fmt.Errorf("%w: reading batch header at %d: %v", api.ErrStorage, pos, err)
		}
		r.start, r.n = pos, n
	}
	off := pos - r.start
	return recordbatch.ParseHeader(r.buf[off : off+recordbatch.HeaderSize])
}
