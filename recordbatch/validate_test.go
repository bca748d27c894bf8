package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// section concatenates encoded records into a records section.
func section(recs ...[]byte) []byte { return bytes.Join(recs, nil) }

// withCodec compresses an uncompressed test batch's records section with c
// and reseals it.
func withCodec(t *testing.T, h testHeader, records []byte, c api.Compression) []byte {
	t.Helper()
	h.attributes |= int16(c)
	if c != api.CompressionNone {
		records = mustCompress(t, records, c)
	}
	return sealBatch(h, records)
}

func TestValidateBatch(t *testing.T) {
	const ts = 1_700_000_000_000
	// three records at deltas 0, 1, 2 with timestamps ts, ts+5, ts+2
	three := section(rawRecord(0, 0, []byte("a"), []byte("1")), rawRecord(5, 1, nil, []byte("2")), rawRecord(2, 2, []byte("c"), nil, RecordHeader{Key: "h", Value: []byte("v")}))
	good := plainHeader(3)
	good.baseTimestamp, good.maxTimestamp = ts, ts+5

	tests := []struct {
		name    string
		h       func(h testHeader) testHeader
		records []byte
		src     Source
		want    api.Code // "" accepts
	}{
		{"valid", nil, three, Produced, ""},
		{"valid, replicated", nil, three, Replicated, ""},
		{"count above the records", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 4, 3; return h }, three, Produced, api.CodeCorruptRecord},
		{"count below the records", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 2, 1; return h }, three, Produced, api.CodeCorruptRecord},
		{"count far past what the bytes hold", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = math.MaxInt32, math.MaxInt32-1; return h }, three, Produced, api.CodeCorruptRecord},
		{"last offset delta past the count", func(h testHeader) testHeader { h.lastOffsetDelta = 5; return h }, three, Produced, api.CodeCorruptRecord},
		{"offset deltas out of order", nil, section(rawRecord(0, 0, nil, nil), rawRecord(0, 2, nil, nil), rawRecord(5, 1, nil, nil)), Produced, api.CodeCorruptRecord},
		{"offset deltas repeated", nil, section(rawRecord(0, 0, nil, nil), rawRecord(0, 0, nil, nil), rawRecord(5, 1, nil, nil)), Produced, api.CodeCorruptRecord},
		{"record length past the section", nil, append(section(rawRecord(0, 0, nil, nil), rawRecord(5, 1, nil, nil)), 40, 0, 0), Produced, api.CodeCorruptRecord},
		{"record length longer than its fields", nil, section(rawRecord(0, 0, nil, nil), rawRecord(5, 1, nil, nil), append([]byte{16}, rawRecord(2, 2, nil, nil)[1:]...), []byte{0}), Produced, api.CodeCorruptRecord},
		{"value length past the record", nil, section(rawRecord(0, 0, nil, nil), rawRecord(5, 1, nil, nil), []byte{10, 0, 4, 4, 1, 40, 'x', 'y', 'z', 0, 0}), Produced, api.CodeCorruptRecord},
		{"header count past the record", nil, section(rawRecord(0, 0, nil, nil), rawRecord(5, 1, nil, nil), []byte{12, 0, 4, 4, 1, 1, 100, 2, 'k', 2, 'v', 0, 0}), Produced, api.CodeCorruptRecord},
		{"bytes after the last record", nil, append(bytes.Clone(three), 0), Produced, api.CodeCorruptRecord},
		{"max timestamp below a record's", func(h testHeader) testHeader { h.maxTimestamp = ts + 2; return h }, three, Produced, api.CodeCorruptRecord},
		{"max timestamp above every record's", func(h testHeader) testHeader { h.maxTimestamp = ts + 9; return h }, three, Produced, api.CodeCorruptRecord},
		{"negative timestamp", func(h testHeader) testHeader { h.baseTimestamp, h.maxTimestamp = -10, -5; return h }, three, Produced, api.CodeInvalidRecord},
		{"timestamp delta overflows", func(h testHeader) testHeader { h.baseTimestamp = math.MaxInt64 - 1; return h }, three, Replicated, api.CodeCorruptRecord},
		{"log-append time ignores record timestamps", func(h testHeader) testHeader {
			h.attributes, h.baseTimestamp, h.maxTimestamp = AttrLogAppendTime, -1, ts
			return h
		}, three, Produced, ""},
		{"log-append time, negative", func(h testHeader) testHeader { h.attributes, h.maxTimestamp = AttrLogAppendTime, -1; return h }, three, Produced, api.CodeInvalidRecord},
		{"control batch from a producer", func(h testHeader) testHeader { h.attributes = AttrControl; return h }, three, Produced, api.CodeInvalidRecord},
		{"transactional batch from a producer", func(h testHeader) testHeader { h.attributes = AttrTransactional; return h }, three, Produced, api.CodeInvalidRecord},

		// What compaction leaves, as a follower copies it.
		{"compacted: fewer records than offsets", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 2, 9; return h },
			section(rawRecord(0, 3, nil, nil), rawRecord(5, 9, nil, nil)), Replicated, ""},
		{"compacted, from a producer", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 2, 9; return h },
			section(rawRecord(0, 3, nil, nil), rawRecord(5, 9, nil, nil)), Produced, api.CodeCorruptRecord},
		{"compacted: no records", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 0, 9; return h }, nil, Replicated, ""},
		{"compacted: deltas going down", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 2, 9; return h },
			section(rawRecord(0, 9, nil, nil), rawRecord(5, 3, nil, nil)), Replicated, api.CodeCorruptRecord},
		{"compacted: delta past the range", func(h testHeader) testHeader { h.count, h.lastOffsetDelta = 2, 9; return h },
			section(rawRecord(0, 3, nil, nil), rawRecord(5, 10, nil, nil)), Replicated, api.CodeCorruptRecord},
		{"more records than offsets", func(h testHeader) testHeader { h.lastOffsetDelta = 1; return h }, three, Replicated, api.CodeCorruptRecord},
	}
	for _, tt := range tests {
		for _, c := range allCodecs {
			h := good
			if tt.h != nil {
				h = tt.h(h)
			}
			if len(tt.records) == 0 && c != api.CompressionNone {
				continue // an empty compressed section is only ever empty
			}
			t.Run(tt.name+"/"+c.String(), func(t *testing.T) {
				b := withCodec(t, h, tt.records, c)
				got, err := Validate(b, tt.src)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("Validate: %v", err)
					}
					if got.RecordCount != h.count {
						t.Fatalf("header record count %d, want %d", got.RecordCount, h.count)
					}
					// What the validator accepts, readers decode.
					if _, recs, err := Decode(b); err != nil || len(recs) != int(h.count) {
						t.Fatalf("Decode of an accepted batch: %d records, %v", len(recs), err)
					}
					return
				}
				var e *api.Error
				if !errors.As(err, &e) || e.Code != tt.want {
					t.Fatalf("Validate = %v, want %s", err, tt.want)
				}
			})
		}
	}
}

