package recordbatch

import (
	"math"
	"sync"

	"github.com/sluice-io/sluice/api"
)

// Source says who wrote a batch being appended, which decides how
// strictly Validate reads it.
type Source int

const (
	// Produced is a producer's batch on its way into a leader's log: every
	// offset from 0 to lastOffsetDelta holds a record, in order, and the batch
	// is neither transactional nor a control batch (this broker writes no
	// transaction markers, so it accepts none from clients).
	Produced Source = iota
	// Replicated is a batch a follower copies from its leader's log, where
	// log compaction may have removed records: it may hold fewer records than
	// its offset range, down to none, as long as their offsets still go up
	// inside that range.
	Replicated
)

// validateBufs pools the buffers Validate decompresses into: it only
// looks at the records, so nothing keeps the memory after it returns.
var validateBufs = sync.Pool{New: func() any { return new([]byte) }}

// Validate checks that b is exactly one batch every reader can decode
// and trust, so that no batch a log accepts can stall its consumers later.
// It runs Verify (header, size, CRC, codec), decompresses the records
// section if need be (refusing output over MaxUncompressedSize, into a
// pooled buffer), and walks every record without building it:
//
//   - the section holds exactly recordCount records and no bytes after them;
//   - every record's length covers exactly its fields, and every key, value
//     and header fits inside it (a header count is bounded by the bytes left);
//   - offset deltas: a Produced has recordCount = lastOffsetDelta+1 and
//     record i at delta i; a Replicated has at most lastOffsetDelta+1
//     records whose deltas strictly increase within [0, lastOffsetDelta];
//   - timestamps (CreateTime batches): baseTimestamp + timestampDelta does
//     not overflow; in a Produced every timestamp is non-negative and
//     maxTimestamp is the largest of them. A LogAppendTime batch's record
//     timestamps are never read (maxTimestamp stands for all of them), so
//     only its maxTimestamp must be non-negative.
//
// Errors are CORRUPT_RECORD for a batch whose bytes do not hold together,
// and INVALID_RECORD for a well-formed one this log does not take (a control
// or transactional batch from a producer, a negative timestamp). The header
// is returned whenever it parsed.
func Validate(b []byte, src Source) (Header, error) {
	h, err := Verify(b)
	if err != nil {
		return h, err
	}
	if err := checkBatchHeader(&h, src); err != nil {
		return h, err
	}
	data := b[HeaderSize:]
	if c := h.Compression(); c != api.CompressionNone && !(len(data) == 0 && h.RecordCount == 0) {
		bp := validateBufs.Get().(*[]byte)
		defer putValidateBuf(bp)
		if data, err = decompressInto(*bp, data, c); err != nil {
			return h, api.Errorf(api.CodeCorruptRecord, "batch at offset %d: decompressing %v records: %v", h.BaseOffset, c, err)
		}
		*bp = data
	}
	return h, validateRecords(data, &h, src)
}

// VerifyReplicated is a follower's check of a batch it copies from its
// leader: Verify (header, size, CRC-32C, codec) and Validate's header rules
// for a Replicated batch, without walking or decompressing the records.
// The leader's log only holds batches that passed Validate when they were
// produced (Append), and the CRC, which covers every byte after it, proves
// these are those bytes; walking them again cost a follower ten times the
// CRC (BenchmarkValidateBatch against BenchmarkVerifyBatch), and a hundred
// times for a gzip batch.
func VerifyReplicated(b []byte) (Header, error) {
	h, err := Verify(b)
	if err != nil {
		return h, err
	}
	return h, checkBatchHeader(&h, Replicated)
}

// maxPooledValidateBuf keeps one unusually large batch from pinning its
// decompressed size in the pool for good.
const maxPooledValidateBuf = 8 << 20

func putValidateBuf(bp *[]byte) {
	if cap(*bp) > maxPooledValidateBuf {
		*bp = nil
	}
	validateBufs.Put(bp)
}

