package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestParseBatchHeader(t *testing.T) {
	valid := sealBatch(testHeader{
		baseOffset: 1000, leaderEpoch: 7, attributes: AttrTransactional | int16(api.CompressionZstd), lastOffsetDelta: 9,
		baseTimestamp: 11, maxTimestamp: 22, producerID: 33, producerEpoch: 44, baseSequence: 55, count: 10,
	}, []byte("records"))
	// with returns a copy of valid with put applied.
	with := func(put func(b []byte)) []byte {
		b := bytes.Clone(valid)
		put(b)
		return b
	}
	tests := []struct {
		name    string
		in      []byte
		wantErr bool
	}{
		{"valid", valid, false},
		{"header only is enough", valid[:HeaderSize], false},
		{"trailing bytes are fine", append(bytes.Clone(valid), 1, 2, 3), false},
		{"empty", nil, true},
		{"one byte short", valid[:HeaderSize-1], true},
		{"magic 1", with(func(b []byte) { b[16] = 1 }), true},
		{"magic 3", with(func(b []byte) { b[16] = 3 }), true},
		{"batch length shorter than the header", with(func(b []byte) { binary.BigEndian.PutUint32(b[8:], 48) }), true},
		{"negative batch length", with(func(b []byte) { binary.BigEndian.PutUint32(b[8:], 0xffffffff) }), true},
		{"negative record count", with(func(b []byte) { binary.BigEndian.PutUint32(b[57:], 0xffffffff) }), true},
		{"negative last offset delta", with(func(b []byte) { binary.BigEndian.PutUint32(b[23:], 0x80000000) }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(tt.in)
			if tt.wantErr {
				if !errors.Is(err, api.ErrCorruptRecord) {
					t.Fatalf("err = %v, want CORRUPT_RECORD", err)
				}
				if h != (Header{}) {
					t.Errorf("header %+v returned with an error, want zero", h)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Header{
				BaseOffset: 1000, BatchLength: 49 + 7, PartitionLeaderEpoch: 7, Magic: 2, CRC: binary.BigEndian.Uint32(valid[17:]),
				Attributes: AttrTransactional | 4, LastOffsetDelta: 9, BaseTimestamp: 11, MaxTimestamp: 22,
				ProducerID: 33, ProducerEpoch: 44, BaseSequence: 55, RecordCount: 10,
			}
			if h != want {
				t.Fatalf("header\n got %+v\nwant %+v", h, want)
			}
			if h.Size() != len(valid) || h.LastOffset() != 1009 || h.NextOffset() != 1010 {
				t.Errorf("Size %d LastOffset %d NextOffset %d, want %d 1009 1010", h.Size(), h.LastOffset(), h.NextOffset(), len(valid))
			}
			if h.Compression() != api.CompressionZstd || !h.Transactional() || h.Control() || h.LogAppendTime() {
				t.Errorf("attribute helpers wrong for %#x", h.Attributes)
			}
		})
	}
}

func TestVerifyBatchDetectsCorruption(t *testing.T) {
	recs := testRecords()["headers"]
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			b := mustEncode(t, recs, Options{Compression: c})
			if _, err := Verify(b); err != nil {
				t.Fatalf("Verify of an intact batch: %v", err)
			}
			// Every byte from the CRC on is covered, by the CRC or by it being the CRC.
			for i := offCRC; i < len(b); i++ {
				for _, flip := range []byte{0x01, 0x80} {
					b[i] ^= flip
					_, verr := Verify(b)
					_, _, derr := Decode(b)
					b[i] ^= flip
					if !errors.Is(verr, api.ErrCorruptRecord) || !errors.Is(derr, api.ErrCorruptRecord) {
						t.Fatalf("flipping %#02x at byte %d: Verify %v, Decode %v; want CORRUPT_RECORD", flip, i, verr, derr)
					}
				}
			}
		})
	}

	b := mustEncode(t, recs, Options{})
	tests := []struct {
		name    string
		at      int
		wantErr bool
	}{
		{"base offset is not covered", 3, false},
		{"leader epoch is not covered", 14, false},
		{"batch length", 11, true},
		{"magic", 16, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := bytes.Clone(b)
			d[tt.at] ^= 0x01
			_, err := Verify(d)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Verify = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestVerifyBatchSize(t *testing.T) {
	b := mustEncode(t, []Record{{Value: []byte("v")}}, Options{})
	tests := []struct {
		name string
		in   []byte
	}{
		{"one byte extra", append(bytes.Clone(b), 0)},
		{"two batches", append(bytes.Clone(b), b...)},
		{"unknown codec with a valid CRC", sealBatch(testHeader{attributes: 5, count: 0}, nil)},
	}
	for n := range len(b) {
		tests = append(tests, struct {
			name string
			in   []byte
		}{"truncated", b[:n]})
	}
	for _, tt := range tests {
		h, err := Verify(tt.in)
		if !errors.Is(err, api.ErrCorruptRecord) {
			t.Fatalf("%s (%d bytes): Verify = %+v, %v; want CORRUPT_RECORD", tt.name, len(tt.in), h, err)
		}
	}
}

func TestStampInPlace(t *testing.T) {
	recs := []Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}}
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			b := mustEncode(t, recs, Options{Compression: c})
			SetBaseOffset(b, 1<<40)
			SetLeaderEpoch(b, 12)
			h, got, err := Decode(b)
			if err != nil {
				t.Fatalf("stamping broke the batch: %v", err)
			}
			if h.BaseOffset != 1<<40 || h.PartitionLeaderEpoch != 12 || h.LastOffset() != 1<<40+2 {
				t.Errorf("header %+v: want base offset 2^40, leader epoch 12", h)
			}
			checkRecords(t, 1<<40, got, recs)
		})
	}
}

