package recordbatch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Each record in a batch's records section is:
//
//	length          varint  bytes of the record after this field
//	attributes      int8    unused, written as 0
//	timestampDelta  varlong from the batch's baseTimestamp
//	offsetDelta     varint  from the batch's baseOffset
//	keyLength       varint  -1 for a null key
//	key             bytes
//	valueLength     varint  -1 for a null value
//	value           bytes
//	headerCount     varint
//	headers         per header: keyLength varint, key (string, never null),
//	                valueLength varint (-1 for null), value
//
// varint and varlong are zigzag-encoded base-128 varints, as encoding/binary's
// PutVarint writes them; a varint must fit in an int32.

// RecordHeader is one record header. Kafka header keys are strings and never null; a
// nil Value is a null value, distinct from an empty one.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one record of a batch.
type Record struct {
	// Offset is the record's absolute offset. Encode ignores it: offsets in a
	// batch are assigned in order and made absolute by the leader.
	Offset int64
	// Timestamp is in milliseconds since the Unix epoch.
	Timestamp int64
	// Key is nil for a null key, which is distinct from an empty one.
	Key []byte
	// Value is nil for a null value (a tombstone, on a compacted topic).
	Value []byte
	// Headers may be nil.
	Headers []RecordHeader
}

// Options are the producer-side settings Encode writes into a batch.
type Options struct {
	// Compression is the codec for the records section; the default is none.
	Compression api.Compression
	// ProducerID identifies an idempotent producer. Zero, the default, means no
	// producer: the batch carries producerId, producerEpoch and baseSequence all
	// -1 (NoProducerID), as Kafka's non-idempotent producers write them, and
	// ProducerEpoch and BaseSequence are ignored. Any other value, negative ones
	// included, is written as given together with the next two fields.
	ProducerID int64
	// ProducerEpoch is the producer's epoch; used only with a non-zero ProducerID.
	ProducerEpoch int16
	// BaseSequence is the sequence number of the batch's first record; used only
	// with a non-zero ProducerID.
	BaseSequence int32
}

// minRecordSize is the smallest encoded record: a one-byte varint for each of
// length, timestampDelta, offsetDelta, keyLength, valueLength and headerCount,
// and the attributes byte. It bounds how many records a records section can hold.
const minRecordSize = 7

// minHeaderSize is the smallest encoded header: a one-byte keyLength and a
// one-byte valueLength.
const minHeaderSize = 2

// maxRecordsSize is the largest records section whose batch length still fits
// the int32 batchLength field.
const maxRecordsSize = math.MaxInt32 - minBatchLength

// encodeScratch holds the buffers a compressed batch is built in: raw, the
// records before compression, and comp, after. They are pooled so a steady stream
// of produces reuses the same memory.
type encodeScratch struct {
	raw, comp []byte
}

// maxPooledScratch keeps one unusually large batch from pinning its buffers in
// the pool for good.
const maxPooledScratch = 8 << 20

var encodeScratchPool = sync.Pool{New: func() any { return new(encodeScratch) }}

func (s *encodeScratch) release() {
	if cap(s.raw) > maxPooledScratch {
		s.raw = nil
	}
	if cap(s.comp) > maxPooledScratch {
		s.comp = nil
	}
	encodeScratchPool.Put(s)
}

