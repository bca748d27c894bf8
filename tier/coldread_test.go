package tier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// testIndex is a well-formed index of a segment [100, 130) of three
// batches at positions 0, 100 and 250 in a 400-byte log object.
func testIndex() ([]byte, RemoteSegment) {
	b := encodeIndex([]indexEntry{{100, 0}, {110, 100}, {120, 250}})
	return b, RemoteSegment{Key: "k", Base: 100, Next: 130, Size: 400, IndexSize: int64(len(b))}
}

func TestDecodeIndex(t *testing.T) {
	put := func(b []byte, entry, field int, v int64) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint64(b[entry*remoteIndexEntry+field*8:], uint64(v))
		return b
	}
	good, rec := testIndex()
	withRec := func(f func(*RemoteSegment)) RemoteSegment { r := rec; f(&r); return r }
	tests := []struct {
		name string
		b    []byte
		rec  RemoteSegment
		ok   bool
	}{
		{"well formed", good, rec, true},
		{"a position of 1 TiB", put(good, 2, 1, 1<<40), rec, false},
		{"a negative position", put(good, 1, 1, -100), rec, false},
		{"the last batch shorter than a header", put(good, 2, 1, rec.Size-recordbatch.HeaderSize+1), rec, false},
		{"batches closer than a header", put(good, 1, 1, 60), rec, false},
		{"positions out of order", put(good, 1, 1, 300), rec, false},
		{"offsets out of order", put(good, 2, 0, 105), rec, false},
		{"an offset repeated", put(good, 2, 0, 110), rec, false},
		{"an offset past the segment's end", put(good, 2, 0, 130), rec, false},
		{"a first entry past the base", put(good, 0, 0, 101), rec, false},
		{"a first entry past position 0", put(good, 0, 1, 10), rec, false},
		{"longer than its record", append(bytes.Clone(good), good[:remoteIndexEntry]...), rec, false},
		{"shorter than its record", good[:2*remoteIndexEntry], rec, false},
		{"not whole entries", good[:len(good)-1], withRec(func(r *RemoteSegment) { r.IndexSize-- }), false},
		{"empty", nil, withRec(func(r *RemoteSegment) { r.IndexSize = 0 }), false},
		{"a record with more entries than its log object holds batches", good, withRec(func(r *RemoteSegment) { r.Size = 2 * recordbatch.HeaderSize }), false},
		{"a record with more entries than offsets", good, withRec(func(r *RemoteSegment) { r.Next = 102 }), false},
		{"a record with an index of 1 TiB", good, withRec(func(r *RemoteSegment) { r.IndexSize = 1 << 40 }), false},
		{"a record with no offsets", good, withRec(func(r *RemoteSegment) { r.Next = r.Base }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx, err := decodeIndex(tt.b, tt.rec)
			if tt.ok {
				if err != nil || len(idx) != 3 {
					t.Fatalf("decodeIndex: %v %v", idx, err)
				}
				return
			}
			if !errors.Is(err, api.ErrRemoteCorrupt) || !api.Classify(err).Retriable() {
				t.Fatalf("decodeIndex: %v %v, want a retriable REMOTE_CORRUPT", idx, err)
			}
		})
	}
}

// FuzzDecodeIndex: whatever the object and the record say, decoding never
// panics, allocates only for the bytes given, and what it accepts is an
// index a reader can use without further bounds checks.
func FuzzDecodeIndex(f *testing.F) {
	good, rec := testIndex()
	f.Add(good, rec.Base, rec.Next, rec.Size, rec.IndexSize)
	f.Add(good[:16], int64(0), int64(1), int64(61), int64(16))
	f.Add(good, int64(0), int64(1)<<62, int64(1)<<40, int64(48))
	f.Add([]byte{}, int64(-1), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, base, next, size, indexSize int64) {
		seg := RemoteSegment{Key: "k", Base: base, Next: next, Size: size, IndexSize: indexSize}
		idx, err := decodeIndex(b, seg)
		if err != nil {
			if !errors.Is(err, api.ErrRemoteCorrupt) {
				t.Fatalf("error %v is not REMOTE_CORRUPT", err)
			}
			return
		}
		if int64(len(idx))*remoteIndexEntry != indexSize || len(idx) == 0 || !bytes.Equal(encodeIndex(idx), b) {
			t.Fatalf("accepted %d entries from %d bytes (record: %d)", len(idx), len(b), indexSize)
		}
		if idx[0] != (indexEntry{base, 0}) {
			t.Fatalf("first entry %+v", idx[0])
		}
		for i, e := range idx {
			if e.offset < base || e.offset >= next || e.pos < 0 || e.pos+recordbatch.HeaderSize > size {
				t.Fatalf("entry %d %+v outside the record %+v", i, e, seg)
			}
			if i > 0 && (e.offset <= idx[i-1].offset || e.pos-idx[i-1].pos < recordbatch.HeaderSize) {
				t.Fatalf("entry %d %+v does not follow %+v", i, e, idx[i-1])
			}
		}
	})
}