// TestValidateBatchAcceptsWhatThisPackageWrites: Encode's batches in
// every codec pass as produced and as replicated, and Filter's
// compacted ones as replicated.
func TestValidateBatchAcceptsWhatThisPackageWrites(t *testing.T) {
	recs := benchRecords()
	for _, c := range allCodecs {
		b := mustEncode(t, recs, Options{Compression: c, ProducerID: 7, ProducerEpoch: 1, BaseSequence: 40})
		for _, src := range []Source{Produced, Replicated} {
			if _, err := Validate(b, src); err != nil {
				t.Fatalf("%v, source %d: %v", c, src, err)
			}
		}
		odd, kept, err := Filter(nil, b, func(r *Record) bool { return r.Offset%2 == 1 })
		if err != nil || kept != len(recs)/2 {
			t.Fatalf("Filter: kept %d, %v", kept, err)
		}
		if _, err := Validate(odd, Replicated); err != nil {
			t.Fatalf("%v: compacted batch: %v", c, err)
		}
		none, _, err := Filter(nil, b, func(*Record) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Validate(none, Replicated); err != nil {
			t.Fatalf("%v: emptied batch: %v", c, err)
		}
	}
}

// TestValidateBatchDecompressionCap: a batch that decompresses past
// MaxUncompressedSize is refused without decompressing it all.
func TestValidateBatchDecompressionCap(t *testing.T) {
	bomb := append(binary.AppendUvarint(nil, MaxUncompressedSize+1), 0, 0, 0, 0) // a snappy block claiming 64 MiB + 1
	h := plainHeader(1)
	h.attributes = int16(api.CompressionSnappy)
	if _, err := Validate(sealBatch(h, bomb), Produced); !errors.Is(err, api.ErrCorruptRecord) {
		t.Fatalf("Validate = %v, want CORRUPT_RECORD", err)
	}
}

// FuzzValidateBatch checks that no input makes Validate panic, that its
// errors are CORRUPT_RECORD or INVALID_RECORD, and that every batch it
// accepts Decode decodes into as many records as the header says, with
// offsets that go up inside the batch's range (dense for a produced batch).
func FuzzValidateBatch(f *testing.F) {
	for _, c := range allCodecs {
		recs := []Record{{Timestamp: 1, Key: []byte("k"), Value: []byte("v"), Headers: []RecordHeader{{Key: "h", Value: nil}}}, {Timestamp: 3, Value: []byte("w")}}
		f.Add(mustEncode(f, recs, Options{Compression: c}), false)
		compacted, _, _ := Filter(nil, mustEncode(f, recs, Options{Compression: c}), func(r *Record) bool { return r.Offset == 1 })
		f.Add(compacted, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, replicated bool) {
		src := Produced
		if replicated {
			src = Replicated
		}
		fuzzValidateOne(t, data, src)
		// Reseal a copy, as FuzzDecodeBatch does, so mutations reach the records.
		if len(data) >= HeaderSize {
			sealed := bytes.Clone(data)
			binary.BigEndian.PutUint32(sealed[8:], uint32(len(sealed)-12))
			binary.BigEndian.PutUint32(sealed[17:], crc32.Checksum(sealed[21:], castagnoli))
			fuzzValidateOne(t, sealed, src)
		}
	})
}

func fuzzValidateOne(t *testing.T, data []byte, src Source) {
	h, err := Validate(data, src)
	if err != nil {
		var e *api.Error
		if !errors.As(err, &e) || (e.Code != api.CodeCorruptRecord && e.Code != api.CodeInvalidRecord) {
			t.Fatalf("Validate error %v is neither CORRUPT_RECORD nor INVALID_RECORD", err)
		}
		return
	}
	_, recs, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode refused a batch Validate accepted: %v", err)
	}
	if len(recs) != int(h.RecordCount) {
		t.Fatalf("%d records, header says %d", len(recs), h.RecordCount)
	}
	prev := h.BaseOffset - 1
	for i, r := range recs {
		if r.Offset <= prev || r.Offset > h.LastOffset() || (src == Produced && r.Offset != h.BaseOffset+int64(i)) {
			t.Fatalf("record %d at offset %d after %d, batch range [%d, %d]", i, r.Offset, prev, h.BaseOffset, h.LastOffset())
		}
		prev = r.Offset
	}
}

