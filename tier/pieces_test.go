package tier

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
)

// Slice cuts at any boundary, within a piece or across them, and contiguous
// views a range inside one piece but copies one that spans two.
func TestPiecesSlice(t *testing.T) {
	whole := []byte("abcdefghij")
	ps := Pieces{whole[0:3], whole[3:7], whole[7:10]}
	if ps.Len() != 10 || !bytes.Equal(ps.Bytes(), whole) {
		t.Fatalf("Len %d Bytes %q", ps.Len(), ps.Bytes())
	}
	for lo := int64(0); lo <= 10; lo++ {
		for hi := lo; hi <= 10; hi++ {
			got := ps.Slice(lo, hi)
			if got.Len() != hi-lo || !bytes.Equal(got.Bytes(), whole[lo:hi]) {
				t.Errorf("Slice(%d, %d) = %q, want %q", lo, hi, got.Bytes(), whole[lo:hi])
			}
			for _, p := range got {
				if len(p) == 0 {
					t.Errorf("Slice(%d, %d) holds an empty piece", lo, hi)
				}
			}
		}
	}
	if v := ps.contiguous(4, 6); &v[0] != &whole[4] {
		t.Error("a range within one piece was copied")
	}
	if v := ps.contiguous(2, 5); &v[0] == &whole[2] || string(v) != "cde" {
		t.Errorf("a range across pieces: %q, not a copy", v)
	}
	if ps.Slice(2, 5)[0] = nil; whole[2] != 'c' {
		t.Error("Slice changed the pieces")
	}
}

// A read spanning chunks comes back as views of them, in order, holding
// the same bytes that Read joins.
func TestColdReadPiecesSpanChunks(t *testing.T) {
	bkt := NewMemory()
	l := testLog(t, 10)
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	seg := uploadAll(t, u, meta)[0]
	cr := NewColdReader(bkt, ColdReaderOptions{ChunkBytes: 256, CacheBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	defer cr.Close()
	ps, next, err := cr.ReadPieces(context.Background(), seg, seg.Base, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Len() != seg.Size || next != seg.Next || int64(len(ps)) != (seg.Size+255)/256 {
		t.Fatalf("%d pieces of %d bytes to offset %d; segment of %d bytes to %d", len(ps), ps.Len(), next, seg.Size, seg.Next)
	}
	joined, next2, err := cr.Read(context.Background(), seg, seg.Base, 1<<20)
	if err != nil || next2 != next || !bytes.Equal(joined, ps.Bytes()) || !bytes.Equal(joined, mustGet(t, bkt, seg.LogKey())) {
		t.Fatalf("Read: %d bytes to %d, %v; not the object's bytes", len(joined), next2, err)
	}
}
