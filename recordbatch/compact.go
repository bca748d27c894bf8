package recordbatch

import (
	"encoding/binary"
	"slices"

	"github.com/sluice-io/sluice/api"
)

// Filter appends to dst the batch b rewritten with only the records keep
// accepts, as log compaction needs it: offsets never change. The new batch
// keeps b's header — base offset, last offset delta (so it still covers b's
// whole offset range and the next batch's offsets stay where they were),
// leader epoch, attributes and codec, base and max timestamps, producer id,
// epoch and base sequence — and each surviving record's bytes as they were,
// offset and timestamp deltas included. Only recordCount, batchLength, the
// records section (re-compressed with b's codec) and the CRC are new.
//
// keep sees each record decoded as Decode decodes it; the record aliases
// b (or its decompressed records) and must not be kept after keep returns.
// When every record survives, b is appended unchanged; when none does, the
// result is a batch of zero records and an empty records section (which
// Decode reads, and Kafka writes to keep a producer's last sequence), and
// the caller may cut it off again at len(dst).
//
// Errors are Decode's (CORRUPT_RECORD), or INTERNAL when re-compressing
// fails; dst is then returned unchanged.
func Filter(dst, b []byte, keep func(r *Record) bool) (out []byte, kept int, err error) {
	h, err := Verify(b)
	if err != nil {
		return dst, 0, err
	}
	data := b[HeaderSize:]
	c := h.Compression()
	if c != api.CompressionNone && !(len(data) == 0 && h.RecordCount == 0) {
		if data, err = decompress(data, c); err != nil {
			return dst, 0, api.Errorf(api.CodeCorruptRecord, "batch at offset %d: decompressing %v records: %v", h.BaseOffset, c, err)
		}
	}
	recs, err := decodeRecords(data, &h)
	if err != nil {
		return dst, 0, err
	}

	s := encodeScratchPool.Get().(*encodeScratch)
	defer s.release()
	raw := s.raw[:0]
	off := 0
	for i := range recs {
		// decodeRecords has checked every length, so this cannot fail.
		length, n := readVarlong(data[off:])
		end := off + n + int(length)
		if keep(&recs[i]) {
			raw = append(raw, data[off:end]...)
			kept++
		}
		off = end
	}
	s.raw = raw
	if kept == len(recs) {
		return append(dst, b...), kept, nil
	}

	section := raw
	if c != api.CompressionNone && len(raw) > 0 {
		if s.comp, err = compress(s.comp[:0], raw, c); err != nil {
			return dst, 0, api.Errorf(api.CodeInternal, "compressing records with %v: %v", c, err)
		}
		section = s.comp
	}
	h.RecordCount = int32(kept)
	h.BatchLength = int32(minBatchLength + len(section))
	start := len(dst)
	dst = slices.Grow(dst, HeaderSize+len(section))
	dst = dst[:start+HeaderSize]
	dst = append(dst, section...)
	batch := dst[start:]
	putBatchHeader(batch, &h)
	binary.BigEndian.PutUint32(batch[offCRC:], batchCRC(batch))
	return dst, kept, nil
}