// Encode appends one batch holding recs to dst and returns the extended
// slice, growing dst at most once. The batch is what a Kafka producer sends:
// baseOffset 0 with record i at offsetDelta i (the leader stamps the real base
// offset on append, see SetBaseOffset), partitionLeaderEpoch -1, CreateTime
// timestamps, not transactional. Record.Offset is ignored.
//
// baseTimestamp is the first record's timestamp and maxTimestamp the largest; a
// record whose Timestamp is 0 is given the current time in milliseconds. The
// producer fields follow Options.ProducerID.
//
// Errors: INVALID_RECORD for an empty recs; INVALID_CONFIG for an unknown codec;
// RECORD_TOO_LARGE when the records section would not fit a batch (2 GiB), or,
// compressed, would decompress to more than MaxUncompressedSize. On error
// dst is returned unchanged.
func Encode(dst []byte, recs []Record, opt Options) ([]byte, error) {
	if len(recs) == 0 {
		return dst, api.Errorf(api.CodeInvalidRecord, "a batch needs at least one record")
	}
	if !opt.Compression.Valid() {
		return dst, api.Errorf(api.CodeInvalidConfig, "unknown compression codec %d", int8(opt.Compression))
	}
	if int64(len(recs)) > math.MaxInt32 {
		return dst, api.Errorf(api.CodeRecordTooLarge, "%d records do not fit one batch", len(recs))
	}

	// One pass for the timestamps and the exact size of the records section, so
	// the output grows once and never moves while records are appended.
	var now int64 // taken once, and only if some record needs it
	baseTS := recs[0].Timestamp
	if baseTS == 0 {
		now = time.Now().UnixMilli()
		baseTS = now
	}
	maxTS := baseTS
	size := 0
	for i := range recs {
		r := &recs[i]
		ts := r.Timestamp
		if ts == 0 {
			if now == 0 {
				now = time.Now().UnixMilli()
			}
			ts = now
		}
		maxTS = max(maxTS, ts)
		body := recordBodySize(r, ts-baseTS, int32(i))
		size += varintSize(int64(body)) + body
		if size > maxRecordsSize {
			return dst, api.Errorf(api.CodeRecordTooLarge, "records take more than the %d bytes a batch can hold", maxRecordsSize)
		}
	}

	h := Header{
		PartitionLeaderEpoch: NoPartitionLeaderEpoch,
		Magic:                MagicV2,
		Attributes:           int16(opt.Compression),
		LastOffsetDelta:      int32(len(recs) - 1),
		BaseTimestamp:        baseTS,
		MaxTimestamp:         maxTS,
		ProducerID:           NoProducerID,
		ProducerEpoch:        NoProducerID,
		BaseSequence:         NoProducerID,
		RecordCount:          int32(len(recs)),
	}
	if opt.ProducerID != 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = opt.ProducerID, opt.ProducerEpoch, opt.BaseSequence
	}

	start := len(dst)
	if opt.Compression == api.CompressionNone {
		dst = slices.Grow(dst, HeaderSize+size)
		dst = dst[:start+HeaderSize]
		dst = appendRecords(dst, recs, baseTS, now)
	} else {
		if size > MaxUncompressedSize {
			return dst, api.Errorf(api.CodeRecordTooLarge, "records take %d bytes, more than the %d a compressed batch may hold",
				size, MaxUncompressedSize)
		}
		s := encodeScratchPool.Get().(*encodeScratch)
		defer s.release()
		s.raw = appendRecords(slices.Grow(s.raw[:0], size), recs, baseTS, now)
		var err error
		if s.comp, err = compress(s.comp[:0], s.raw, opt.Compression); err != nil {
			return dst, api.Errorf(api.CodeInternal, "compressing records with %v: %v", opt.Compression, err)
		}
		dst = slices.Grow(dst, HeaderSize+len(s.comp))
		dst = dst[:start+HeaderSize]
		dst = append(dst, s.comp...)
	}

	batch := dst[start:]
	h.BatchLength = int32(len(batch) - batchLengthOverhead)
	putBatchHeader(batch, &h)
	binary.BigEndian.PutUint32(batch[offCRC:], batchCRC(batch))
	return dst, nil
}

// appendRecords appends the encoded records to dst, which must already have room
// for them. now substitutes for zero timestamps, exactly as in the sizing pass.
func appendRecords(dst []byte, recs []Record, baseTS, now int64) []byte {
	for i := range recs {
		r := &recs[i]
		ts := r.Timestamp
		if ts == 0 {
			ts = now
		}
		tsDelta := ts - baseTS
		dst = appendVarint(dst, int64(recordBodySize(r, tsDelta, int32(i))))
		dst = append(dst, 0) // attributes: no record-level attributes are defined
		dst = appendVarint(dst, tsDelta)
		dst = appendVarint(dst, int64(i))
		dst = appendNullableBytes(dst, r.Key)
		dst = appendNullableBytes(dst, r.Value)
		dst = appendVarint(dst, int64(len(r.Headers)))
		for j := range r.Headers {
			hd := &r.Headers[j]
			dst = appendVarint(dst, int64(len(hd.Key)))
			dst = append(dst, hd.Key...)
			dst = appendNullableBytes(dst, hd.Value)
		}
	}
	return dst
}

// recordBodySize is the encoded size of a record after its length field.
func recordBodySize(r *Record, tsDelta int64, offsetDelta int32) int {
	n := 1 + varintSize(tsDelta) + varintSize(int64(offsetDelta)) +
		nullableBytesSize(r.Key) + nullableBytesSize(r.Value) +
		varintSize(int64(len(r.Headers)))
	for j := range r.Headers {
		hd := &r.Headers[j]
		n += varintSize(int64(len(hd.Key))) + len(hd.Key) + nullableBytesSize(hd.Value)
	}
	return n
}