func TestColdReadCorruptMemory(t *testing.T) { testColdReadCorrupt(t, NewMemory()) }

func TestColdReadCorruptLocalDir(t *testing.T) {
	testColdReadCorrupt(t, openTestLocalDir(t, t.TempDir()))
}

func TestColdReadCorruptS3(t *testing.T) { testColdReadCorrupt(t, newTestS3(t, s3Options(t))) }

// testColdReadCorrupt damages a tiered segment's objects in bkt in the ways a
// careless or hostile store could, and reads the segment as a consumer
// would: every read either returns the batches from where it was asked,
// with a next offset right after them, or a retriable REMOTE_CORRUPT that
// the reader's counter shows; never a gap, a panic or an allocation sized by
// what the object claims. Once the object is put right, the same reader
// reads it all.
func testColdReadCorrupt(t *testing.T, bkt Bucket) {
	l := testLog(t, 10) // segments [0,40) [40,80), batches of 10 records
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	recs := uploadAll(t, u, meta)
	seg := recs[0]
	logObj, indexObj := mustGet(t, bkt, seg.LogKey()), mustGet(t, bkt, seg.IndexKey())
	idx, err := decodeIndex(indexObj, seg)
	if err != nil {
		t.Fatal(err)
	}
	withEntry := func(entry, field int, v int64) []byte {
		b := bytes.Clone(indexObj)
		binary.BigEndian.PutUint64(b[entry*remoteIndexEntry+field*8:], uint64(v))
		return b
	}
	flip := func(pos int64) []byte {
		b := bytes.Clone(logObj)
		b[pos] ^= 0x40
		return b
	}
	zero := func(pos, n int64) []byte {
		b := bytes.Clone(logObj)
		clear(b[pos : pos+n])
		return b
	}
	tests := []struct {
		name     string
		key      string
		data     []byte
		rec      func(*RemoteSegment)
		badFrom  int64 // the first offset no read may return
		logCount bool  // the log object, not the index, is counted
	}{
		{name: "index position of 1 TiB", key: seg.IndexKey(), data: withEntry(2, 1, 1<<40)},
		// Well formed, but not where the batches are: found on reading.
		{name: "index position inside the previous batch", key: seg.IndexKey(), data: withEntry(2, 1, idx[2].pos-1), badFrom: 10, logCount: true},
		{name: "index offsets out of order", key: seg.IndexKey(), data: withEntry(2, 0, 5)},
		{name: "index offset past the segment", key: seg.IndexKey(), data: withEntry(3, 0, seg.Next)},
		{name: "index longer than its record", key: seg.IndexKey(), data: append(bytes.Clone(indexObj), indexObj[16:32]...)},
		{name: "index truncated", key: seg.IndexKey(), data: indexObj[:len(indexObj)-remoteIndexEntry]},
		{name: "record claims a 1 TiB index", rec: func(r *RemoteSegment) { r.IndexSize = 1 << 40 }},
		{name: "a byte flipped in the third batch", key: seg.LogKey(), data: flip(idx[2].pos + recordbatch.HeaderSize + 3), badFrom: 20, logCount: true},
		{name: "the second batch's header zeroed", key: seg.LogKey(), data: zero(idx[1].pos, recordbatch.HeaderSize), badFrom: 10, logCount: true},
		{name: "a base offset that is not the index's", key: seg.LogKey(), data: func() []byte {
			b := bytes.Clone(logObj)
			recordbatch.SetBaseOffset(b[idx[3].pos:], 31)
			return b
		}(), badFrom: 30, logCount: true},
		// A read whose range runs past the object's real end fails whole.
		{name: "log object cut short", key: seg.LogKey(), data: logObj[:len(logObj)-20], logCount: true},
		{name: "log object cut inside the first batch", key: seg.LogKey(), data: logObj[:idx[0].pos+100], logCount: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := seg
			if tt.rec != nil {
				tt.rec(&s)
			}
			if tt.key != "" {
				mustPut(t, bkt, tt.key, tt.data)
				defer mustPut(t, bkt, tt.key, map[string][]byte{seg.LogKey(): logObj, seg.IndexKey(): indexObj}[tt.key])
			}
			cr := NewColdReader(bkt, ColdReaderOptions{ChunkBytes: 256, CacheBytes: 4096, Logger: slog.New(slog.DiscardHandler)})
			defer cr.Close()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			got, err := consume(cr, s, 1<<20)
			runtime.ReadMemStats(&ms1)
			if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 16<<20 {
				t.Errorf("reading allocated %d bytes", grew)
			}
			if !errors.Is(err, api.ErrRemoteCorrupt) || !api.Classify(err).Retriable() {
				t.Fatalf("read %d records, then %v; want a retriable REMOTE_CORRUPT", got, err)
			}
			if got != tt.badFrom {
				t.Fatalf("read offsets [0, %d) before the error, want [0, %d)", got, tt.badFrom)
			}
			st := cr.Stats()
			if tt.logCount && (st.CorruptLogs == 0 || st.CorruptIndexes != 0) || !tt.logCount && (st.CorruptIndexes == 0 || st.CorruptLogs != 0) {
				t.Fatalf("stats %+v", st)
			}
			// The reader does not keep what it found corrupt: the objects put
			// right (and the record), it reads the whole segment.
			if tt.key != "" {
				mustPut(t, bkt, tt.key, map[string][]byte{seg.LogKey(): logObj, seg.IndexKey(): indexObj}[tt.key])
			}
			if got, err := consume(cr, seg, 1<<20); err != nil || got != seg.Next {
				t.Fatalf("after the repair: offsets [0, %d), %v", got, err)
			}
		})
	}
}

