package recordbatch

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestFilterBatch(t *testing.T) {
	recs := []Record{
		{Timestamp: 1000, Key: []byte("a"), Value: []byte("a1")},
		{Timestamp: 1001, Key: []byte("b"), Value: []byte("b1"), Headers: []RecordHeader{{Key: "h", Value: []byte("v")}}},
		{Timestamp: 1002, Key: []byte("a"), Value: nil},
		{Timestamp: 1003, Key: nil, Value: []byte("no key")},
		{Timestamp: 1004, Key: []byte("c"), Value: []byte("c1")},
	}
	tests := []struct {
		name string
		keep func(r *Record) bool
		want []int64 // surviving offsets
	}{
		{"some", func(r *Record) bool { return r.Offset%2 == 1 }, []int64{101, 103}},
		{"first and last", func(r *Record) bool { return r.Offset == 100 || r.Offset == 104 }, []int64{100, 104}},
		{"none", func(*Record) bool { return false }, nil},
		{"all", func(*Record) bool { return true }, []int64{100, 101, 102, 103, 104}},
	}
	for _, codec := range []api.Compression{api.CompressionNone, api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd} {
		orig, err := Encode(nil, recs, Options{Compression: codec, ProducerID: 7, ProducerEpoch: 2, BaseSequence: 40})
		if err != nil {
			t.Fatal(err)
		}
		SetBaseOffset(orig, 100)
		SetLeaderEpoch(orig, 3)
		oh, _ := ParseHeader(orig)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%v/%s", codec, tt.name), func(t *testing.T) {
				prefix := []byte("prefix")
				out, kept, err := Filter(prefix, orig, tt.keep)
				if err != nil {
					t.Fatal(err)
				}
				if kept != len(tt.want) {
					t.Fatalf("kept %d, want %d", kept, len(tt.want))
				}
				if !bytes.Equal(out[:len(prefix)], prefix) {
					t.Fatal("dst prefix changed")
				}
				h, got, err := Decode(out[len(prefix):])
				if err != nil {
					t.Fatalf("the filtered batch does not decode: %v", err)
				}
				if h.BaseOffset != 100 || h.LastOffsetDelta != 4 || h.NextOffset() != 105 || h.PartitionLeaderEpoch != 3 ||
					h.ProducerID != 7 || h.ProducerEpoch != 2 || h.BaseSequence != 40 || h.Compression() != codec ||
					h.BaseTimestamp != oh.BaseTimestamp || h.MaxTimestamp != oh.MaxTimestamp || int(h.RecordCount) != kept {
					t.Errorf("header %+v, original %+v", h, oh)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("decoded %d records, want %d", len(got), len(tt.want))
				}
				for i, r := range got {
					src := recs[r.Offset-100]
					if r.Offset != tt.want[i] || r.Timestamp != src.Timestamp || !bytes.Equal(r.Key, src.Key) || (r.Key == nil) != (src.Key == nil) ||
						!bytes.Equal(r.Value, src.Value) || (r.Value == nil) != (src.Value == nil) || len(r.Headers) != len(src.Headers) {
						t.Errorf("record %d = %+v, want offset %d and %+v", i, r, tt.want[i], src)
					}
				}
				if kept == len(recs) && !bytes.Equal(out[len(prefix):], orig) {
					t.Error("a batch that loses nothing must come back unchanged")
				}
			})
		}
	}
}

func TestFilterBatchCorrupt(t *testing.T) {
	b, err := Encode(nil, []Record{{Key: []byte("k"), Value: []byte("v")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	dst := []byte("x")
	out, _, err := Filter(dst, b, func(*Record) bool { return true })
	if err == nil || !bytes.Equal(out, dst) {
		t.Fatalf("Filter of a corrupt batch = %q, %v; want dst unchanged and CORRUPT_RECORD", out, err)
	}
}