// BenchmarkValidateBatch is the cost of Validate, next to
// BenchmarkVerifyBatch (header and CRC only) for the uncompressed case.
func BenchmarkValidateBatch(b *testing.B) {
	recs := benchRecords()
	raw := mustEncode(b, recs, Options{})
	for _, c := range allCodecs {
		batch := mustEncode(b, recs, Options{Compression: c})
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(batch, Produced); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVerifyReplicated: a follower's check refuses what the CRC or the
// header gives away, takes what compaction leaves, and leaves the records
// to the leader's Validate.
func TestVerifyReplicated(t *testing.T) {
	three := section(rawRecord(0, 0, []byte("a"), []byte("1")), rawRecord(5, 1, nil, []byte("2")), rawRecord(2, 2, nil, nil))
	good := sealBatch(plainHeader(3), three)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 0xff
	compacted := plainHeader(0)
	compacted.lastOffsetDelta = 9
	tooMany := plainHeader(3)
	tooMany.lastOffsetDelta = 1
	// Header and CRC agree, the records do not: only Validate can tell.
	forged := plainHeader(4)
	forged.lastOffsetDelta = 3
	tests := []struct {
		name string
		b    []byte
		want api.Code // "" accepts
	}{
		{"valid", good, ""},
		{"compacted: no records", sealBatch(compacted, nil), ""},
		{"bad crc", flipped, api.CodeCorruptRecord},
		{"torn", good[:len(good)-1], api.CodeCorruptRecord},
		{"more records than offsets", sealBatch(tooMany, three), api.CodeCorruptRecord},
		{"records the header does not describe", sealBatch(forged, three), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyReplicated(tt.b)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("VerifyReplicated: %v", err)
				}
				return
			}
			var e *api.Error
			if !errors.As(err, &e) || e.Code != tt.want {
				t.Fatalf("VerifyReplicated = %v, want %s", err, tt.want)
			}
		})
	}
	if _, err := Validate(sealBatch(forged, three), Replicated); err == nil {
		t.Fatal("Validate took records its header does not describe")
	}
}