// consume reads seg from its base as a consumer does, checking that each
// read starts where asked, holds consecutive offsets and ends at the next
// offset it returns. It returns the offset it reached and the error that
// stopped it.
func consume(cr *ColdReader, seg RemoteSegment, maxBytes int64) (int64, error) {
	off := seg.Base
	for off < seg.Next {
		data, next, err := cr.Read(context.Background(), seg, off, maxBytes)
		if err != nil {
			return off, err
		}
		want := off
		n, err := recordbatch.Scan(data, true, func(h recordbatch.Header, b []byte) error {
			_, rs, err := recordbatch.Decode(b)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r.Offset != want || string(r.Value) != fmt.Sprintf("v-%d", r.Offset) {
					return fmt.Errorf("offset %d holds %q, want offset %d", r.Offset, r.Value, want)
				}
				want++
			}
			return nil
		})
		if err != nil {
			return off, fmt.Errorf("served bytes: %w", err)
		}
		if n != len(data) || want != next || next <= off {
			return off, fmt.Errorf("a read from %d served %d of %d bytes, offsets to %d, next %d", off, n, len(data), want, next)
		}
		off = next
	}
	return off, nil
}

// ReadRecords ends with the batch that brings the records from the offset
// to the bound, as the local log's read does.
func TestColdReadRecordsBound(t *testing.T) {
	bkt := NewMemory()
	l := testLog(t, 10) // segments [0,40) [40,80), batches of 10 records
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	seg := uploadAll(t, u, meta)[0]
	cr := NewColdReader(bkt, ColdReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	defer cr.Close()
	for _, tt := range []struct{ offset, maxRecords, wantNext int64 }{
		{0, 0, 40}, {0, 3, 10}, {0, 10, 10}, {0, 11, 20}, {5, 10, 20}, {20, 1000, 40},
	} {
		data, next, err := cr.ReadRecords(context.Background(), seg, tt.offset, 1<<20, tt.maxRecords)
		if err != nil {
			t.Fatal(err)
		}
		var last int64 = -1
		if _, err := recordbatch.Scan(data, true, func(h recordbatch.Header, _ []byte) error { last = h.NextOffset(); return nil }); err != nil {
			t.Fatal(err)
		}
		if next != tt.wantNext || last != tt.wantNext {
			t.Fatalf("ReadRecords(%d, max %d): batches to %d, next %d; want %d", tt.offset, tt.maxRecords, last, next, tt.wantNext)
		}
	}
}
