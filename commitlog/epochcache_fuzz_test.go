package commitlog

import (
	"slices"
	"testing"
)

// FuzzDecodeEpochs: the leader-epoch checkpoint is read from disk at open.
// Decoding never panics; what it accepts is a lineage (epochs rising,
// start offsets not falling) that encodes to bytes it decodes equal, and
// the cache's answers on it do not panic either.
func FuzzDecodeEpochs(f *testing.F) {
	// Real checkpoints: lineages as leader changes and truncations build them.
	var c epochCache
	f.Add(c.encode())
	for _, a := range []EpochEntry{{0, 0}, {1, 0}, {3, 120}, {4, 120}, {7, 5000}, {9, 4000}} {
		c.assign(a.Epoch, a.StartOffset)
		f.Add(c.encode())
	}
	c.truncateBefore(130)
	f.Add(c.encode())
	f.Add([]byte("0\n2\n1 5\n0 9\n"))                // epochs out of order
	f.Add([]byte("0\n3\n1 5\n"))                     // a count that lies
	f.Add([]byte("1\n0\n"))                          // another version
	f.Add([]byte("0\n1\n-4 -9223372036854775808\n")) // negative values
	f.Add([]byte("0\n1\n2147483648 0\n"))            // an epoch past int32

	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := decodeEpochs(data)
		if err != nil {
			return
		}
		for i := 1; i < len(entries); i++ {
			if entries[i].Epoch <= entries[i-1].Epoch || entries[i].StartOffset < entries[i-1].StartOffset {
				t.Fatalf("accepted a lineage out of order: %v", entries)
			}
		}
		enc := (&epochCache{entries: entries}).encode()
		back, err := decodeEpochs(enc)
		if err != nil {
			t.Fatalf("the lineage re-encoded is refused: %v\n%q", err, enc)
		}
		if !slices.Equal(entries, back) {
			t.Fatalf("decode(encode(e)) differs:\n%v\n%v", entries, back)
		}
		// What a log then asks of it.
		lc := &epochCache{entries: slices.Clone(entries)}
		for _, e := range entries {
			if got, _ := lc.endOffsetFor(e.Epoch, 1<<62); got != e.Epoch {
				t.Fatalf("endOffsetFor(%d) answers epoch %d: %v", e.Epoch, got, entries)
			}
		}
		lc.latest()
		if len(entries) > 0 {
			mid := entries[len(entries)/2].StartOffset
			lc.truncateFrom(mid)
			lc.truncateBefore(mid)
		}
	})
}