// checkBatchHeader is Validate's header-only part.
func checkBatchHeader(h *Header, src Source) error {
	switch src {
	case Produced:
		if h.RecordCount <= 0 || h.LastOffsetDelta != h.RecordCount-1 {
			return api.Errorf(api.CodeCorruptRecord, "batch has %d records but last offset delta %d", h.RecordCount, h.LastOffsetDelta)
		}
		if h.Control() || h.Transactional() {
			return api.Errorf(api.CodeInvalidRecord, "batch at offset %d is a control or transactional batch; producers may send neither", h.BaseOffset)
		}
	case Replicated:
		if int64(h.RecordCount) > int64(h.LastOffsetDelta)+1 {
			return api.Errorf(api.CodeCorruptRecord, "batch has %d records but only %d offsets", h.RecordCount, int64(h.LastOffsetDelta)+1)
		}
	default:
		return api.Errorf(api.CodeInternal, "unknown batch source %d", src)
	}
	if h.LogAppendTime() && h.MaxTimestamp < 0 {
		return api.Errorf(api.CodeInvalidRecord, "batch at offset %d: log-append time %d is negative", h.BaseOffset, h.MaxTimestamp)
	}
	return nil
}

// validateRecords walks the h.RecordCount records in data, which must be used
// exactly, and applies Validate's record rules. It parses fields as
// decodeRecords does, so what it accepts Decode decodes.
func validateRecords(data []byte, h *Header, src Source) error {
	count := int(h.RecordCount)
	if count > len(data)/minRecordSize {
		return api.Errorf(api.CodeCorruptRecord, "batch at offset %d: %d records cannot fit in %d bytes", h.BaseOffset, count, len(data))
	}
	createTime := !h.LogAppendTime()
	produced := src == Produced
	maxTS := int64(math.MinInt64)
	prevDelta := int32(-1)

	all := fieldReader{b: data}
	for i := 0; i < count; i++ {
		length := all.varint("length")
		if all.bad != "" {
			return corruptRecord(h, i, "malformed %s", all.bad)
		}
		if length < 0 || int(length) > all.left() {
			return corruptRecord(h, i, "length %d overruns the %d bytes left", length, all.left())
		}
		end := all.off + int(length)
		rd := fieldReader{b: data[:end], off: all.off}
		all.off = end

		rd.byte("attributes")
		tsDelta := rd.varlong("timestampDelta")
		offsetDelta := rd.varint("offsetDelta")
		rd.nullableBytes("key")
		rd.nullableBytes("value")
		nh := rd.varint("headerCount")
		if rd.bad != "" {
			return corruptRecord(h, i, "malformed %s", rd.bad)
		}
		if nh < 0 || int(nh) > rd.left()/minHeaderSize {
			return corruptRecord(h, i, "header count %d does not fit the %d bytes left", nh, rd.left())
		}
		for j := 0; j < int(nh); j++ {
			rd.bytes("header key")
			rd.nullableBytes("header value")
		}
		if rd.bad != "" {
			return corruptRecord(h, i, "malformed %s", rd.bad)
		}
		if rd.left() != 0 {
			return corruptRecord(h, i, "%d bytes left over inside the record", rd.left())
		}

		if produced {
			if offsetDelta != int32(i) {
				return corruptRecord(h, i, "offset delta %d, want %d", offsetDelta, i)
			}
		} else if offsetDelta <= prevDelta || offsetDelta > h.LastOffsetDelta {
			return corruptRecord(h, i, "offset delta %d does not follow %d within [0, %d]", offsetDelta, prevDelta, h.LastOffsetDelta)
		}
		prevDelta = offsetDelta

		if createTime {
			ts := h.BaseTimestamp + tsDelta
			if (tsDelta > 0 && ts < h.BaseTimestamp) || (tsDelta < 0 && ts > h.BaseTimestamp) {
				return corruptRecord(h, i, "timestamp %d + delta %d overflows", h.BaseTimestamp, tsDelta)
			}
			if produced && ts < 0 {
				return api.Errorf(api.CodeInvalidRecord, "batch at offset %d, record %d: timestamp %d is negative", h.BaseOffset, i, ts)
			}
			maxTS = max(maxTS, ts)
		}
	}
	if all.left() != 0 {
		return api.Errorf(api.CodeCorruptRecord, "batch at offset %d: %d bytes left over after its %d records", h.BaseOffset, all.left(), count)
	}
	if produced && createTime && maxTS != h.MaxTimestamp {
		return api.Errorf(api.CodeCorruptRecord, "batch at offset %d: max timestamp %d, but its records' largest is %d", h.BaseOffset, h.MaxTimestamp, maxTS)
	}
	return nil
}