func TestScanBatches(t *testing.T) {
	var log []byte
	var sizes []int
	for i, c := range allCodecs {
		recs := make([]Record, i+1)
		for j := range recs {
			recs[j] = Record{Timestamp: 1, Key: []byte{byte(j)}, Value: bytes.Repeat([]byte{byte(i)}, 50*j)}
		}
		b := mustEncode(t, recs, Options{Compression: c})
		SetBaseOffset(b, int64(len(sizes)*100))
		sizes = append(sizes, len(b))
		log = append(log, b...)
	}
	// whole is how many bytes of the first n bytes form whole batches, and how many.
	whole := func(n int) (bytes, batches int) {
		for _, s := range sizes {
			if bytes+s > n {
				break
			}
			bytes += s
			batches++
		}
		return bytes, batches
	}

	t.Run("torn tail at every length", func(t *testing.T) {
		for n := 0; n <= len(log); n++ {
			for _, verify := range []bool{false, true} {
				wantBytes, wantBatches := whole(n)
				var seen int
				got, err := Scan(log[:n], verify, func(h Header, batch []byte) error {
					if h.BaseOffset != int64(seen*100) || len(batch) != sizes[seen] || cap(batch) != len(batch) {
						t.Fatalf("batch %d: base offset %d, %d bytes (cap %d), want %d and %d", seen, h.BaseOffset, len(batch), cap(batch), seen*100, sizes[seen])
					}
					if _, err := Verify(batch); err != nil {
						t.Fatalf("batch %d handed to fn does not verify: %v", seen, err)
					}
					seen++
					return nil
				})
				if err != nil || got != wantBytes || seen != wantBatches {
					t.Fatalf("Scan(%d of %d bytes, verify=%v) = %d, %v after %d batches; want %d after %d",
						n, len(log), verify, got, err, seen, wantBytes, wantBatches)
				}
			}
		}
	})

	second := sizes[0]
	tests := []struct {
		name     string
		damage   func(b []byte)
		verify   bool
		wantSize int
	}{
		{"intact", func([]byte) {}, true, len(log)},
		{"bad CRC, verified", func(b []byte) { b[second+HeaderSize] ^= 0xff }, true, sizes[0]},
		{"bad CRC, not verified", func(b []byte) { b[second+HeaderSize] ^= 0xff }, false, len(log)},
		{"bad magic", func(b []byte) { b[second+16] = 1 }, false, sizes[0]},
		{"batch length past the end", func(b []byte) { binary.BigEndian.PutUint32(b[second+8:], 1<<30) }, false, sizes[0]},
		{"zeroed tail, as a preallocated file leaves it", func(b []byte) { clear(b[second:]) }, false, sizes[0]},
		{"unknown codec, verified", func(b []byte) {
			b[second+22] |= 0x07
			binary.BigEndian.PutUint32(b[second+17:], batchCRC(b[second:second+sizes[1]]))
		}, true, sizes[0]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(log)
			tt.damage(b)
			got, err := Scan(b, tt.verify, nil)
			if err != nil || got != tt.wantSize {
				t.Fatalf("Scan = %d, %v; want %d", got, err, tt.wantSize)
			}
		})
	}

	t.Run("fn error stops the scan", func(t *testing.T) {
		stop := errors.New("stop")
		calls := 0
		got, err := Scan(log, false, func(h Header, _ []byte) error {
			if calls++; calls == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || got != sizes[0]+sizes[1] {
			t.Fatalf("Scan = %d, %v; want %d, stop", got, err, sizes[0]+sizes[1])
		}
	})
}

func BenchmarkVerifyBatch(b *testing.B) {
	batch := mustEncode(b, benchRecords(), Options{})
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(batch); err != nil {
			b.Fatal(err)
		}
	}
}