// Decode verifies b as one whole batch (see Verify), decompresses its
// records and decodes them, with absolute offsets (baseOffset + offsetDelta) and
// absolute timestamps (baseTimestamp + timestampDelta, or maxTimestamp for every
// record when the batch uses LogAppendTime).
//
// The returned Keys, Values and header Values alias memory the caller must not
// modify while it uses them: b itself for an uncompressed batch, or one buffer
// freshly allocated for the decompressed records. Null keys and values decode as
// nil, empty ones as non-nil empty slices.
//
// Errors are CORRUPT_RECORD: bad header, size or CRC, unknown codec, a records
// section that does not decompress or would exceed MaxUncompressedSize, a
// record whose lengths overrun it, a record count that disagrees with the header,
// or bytes left over after the last record. Every length is checked against the
// bytes that remain before anything is allocated for it. The header is returned
// whenever it parsed, so a caller can say which batch was damaged.
func Decode(b []byte) (Header, []Record, error) {
	h, err := Verify(b)
	if err != nil {
		return h, nil, err
	}
	data := b[HeaderSize:]
	// An empty compressed section holds nothing to decompress: Kafka leaves such a
	// batch behind when compaction removes every record but the batch must stay
	// to keep producer state.
	if c := h.Compression(); c != api.CompressionNone && !(len(data) == 0 && h.RecordCount == 0) {
		if data, err = decompress(data, c); err != nil {
			return h, nil, api.Errorf(api.CodeCorruptRecord, "batch at offset %d: decompressing %v records: %v", h.BaseOffset, c, err)
		}
	}
	recs, err := decodeRecords(data, &h)
	if err != nil {
		return h, nil, err
	}
	return h, recs, nil
}

// headerKeyCacheSize is how many header positions decodeRecords remembers keys
// for; records of one batch usually carry the same few header keys in the same
// order.
const headerKeyCacheSize = 8

// decodeRecords decodes the h.RecordCount records in data, which must be used
// exactly.
func decodeRecords(data []byte, h *Header) ([]Record, error) {
	count := int(h.RecordCount)
	// The count is untrusted: size the slice by what data can actually hold.
	recs := make([]Record, 0, min(count, len(data)/minRecordSize))
	// All headers of the batch share one backing array, so a batch costs one
	// headers allocation (plus growth) instead of one per record.
	var hdrs []RecordHeader
	// A header key is a string, so decoding one allocates; reuse the string when
	// the key at the same position in the previous record was the same.
	var keyCache [headerKeyCacheSize]string
	logAppendTime := h.LogAppendTime()

	all := fieldReader{b: data}
	for i := 0; i < count; i++ {
		length := all.varint("length")
		if all.bad != "" {
			return nil, corruptRecord(h, i, "malformed %s", all.bad)
		}
		if length < 0 || int(length) > all.left() {
			return nil, corruptRecord(h, i, "length %d overruns the %d bytes left", length, all.left())
		}
		end := all.off + int(length)
		rd := fieldReader{b: data[:end], off: all.off}
		all.off = end

		rd.byte("attributes") // no record-level attributes are defined
		tsDelta := rd.varlong("timestampDelta")
		offsetDelta := rd.varint("offsetDelta")
		key := rd.nullableBytes("key")
		value := rd.nullableBytes("value")
		nh := rd.varint("headerCount")
		if rd.bad != "" {
			return nil, corruptRecord(h, i, "malformed %s", rd.bad)
		}
		if nh < 0 || int(nh) > rd.left()/minHeaderSize {
			return nil, corruptRecord(h, i, "header count %d does not fit the %d bytes left", nh, rd.left())
		}
		if nh > 0 && hdrs == nil {
			// Guess every record has as many headers as the first that has any,
			// bounded by how many headers the remaining bytes could hold.
			hdrs = make([]RecordHeader, 0, min(int(nh)*(count-i), (len(data)-rd.off)/minHeaderSize))
		}
		first := len(hdrs)
		for j := 0; j < int(nh); j++ {
			kb := rd.bytes("header key")
			hv := rd.nullableBytes("header value")
			if rd.bad != "" {
				return nil, corruptRecord(h, i, "header %d: malformed %s", j, rd.bad)
			}
			var k string
			if j < headerKeyCacheSize {
				if keyCache[j] != string(kb) { // the conversion in a comparison does not allocate
					keyCache[j] = string(kb)
				}
				k = keyCache[j]
			} else {
				k = string(kb)
			}
			hdrs = append(hdrs, RecordHeader{Key: k, Value: hv})
		}
		if rd.left() != 0 {
			return nil, corruptRecord(h, i, "%d bytes left over inside the record", rd.left())
		}

		// Filled in place: appending a whole Record would copy it with a bulk
		// write barrier whenever a collection is running.
		recs = append(recs, Record{})
		r := &recs[len(recs)-1]
		r.Offset = h.BaseOffset + int64(offsetDelta)
		r.Timestamp = h.BaseTimestamp + tsDelta
		if logAppendTime {
			r.Timestamp = h.MaxTimestamp
		}
		r.Key, r.Value = key, value
		if nh > 0 {
			// Provisional: hdrs may still move when it grows; fixed up below.
			r.Headers = hdrs[first:]
		}
	}
	if all.left() != 0 {
		return nil, api.Errorf(api.CodeCorruptRecord, "batch at offset %d: %d bytes left over after its %d records",
			h.BaseOffset, all.left(), count)
	}
	// Point every record's headers into the final backing array. The capacity is
	// clipped so appending to one record's headers cannot overwrite the next's.
	at := 0
	for i := range recs {
		if n := len(recs[i].Headers); n > 0 {
			recs[i].Headers = hdrs[at : at+n : at+n]
			at += n
		}
	}
	return recs, nil
}

