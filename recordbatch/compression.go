package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/sluice-io/sluice/api"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxUncompressedSize caps what the records section of one compressed batch
// may decompress to. Nothing else bounds it: a few kilobytes of zstd or gzip can
// claim gigabytes, so without a cap one hostile batch could exhaust memory. Kafka's
// clients serialise a batch into a buffer before compressing it and their default
// batch and message limits are about 1 MiB, so real batches sit far below this.
// Encode refuses to write a compressed batch over the cap, so everything this
// package writes it can also read.
const MaxUncompressedSize = 64 << 20

// errTooLarge is wrapped into CORRUPT_RECORD by Decode.
var errTooLarge = fmt.Errorf("records decompress to more than %d bytes", MaxUncompressedSize)

// sliceWriter is an io.Writer that appends to b. The stream compressors write
// through it straight into a reusable buffer.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Compressors are pooled because building one is far more expensive than one
// batch's worth of compressing: a gzip writer allocates about 800 KB of state, an
// lz4 writer its block buffers. Each pooled value carries the sliceWriter its
// compressor is bound to, so taking one from the pool allocates nothing.
type gzipCompressor struct {
	out sliceWriter
	w   *gzip.Writer
}

type lz4Compressor struct {
	out sliceWriter
	w   *lz4.Writer
}

var gzipCompressors = sync.Pool{New: func() any {
	c := new(gzipCompressor)
	// gzip.DefaultCompression is level 6, the level Kafka's own producer uses.
	c.w, _ = gzip.NewWriterLevel(&c.out, gzip.DefaultCompression)
	return c
}}

var lz4Compressors = sync.Pool{New: func() any {
	c := new(lz4Compressor)
	c.w = lz4.NewWriter(&c.out)
	// The frame Kafka's KafkaLZ4BlockOutputStream writes: 64 KiB independent
	// blocks, no content or block checksum (the batch CRC covers the bytes).
	// Options survive Reset, so they are applied once.
	_ = c.w.Apply(
		lz4.BlockSizeOption(lz4.Block64Kb),
		lz4.ChecksumOption(false),
		lz4.BlockChecksumOption(false),
		lz4.CompressionLevelOption(lz4.Fast),
	)
	return c
}}

// zstdEncoder is shared rather than pooled: EncodeAll is safe for concurrent use
// and keeps up to GOMAXPROCS internal encoders of its own. SpeedDefault is
// roughly zstd level 3, Kafka's default.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithZeroFrames(true),
	)
})

// zstdDecoder is shared for the same reason. Its memory cap makes it refuse a
// frame that declares, or grows to, more than MaxUncompressedSize before
// allocating for it.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderMaxMemory(MaxUncompressedSize),
	)
})

// compress appends src, compressed with c, to dst. c must be a codec other than
// CompressionNone.
func compress(dst, src []byte, c api.Compression) ([]byte, error) {
	switch c {
	case api.CompressionGzip:
		gc := gzipCompressors.Get().(*gzipCompressor)
		defer gzipCompressors.Put(gc)
		return compressStream(gc.w, &gc.out, dst, src)
	case api.CompressionLZ4:
		lc := lz4Compressors.Get().(*lz4Compressor)
		defer lz4Compressors.Put(lc)
		return compressStream(lc.w, &lc.out, dst, src)
	case api.CompressionSnappy:
		// A plain snappy block; Kafka's Java consumer (and every other client)
		// also reads this unframed form.
		start := len(dst)
		dst = slices.Grow(dst, s2.MaxEncodedLen(len(src)))
		enc := s2.EncodeSnappy(dst[start:cap(dst)], src)
		return dst[:start+len(enc)], nil
	case api.CompressionZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return dst, err
		}
		return enc.EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("cannot compress with %v", c)
}

// streamCompressor is what gzip.Writer and lz4.Writer have in common.
type streamCompressor interface {
	io.WriteCloser
	Reset(io.Writer)
}

// compressStream runs one whole stream through w, whose output goes to out, and
// returns dst with the compressed bytes appended. out is emptied again before
// returning so the pooled compressor keeps no reference to dst.
func compressStream(w streamCompressor, out *sliceWriter, dst, src []byte) ([]byte, error) {
	out.b = dst
	w.Reset(out)
	_, err := w.Write(src)
	if err == nil {
		err = w.Close()
	}
	dst = out.b
	out.b = nil
	return dst, err
}

// Decompressors are pooled for the same reason as compressors; each carries the
// bytes.Reader it reads from so that a decompress allocates only its output.
type gzipDecompressor struct {
	src bytes.Reader
	r   gzip.Reader
}

type lz4Decompressor struct {
	src bytes.Reader
	r   *lz4.Reader
}

var gzipDecompressors = sync.Pool{New: func() any { return new(gzipDecompressor) }}

var lz4Decompressors = sync.Pool{New: func() any {
	d := new(lz4Decompressor)
	d.r = lz4.NewReader(&d.src)
	return d
}}

// decompress returns src decompressed with c in a newly allocated buffer (the
// decoded records alias it, so it cannot come from a pool), refusing output over
// MaxUncompressedSize.
func decompress(src []byte, c api.Compression) ([]byte, error) {
	return decompressInto(nil, src, c)
}

