package recordbatch

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/sluice-io/sluice/api"
)

// A record batch is Kafka's RecordBatch v2 (magic 2), byte for byte, so that the
// log can hold what Kafka clients produce and hand it back to Kafka consumers
// unchanged. All integers are big-endian. The fixed header is:
//
//	offset size field
//	     0    8 baseOffset
//	     8    4 batchLength           bytes after this field
//	    12    4 partitionLeaderEpoch
//	    16    1 magic                 always 2
//	    17    4 crc                   CRC-32C of bytes 21 to the end
//	    21    2 attributes
//	    23    4 lastOffsetDelta
//	    27    8 baseTimestamp
//	    35    8 maxTimestamp
//	    43    8 producerId
//	    51    2 producerEpoch
//	    53    4 baseSequence
//	    57    4 recordCount
//	    61    - records, compressed as a whole when the codec is not none
//
// The CRC deliberately leaves out baseOffset and partitionLeaderEpoch: the leader
// stamps both when it appends a batch, and that must not invalidate the checksum
// the producer computed.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
)

// HeaderSize is the size of the fixed RecordBatch v2 header; records start here.
const HeaderSize = 61

// MagicV2 is the only batch format version this package reads or writes.
const MagicV2 = 2

// batchLengthOverhead is how many header bytes precede the batchLength field's
// coverage (baseOffset and batchLength itself), so a batch occupies
// batchLengthOverhead + batchLength bytes.
const batchLengthOverhead = 12

// minBatchLength is the batchLength of a batch with no record bytes at all.
const minBatchLength = HeaderSize - batchLengthOverhead

// Bits of the attributes field.
const (
	// AttrCompressionMask selects the codec (see Compression).
	AttrCompressionMask int16 = 0x07
	// AttrLogAppendTime marks timestamps as stamped by the broker on append; when
	// set, every record's timestamp is the batch's MaxTimestamp.
	AttrLogAppendTime int16 = 0x08
	// AttrTransactional marks a batch written inside a transaction.
	AttrTransactional int16 = 0x10
	// AttrControl marks a batch of control records (transaction markers).
	AttrControl int16 = 0x20
)

// Sentinel values Kafka writes in header fields that carry no information.
const (
	// NoProducerID is the producerId, producerEpoch and baseSequence of a batch
	// written by a non-idempotent producer.
	NoProducerID = -1
	// NoPartitionLeaderEpoch is the partitionLeaderEpoch of a batch no leader has
	// stamped yet, as producers send it.
	NoPartitionLeaderEpoch = -1
)

// castagnoli is the CRC-32C table. The standard library switches to the SSE4.2 /
// ARMv8 CRC instructions for this polynomial, so checksumming runs at memory speed.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded fixed header of a record batch.
type Header struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordCount          int32
}

// Size is the number of bytes the whole batch occupies, header included.
func (h Header) Size() int { return batchLengthOverhead + int(h.BatchLength) }

// LastOffset is the offset of the batch's last record. It survives compaction:
// a compacted batch may hold fewer records but keeps its LastOffsetDelta, so the
// next batch's offsets stay where they were.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset the record after this batch gets.
func (h Header) NextOffset() int64 { return h.LastOffset() + 1 }

// Compression is the codec the records section is compressed with. It may be a
// value outside the known codecs for a corrupt or foreign batch; see Compression.Valid.
func (h Header) Compression() api.Compression {
	return api.Compression(h.Attributes & AttrCompressionMask)
}

// LogAppendTime reports whether timestamps were set by the broker on append.
func (h Header) LogAppendTime() bool { return h.Attributes&AttrLogAppendTime != 0 }

// Transactional reports whether the batch was written inside a transaction.
func (h Header) Transactional() bool { return h.Attributes&AttrTransactional != 0 }

// Control reports whether the batch holds control records.
func (h Header) Control() bool { return h.Attributes&AttrControl != 0 }