// corruptRecord is the CORRUPT_RECORD error for record i of the batch h heads.
func corruptRecord(h *Header, i int, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeCorruptRecord, "batch at offset %d, record %d: %s", h.BaseOffset, i, fmt.Sprintf(format, args...))
}

// fieldReader reads fields from b starting at off, advancing past each. The
// first field that does not parse sets bad to its name and moves off to the end,
// so every later read fails too and a run of reads needs one check at the end.
// It advances an index rather than reslicing b: the reader lives on the stack,
// but the methods that are not inlined would otherwise store a pointer through
// r on every field, and each such store pays a GC write barrier while a
// collection runs.
type fieldReader struct {
	b   []byte
	off int
	bad string
}

func (r *fieldReader) left() int { return len(r.b) - r.off }

func (r *fieldReader) fail(field string) {
	if r.bad == "" {
		r.bad = field
	}
	r.off = len(r.b)
}

func (r *fieldReader) byte(field string) byte {
	if r.off >= len(r.b) {
		r.fail(field)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// varlong and varint take the one-byte encoding, which most lengths and deltas
// in a batch use, without a call; longer ones go the slow way.

func (r *fieldReader) varlong(field string) int64 {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c < 0x80 {
			r.off++
			return int64(c>>1) ^ -int64(c&1)
		}
	}
	return r.varlongSlow(field)
}

func (r *fieldReader) varlongSlow(field string) int64 {
	v, n := readVarlong(r.b[r.off:])
	if n == 0 {
		r.fail(field)
		return 0
	}
	r.off += n
	return v
}

func (r *fieldReader) varint(field string) int32 {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c < 0x80 {
			r.off++
			return int32(c>>1) ^ -int32(c&1)
		}
	}
	return r.varintSlow(field)
}

func (r *fieldReader) varintSlow(field string) int32 {
	v, n := readVarlong(r.b[r.off:])
	if n == 0 || n > maxVarintLen32 || v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(field)
		return 0
	}
	r.off += n
	return int32(v)
}

// bytes reads a length-prefixed field that may not be null.
func (r *fieldReader) bytes(field string) []byte {
	n := r.varint(field)
	if n < 0 || int(n) > r.left() {
		r.fail(field)
		return nil
	}
	return r.take(int(n))
}

// nullableBytes reads a length-prefixed field where length -1 is null (nil).
func (r *fieldReader) nullableBytes(field string) []byte {
	n := r.varint(field)
	if n == -1 {
		return nil
	}
	if n < 0 || int(n) > r.left() {
		r.fail(field)
		return nil
	}
	return r.take(int(n))
}

// take returns the next n bytes, which the caller has checked are there, with
// the capacity clipped so appending to them cannot overwrite what follows.
func (r *fieldReader) take(n int) []byte {
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

// maxVarintLen32 is the longest encoding of a 32-bit varint; Kafka rejects longer.
const maxVarintLen32 = 5

// maxVarintLen64 is the longest encoding of a 64-bit varint.
const maxVarintLen64 = 10

// readVarlong decodes a zigzag varint from the start of b and returns it with the
// number of bytes it took, or n == 0 if b does not start with a valid varint (too
// short, or longer than ten bytes, or overflowing 64 bits).
func readVarlong(b []byte) (v int64, n int) {
	// Most lengths and deltas in a batch take one or two bytes (below 8 KiB).
	if len(b) > 0 && b[0] < 0x80 {
		u := uint64(b[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	if len(b) > 1 && b[1] < 0x80 {
		u := uint64(b[0]&0x7f) | uint64(b[1])<<7
		return int64(u>>1) ^ -int64(u&1), 2
	}
	var u uint64
	for i := 0; i < len(b) && i < maxVarintLen64; i++ {
		c := b[i]
		if c < 0x80 {
			if i == maxVarintLen64-1 && c > 1 {
				return 0, 0 // overflows 64 bits
			}
			u |= uint64(c) << (7 * i)
			return int64(u>>1) ^ -int64(u&1), i + 1
		}
		u |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// appendVarint appends v zigzag-encoded, exactly as binary.AppendVarint does.
func appendVarint(dst []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}

// varintSize is how many bytes appendVarint takes for v.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

// appendNullableBytes appends b's length (-1 when nil) and b.
func appendNullableBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 1) // zigzag(-1)
	}
	dst = appendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func nullableBytesSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}