// decompressInto is decompress writing into buf's memory when it is large
// enough (a caller that only looks at the records passes a pooled buffer), and
// into a new buffer otherwise. The result starts at buf[0]; buf's contents are
// lost either way.
func decompressInto(buf, src []byte, c api.Compression) ([]byte, error) {
	switch c {
	case api.CompressionGzip:
		d := gzipDecompressors.Get().(*gzipDecompressor)
		defer gzipDecompressors.Put(d)
		d.src.Reset(src)
		defer d.src.Reset(nil)
		if err := d.r.Reset(&d.src); err != nil {
			return nil, err
		}
		return readCapped(buf, &d.r, gzipSizeHint(src))
	case api.CompressionLZ4:
		d := lz4Decompressors.Get().(*lz4Decompressor)
		defer lz4Decompressors.Put(d)
		d.src.Reset(src)
		defer d.src.Reset(nil)
		d.r.Reset(&d.src)
		return readCapped(buf, d.r, 4*len(src))
	case api.CompressionSnappy:
		return decodeSnappy(buf, src)
	case api.CompressionZstd:
		dec, err := zstdDecoder()
		if err != nil {
			return nil, err
		}
		return dec.DecodeAll(src, buf[:0])
	}
	return nil, fmt.Errorf("unknown compression codec %d", int8(c))
}

// maxDeflateRatio bounds how far deflate can expand its input (a run of one byte
// costs a little over one bit per 258 bytes); no honest gzip stream exceeds it.
const maxDeflateRatio = 1032

// gzipSizeHint sizes the output buffer from the gzip trailer, whose last four
// bytes hold the uncompressed size mod 2^32, so a typical batch decompresses
// without regrowing. The trailer is untrusted: the hint is clamped by what the
// input could possibly expand to, and readCapped enforces the real limit anyway.
func gzipSizeHint(src []byte) int {
	if len(src) < 18 { // a 10-byte header and an 8-byte trailer
		return 0
	}
	isize := int64(binary.LittleEndian.Uint32(src[len(src)-4:]))
	return int(min(isize, int64(len(src))*maxDeflateRatio, MaxUncompressedSize))
}

// readCapped reads r to EOF into buf[:0] (or a new buffer of initial capacity
// hint when buf is smaller) and fails with errTooLarge once the output passes
// MaxUncompressedSize. Unlike io.ReadAll, it never asks r for more than
// one byte past the limit, so a decompression bomb costs at most the limit in
// memory.
func readCapped(buf []byte, r io.Reader, hint int) ([]byte, error) {
	if want := max(512, min(hint, MaxUncompressedSize+1)); cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	buf = buf[:0]
	for {
		if len(buf) > MaxUncompressedSize {
			return nil, errTooLarge
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // let append pick the growth
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), MaxUncompressedSize+1)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > MaxUncompressedSize {
				return nil, errTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// xerialMagic starts a snappy stream framed the way Kafka's Java producer writes
// it (xerial snappy-java's SnappyOutputStream). The magic is followed by two
// big-endian int32 version numbers, then by blocks, each a big-endian int32 length
// and a plain snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// xerialHeaderSize is the magic plus the two version numbers.
const xerialHeaderSize = 16

var errXerial = errors.New("malformed xerial snappy framing")

// decodeSnappy decodes either a plain snappy block or a xerial-framed stream. A
// plain block cannot be mistaken for the xerial magic: as a block it would open
// with a copy before any literal, which is invalid.
func decodeSnappy(buf, src []byte) ([]byte, error) {
	if bytes.HasPrefix(src, xerialMagic) {
		return decodeXerial(buf, src)
	}
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > MaxUncompressedSize {
		return nil, errTooLarge
	}
	return s2.Decode(sized(buf, n), src)
}

// sized returns buf resliced to n bytes when it has the room, else a new
// slice of n bytes.
func sized(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]byte, n)
}

// decodeXerial decodes a xerial-framed snappy stream. It walks the block lengths
// first and sums the sizes the blocks declare, so the output is allocated once and
// only after the total is known to be under the cap.
func decodeXerial(buf, src []byte) ([]byte, error) {
	if len(src) < xerialHeaderSize {
		return nil, errXerial
	}
	src = src[xerialHeaderSize:]
	total := 0
	for rest := src; len(rest) > 0; {
		block, next, err := nextXerialBlock(rest)
		if err != nil {
			return nil, err
		}
		n, err := s2.DecodedLen(block)
		if err != nil {
			return nil, err
		}
		if total += n; total > MaxUncompressedSize {
			return nil, errTooLarge
		}
		rest = next
	}
	out := sized(buf, total)
	at := 0
	for len(src) > 0 {
		block, next, _ := nextXerialBlock(src) // validated by the first pass
		n, _ := s2.DecodedLen(block)
		if _, err := s2.Decode(out[at:at+n], block); err != nil {
			return nil, err
		}
		at += n
		src = next
	}
	return out, nil
}

// nextXerialBlock splits the first length-prefixed block off src.
func nextXerialBlock(src []byte) (block, rest []byte, err error) {
	if len(src) < 4 {
		return nil, nil, errXerial
	}
	n := binary.BigEndian.Uint32(src)
	src = src[4:]
	if uint64(n) > uint64(len(src)) {
		return nil, nil, errXerial
	}
	return src[:n], src[n:], nil
}