// ParseHeader decodes the fixed header at the start of b, which must hold at
// least HeaderSize bytes (it may hold more, such as the rest of the batch and
// the batches after it). It checks that the header is structurally sound — magic 2,
// a batchLength that covers at least the header, non-negative recordCount and
// lastOffsetDelta — but not that the batch is whole or that its CRC matches; see
// Verify. Errors are CORRUPT_RECORD and return a zero header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, api.Errorf(api.CodeCorruptRecord, "batch header needs %d bytes, have %d", HeaderSize, len(b))
	}
	h := Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		BatchLength:          int32(binary.BigEndian.Uint32(b[offBatchLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		RecordCount:          int32(binary.BigEndian.Uint32(b[offRecordCount:])),
	}
	switch {
	case h.Magic != MagicV2:
		return Header{}, api.Errorf(api.CodeCorruptRecord, "batch magic is %d, only %d is supported", h.Magic, MagicV2)
	case h.BatchLength < minBatchLength:
		return Header{}, api.Errorf(api.CodeCorruptRecord, "batch length %d is shorter than the %d-byte header", h.BatchLength, minBatchLength)
	case h.RecordCount < 0:
		return Header{}, api.Errorf(api.CodeCorruptRecord, "batch record count %d is negative", h.RecordCount)
	case h.LastOffsetDelta < 0:
		return Header{}, api.Errorf(api.CodeCorruptRecord, "batch last offset delta %d is negative", h.LastOffsetDelta)
	}
	return h, nil
}

// putBatchHeader writes h into the first HeaderSize bytes of b, CRC included
// as given; callers compute the CRC afterwards with batchCRC.
func putBatchHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1] // one bounds check for all the writes below
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(h.BatchLength))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[offMagic] = byte(h.Magic)
	binary.BigEndian.PutUint32(b[offCRC:], h.CRC)
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], uint64(h.BaseTimestamp))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(h.RecordCount))
}

// batchCRC is the CRC-32C a whole batch b should carry in its crc field.
func batchCRC(b []byte) uint32 {
	return crc32.Checksum(b[offAttributes:], castagnoli)
}

// Verify checks that b is exactly one whole, intact batch: its header
// parses, len(b) equals the size the header declares, the CRC-32C matches and the
// codec is one this package knows. It does not look inside the records; Decode
// does. Errors are CORRUPT_RECORD; the header is returned whenever it parsed, so a
// caller can say which batch was damaged.
func Verify(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) != batchLengthOverhead+int64(h.BatchLength) {
		return h, api.Errorf(api.CodeCorruptRecord, "batch at offset %d declares %d bytes, have %d",
			h.BaseOffset, batchLengthOverhead+int64(h.BatchLength), len(b))
	}
	if got := batchCRC(b); got != h.CRC {
		return h, api.Errorf(api.CodeCorruptRecord, "batch at offset %d has CRC %#08x, its bytes give %#08x", h.BaseOffset, h.CRC, got)
	}
	if c := h.Compression(); !c.Valid() {
		return h, api.Errorf(api.CodeCorruptRecord, "batch at offset %d uses unknown compression codec %d", h.BaseOffset, int8(c))
	}
	return h, nil
}

// SetBaseOffset stamps the batch's baseOffset in place. The field is outside the
// CRC, so the batch stays valid. b must hold at least the first 8 bytes of a batch.
func SetBaseOffset(b []byte, off int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off))
}

// SetLeaderEpoch stamps the batch's partitionLeaderEpoch in place. The field is
// outside the CRC, so the batch stays valid. b must hold at least the first 16
// bytes of a batch.
func SetLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// Scan walks b, a run of concatenated batches, and returns how many bytes
// at its start form whole, structurally valid batches. It stops, without an error,
// at the first batch that is partial (a torn write at the tail of a log, a body cut
// short) or whose header does not parse; with verify it also stops at the first
// batch Verify would reject (a CRC mismatch or an unknown codec). A caller that needs every byte to be a batch —
// splitting a produce body — compares the result with len(b); one recovering a log
// truncates to it.
//
// fn, if not nil, is called for each whole batch in order; batch is that batch's
// bytes, with its capacity clipped so appending to it cannot overwrite the next
// one. If fn returns an error, Scan stops and returns that error with the
// number of bytes before the batch fn rejected.
func Scan(b []byte, verify bool, fn func(h Header, batch []byte) error) (int, error) {
	off := 0
	for len(b)-off >= HeaderSize {
		h, err := ParseHeader(b[off:])
		if err != nil {
			break
		}
		size := batchLengthOverhead + int64(h.BatchLength)
		if size > int64(len(b)-off) {
			break
		}
		end := off + int(size)
		batch := b[off:end:end]
		if verify && (batchCRC(batch) != h.CRC || !h.Compression().Valid()) {
			break
		}
		if fn != nil {
			if err := fn(h, batch); err != nil {
				return off, err
			}
		}
		off = end
	}
	return off, nil
}
