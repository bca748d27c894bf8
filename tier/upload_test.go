package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// memMeta is an in-memory Metadata for unit tests of the uploader.
type memMeta struct {
	mu     sync.Mutex
	recs   []RemoteSegment
	fenced bool
}

func (m *memMeta) List(context.Context) ([]RemoteSegment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]RemoteSegment(nil), m.recs...), nil
}

func (m *memMeta) Commit(_ context.Context, s RemoteSegment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced {
		return ErrFenced
	}
	for _, r := range m.recs {
		if r.Base == s.Base {
			return ErrSegmentExists
		}
	}
	m.recs = append(m.recs, s)
	return nil
}

func (m *memMeta) Remove(context.Context, RemoteSegment) error { return nil }

// testLog builds a log of n batches of 10 records ("v-<offset>"), rolled
// every 4 batches, all committed.
func testLog(t *testing.T, n int) *commitlog.Log {
	t.Helper()
	return testLogValues(t, n, "v-%d")
}

// testLogValues is testLog with the values format(offset).
func testLogValues(t *testing.T, n int, format string) *commitlog.Log {
	t.Helper()
	fsys, err := commitlog.NewOSFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	l, err := commitlog.Open(fsys, "p-0", commitlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for i := 0; i < n; i++ {
		recs := make([]recordbatch.Record, 10)
		for j := range recs {
			recs[j] = recordbatch.Record{Timestamp: 1000, Value: []byte(fmt.Sprintf(format, i*10+j))}
		}
		b, err := recordbatch.Encode(nil, recs, recordbatch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(b, 2); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			if err := l.Roll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	return l
}

func uploadAll(t *testing.T, u *Uploader, meta *memMeta) []RemoteSegment {
	t.Helper()
	for {
		recs, _ := meta.List(context.Background())
		rec, err := u.UploadNext(context.Background(), 2, recs)
		if err != nil {
			t.Fatal(err)
		}
		if rec == nil {
			recs, _ := meta.List(context.Background())
			return recs
		}
	}
}

func TestUploadThenColdRead(t *testing.T) {
	l := testLog(t, 10) // segments [0,40) [40,80) and the active [80,100)
	bkt := NewMemory()
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	recs := uploadAll(t, u, meta)
	if len(recs) != 2 || recs[0].Base != 0 || recs[0].Next != 40 || recs[1].Base != 40 || recs[1].Next != 80 {
		t.Fatalf("records %+v", recs)
	}
	if len(recs[1].Epochs) != 1 || recs[1].Epochs[0] != (commitlog.EpochEntry{Epoch: 2, StartOffset: 40}) {
		t.Fatalf("epochs %+v", recs[1].Epochs)
	}
	cr := NewColdReader(bkt, ColdReaderOptions{ChunkBytes: 256, CacheBytes: 1024})
	defer cr.Close()
	tests := []struct {
		name             string
		offset, maxBytes int64
		wantFirst        int64
		wantNext         int64
	}{
		{"from the start, one batch", 0, 1, 0, 10},
		{"mid-batch offset gets its batch", 13, 1, 10, 20},
		{"whole segment", 0, 1 << 20, 0, 40},
		{"second segment", 55, 1 << 20, 50, 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seg, ok := Covering(recs, tt.offset)
			if !ok {
				t.Fatal("no covering record")
			}
			data, next, err := cr.Read(context.Background(), seg, tt.offset, tt.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			var offsets []int64
			if _, err := recordbatch.Scan(data, true, func(h recordbatch.Header, b []byte) error {
				_, rs, err := recordbatch.Decode(b)
				for _, r := range rs {
					if string(r.Value) != fmt.Sprintf("v-%d", r.Offset) {
						return fmt.Errorf("offset %d holds %s", r.Offset, r.Value)
					}
					offsets = append(offsets, r.Offset)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if offsets[0] != tt.wantFirst || next != tt.wantNext || offsets[len(offsets)-1] != tt.wantNext-1 {
				t.Fatalf("offsets %d..%d next %d, want %d..%d", offsets[0], offsets[len(offsets)-1], next, tt.wantFirst, tt.wantNext-1)
			}
		})
	}
	if _, ok := Covering(recs, 80); ok {
		t.Fatal("offset 80 is not in the object store")
	}
}

func TestUploadContinuesInsideASegment(t *testing.T) {
	// Another leader recorded [0,20): this log's segment [0,40) is uploaded
	// from 20 only, so records chain without overlap.
	l := testLog(t, 8)
	meta := &memMeta{recs: []RemoteSegment{{Base: 0, Next: 20}}}
	u := &Uploader{Bucket: NewMemory(), Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	recs := uploadAll(t, u, meta)
	if len(recs) != 3 || recs[1].Base != 20 || recs[1].Next != 40 || recs[2].Base != 40 {
		t.Fatalf("records %+v", recs)
	}
	// A remote end that no local batch starts at is a gap, never an overlap.
	meta2 := &memMeta{recs: []RemoteSegment{{Base: 0, Next: 15}}}
	u2 := &Uploader{Bucket: NewMemory(), Meta: meta2, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	if _, err := u2.UploadNext(context.Background(), 2, meta2.recs); !errors.Is(err, ErrGap) {
		t.Fatalf("upload from mid-batch: %v, want ErrGap", err)
	}
}

func TestUploadCommitRefusedLeavesNoObjects(t *testing.T) {
	l := testLog(t, 8)
	bkt := NewMemory()
	meta := &memMeta{fenced: true}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	if _, err := u.UploadNext(context.Background(), 2, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced commit: %v", err)
	}
	n := 0
	_ = bkt.List(context.Background(), "t/", func(ObjectInfo) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d objects left after a refused commit", n)
	}
}

func TestUploadVerificationFailureCommitsNothing(t *testing.T) {
	l := testLog(t, 8)
	fb := NewFaultBucket(NewMemory())
	fb.FailNext(OpStat, 1, nil)
	meta := &memMeta{}
	u := &Uploader{Bucket: fb, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	if _, err := u.UploadNext(context.Background(), 2, nil); err == nil {
		t.Fatal("an upload whose verification failed succeeded")
	}
	if recs, _ := meta.List(context.Background()); len(recs) != 0 {
		t.Fatalf("records after a failed verification: %+v", recs)
	}
	// The next attempt, under a fresh key, goes through.
	rec, err := u.UploadNext(context.Background(), 2, nil)
	if err != nil || rec == nil || rec.Base != 0 {
		t.Fatalf("retry: %+v %v", rec, err)
	}
}

func TestChunkCacheEvicts(t *testing.T) {
	c := newChunkCache(100)
	for i := 0; i < 5; i++ {
		c.put(chunkKey{"s", int64(i)}, make([]byte, 40))
	}
	if c.size > 100 {
		t.Fatalf("cache holds %d bytes, limit 100", c.size)
	}
	if _, ok := c.get(chunkKey{"s", 0}); ok {
		t.Fatal("the oldest chunk survived")
	}
	if _, ok := c.get(chunkKey{"s", 4}); !ok {
		t.Fatal("the newest chunk was evicted")
	}
	c.dropSegment("s")
	if c.size != 0 {
		t.Fatalf("size %d after dropping the segment", c.size)
	}
}
