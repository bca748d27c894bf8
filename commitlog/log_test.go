package commitlog_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/commitlog/faultfs"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// batch encodes n records whose values are "prefix-i".
func batch(t testing.TB, prefix string, n int, ts int64) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: ts + int64(i), Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	b, err := recordbatch.Encode(nil, recs, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openLog(t testing.TB, fsys commitlog.FS, opts commitlog.Options) *commitlog.Log {
	t.Helper()
	l, err := commitlog.Open(fsys, "orders-0", opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func osFS(t testing.TB, dir string) *commitlog.OSFS {
	t.Helper()
	fsys, err := commitlog.NewOSFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	return fsys
}

// readAll decodes every committed record from offset from to the HW.
func readAll(t testing.TB, l *commitlog.Log, from int64) []recordbatch.Record {
	t.Helper()
	var out []recordbatch.Record
	for {
		res, err := l.Read(from, 1<<20, l.Offsets().HighWatermark)
		if err != nil {
			t.Fatalf("read at %d: %v", from, err)
		}
		if res.Size == 0 {
			return out
		}
		b, err := res.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		_, err = recordbatch.Scan(b, true, func(h recordbatch.Header, raw []byte) error {
			_, recs, err := recordbatch.Decode(raw)
			for _, r := range recs {
				if r.Offset >= from {
					out = append(out, r)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		from = res.NextOffset
	}
}

func commit(l *commitlog.Log) { l.SetHighWatermark(l.Offsets().LogEnd) }

func TestAppendReadAcrossSegments(t *testing.T) {
	fsys := osFS(t, t.TempDir())
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 4096, IndexIntervalBytes: 512})
	defer l.Close()
	want := 0
	for i := 0; i < 50; i++ {
		info, err := l.Append(batch(t, fmt.Sprint("b", i), 10, 1000), 3)
		if err != nil {
			t.Fatal(err)
		}
		if info.FirstOffset != int64(want) || info.LastOffset != int64(want+9) {
			t.Fatalf("append %d: offsets %d..%d, want %d..%d", i, info.FirstOffset, info.LastOffset, want, want+9)
		}
		want += 10
	}
	if got := l.Offsets(); got.LogEnd != 500 || got.HighWatermark != 0 {
		t.Fatalf("offsets %+v", got)
	}
	if recs := readAll(t, l, 0); len(recs) != 0 {
		t.Fatalf("read %d records above the HW", len(recs))
	}
	commit(l)
	for _, from := range []int64{0, 1, 9, 10, 255, 499} {
		recs := readAll(t, l, from)
		if len(recs) != int(500-from) {
			t.Fatalf("from %d: %d records, want %d", from, len(recs), 500-from)
		}
		for i, r := range recs {
			off := from + int64(i)
			if r.Offset != off || string(r.Value) != fmt.Sprintf("b%d-%d", off/10, off%10) {
				t.Fatalf("from %d: record %d is offset %d %q", from, i, r.Offset, r.Value)
			}
		}
	}
	segs, _ := filepath.Glob(filepath.Join(fsys.Name(), "orders-0", "*.log"))
	if len(segs) < 3 {
		t.Fatalf("expected the log to roll into several segments, got %d", len(segs))
	}
}

func TestReadBounds(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer l.Close()
	for i := 0; i < 3; i++ {
		if _, err := l.Append(batch(t, "x", 100, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(200)
	one := int64(len(batch(t, "x", 100, 1)))
	tests := []struct {
		name             string
		offset, maxBytes int64
		wantSize         int64
		wantNext         int64
		wantErr          error
	}{
		{"max bytes below one batch still gives one", 0, 1, one, 100, nil},
		{"whole batches only", 0, one + one/2, one, 100, nil},
		{"stops at the HW", 0, 1 << 20, 2 * one, 200, nil},
		{"mid-batch offset gets its batch", 150, 1 << 20, one, 200, nil},
		{"at the HW is empty", 200, 1 << 20, 0, 200, nil},
		{"between HW and LEO is empty", 250, 1 << 20, 0, 250, nil},
		{"at the LEO is empty", 300, 1 << 20, 0, 300, nil},
		{"past the LEO is out of range", 301, 1 << 20, 0, 301, api.ErrOffsetOutOfRange},
		{"negative is out of range", -1, 1 << 20, 0, -1, api.ErrOffsetOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := l.Read(tt.offset, tt.maxBytes, l.Offsets().HighWatermark)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			defer res.Close()
			if res.Size != tt.wantSize || res.NextOffset != tt.wantNext {
				t.Fatalf("size %d next %d, want %d %d", res.Size, res.NextOffset, tt.wantSize, tt.wantNext)
			}
		})
	}
}

// ReadRecords ends with the batch that brings the records from the offset
// to the bound, and never cuts a batch.
func TestReadRecordsBound(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer l.Close()
	for i := 0; i < 5; i++ {
		if _, err := l.Append(batch(t, "x", 10, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	one := int64(len(batch(t, "x", 10, 1)))
	tests := []struct {
		name               string
		offset, maxRecords int64
		wantSize, wantNext int64
	}{
		{"no bound reads to the HW", 0, 0, 5 * one, 50},
		{"a bound inside the first batch gives that batch", 0, 3, one, 10},
		{"a bound at a batch's end stops there", 0, 10, one, 10},
		{"one past a batch's end takes the next whole", 0, 11, 2 * one, 20},
		{"counted from a mid-batch offset", 5, 10, 2 * one, 20},
		{"a bound past the end reads to the HW", 20, 1000, 3 * one, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := l.ReadRecords(tt.offset, 1<<20, l.Offsets().HighWatermark, tt.maxRecords)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			if res.Size != tt.wantSize || res.NextOffset != tt.wantNext {
				t.Fatalf("size %d next %d, want %d %d", res.Size, res.NextOffset, tt.wantSize, tt.wantNext)
			}
		})
	}
}

// forge returns a copy of batch b changed by f, with its CRC recomputed, so
// the damage is one a producer made, not one the CRC catches.
func forge(b []byte, f func(b []byte)) []byte {
	b = bytes.Clone(b)
	f(b)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestRejectsBadBatches(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer l.Close()
	good := batch(t, "x", 3, 1)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 0xff
	tests := []struct {
		name string
		buf  []byte
		// producedOnly: a follower takes it: header and CRC are intact,
		// and a follower leaves the records to its leader, which checked
		// them when it took the batch (or holds it as compaction left it)
		producedOnly bool
	}{
		{"empty", nil, false},
		{"bad crc", flipped, false},
		{"torn", good[:len(good)-1], false},
		{"trailing garbage", append(bytes.Clone(good), 1, 2, 3), false},
		{"garbage", []byte("not a batch at all, just some bytes that are long enough to parse a header from"), false},
		// Header and CRC intact, records inconsistent with them: what a
		// reader could not decode, so every consumer would stop there.
		{"record count above the records", forge(good, func(b []byte) { binary.BigEndian.PutUint32(b[57:], 4); binary.BigEndian.PutUint32(b[23:], 3) }), true},
		{"record count below the records", forge(good, func(b []byte) { binary.BigEndian.PutUint32(b[57:], 2); binary.BigEndian.PutUint32(b[23:], 1) }), true},
		{"max timestamp off", forge(good, func(b []byte) { binary.BigEndian.PutUint64(b[35:], 1<<62) }), true},
		{"a good batch, then a forged one", append(bytes.Clone(good), forge(good, func(b []byte) { binary.BigEndian.PutUint32(b[57:], 4); binary.BigEndian.PutUint32(b[23:], 3) })...), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, app := range []struct {
				name string
				f    func([]byte) (commitlog.AppendInfo, error)
			}{
				{"Append", func(b []byte) (commitlog.AppendInfo, error) { return l.Append(b, 0) }},
				{"AppendReplica", l.AppendReplica},
			} {
				if tt.producedOnly && app.name == "AppendReplica" {
					continue
				}
				_, err := app.f(bytes.Clone(tt.buf))
				var ae *api.Error
				if !errors.As(err, &ae) || (ae.Code != api.CodeCorruptRecord && ae.Code != api.CodeInvalidRecord) {
					t.Fatalf("%s: err %v, want CORRUPT_RECORD or INVALID_RECORD", app.name, err)
				}
			}
		})
	}
	if end := l.Offsets().LogEnd; end != 0 {
		t.Fatalf("a rejected append moved the log end to %d", end)
	}
}

func TestReopenClean(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 2048})
	for i := 0; i < 20; i++ {
		if _, err := l.Append(batch(t, "r", 5, 10), int32(i/5)); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	before, epochs := l.Offsets(), l.Epochs()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	if got := l.Offsets(); got != before {
		t.Fatalf("offsets after reopen %+v, want %+v", got, before)
	}
	if got := l.Epochs(); fmt.Sprint(got) != fmt.Sprint(epochs) || len(got) != 4 {
		t.Fatalf("epochs after reopen %v, want %v", got, epochs)
	}
	if n := len(readAll(t, l, 0)); n != 100 {
		t.Fatalf("read %d records after reopen", n)
	}
	info, err := l.Append(batch(t, "after", 1, 10), 4)
	if err != nil || info.FirstOffset != 100 {
		t.Fatalf("append after reopen: %+v %v", info, err)
	}
}

// activeSegment returns the path of the newest .log file.
func activeSegment(t *testing.T, dir string) string {
	segs, err := filepath.Glob(filepath.Join(dir, "orders-0", "*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	return segs[len(segs)-1]
}

func TestRecoveryAfterCrash(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, seg string, lastBatchAt int64)
		wantEnd int64
	}{
		{"clean tail", func(*testing.T, string, int64) {}, 50},
		{"torn header", func(t *testing.T, seg string, _ int64) { appendFile(t, seg, []byte{0, 0, 0, 0, 0, 0, 0, 50, 0}) }, 50},
		{"torn batch", func(t *testing.T, seg string, _ int64) {
			b := batch(t, "torn", 10, 1)
			appendFile(t, seg, b[:len(b)-7])
		}, 50},
		{"zeros after the end", func(t *testing.T, seg string, _ int64) { appendFile(t, seg, make([]byte, 4096)) }, 50},
		{"corrupt last batch", func(t *testing.T, seg string, at int64) {
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xde, 0xad}, at+70); err != nil {
				t.Fatal(err)
			}
		}, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fsys := osFS(t, dir)
			l := openLog(t, fsys, commitlog.Options{})
			var lastAt int64
			for i := 0; i < 5; i++ {
				b := batch(t, "c", 10, 1)
				if _, err := l.Append(b, 1); err != nil {
					t.Fatal(err)
				}
				if i < 4 {
					lastAt += int64(len(b))
				}
			}
			// Simulate kill -9: no Close, so no clean-shutdown marker.
			tt.damage(t, activeSegment(t, dir), lastAt)
			fsys2 := osFS(t, dir)
			l2 := openLog(t, fsys2, commitlog.Options{})
			defer l2.Close()
			if end := l2.Offsets().LogEnd; end != tt.wantEnd {
				t.Fatalf("log end after recovery %d, want %d", end, tt.wantEnd)
			}
			commit(l2)
			if n := len(readAll(t, l2, 0)); n != int(tt.wantEnd) {
				t.Fatalf("read %d records after recovery, want %d", n, tt.wantEnd)
			}
			info, err := l2.Append(batch(t, "next", 1, 1), 2)
			if err != nil || info.FirstOffset != tt.wantEnd {
				t.Fatalf("append after recovery: %+v %v", info, err)
			}
			_ = l
		})
	}
}

func appendFile(t *testing.T, name string, b []byte) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptIndexIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	opts := commitlog.Options{SegmentBytes: 4096, IndexIntervalBytes: 100}
	l := openLog(t, fsys, opts)
	for i := 0; i < 40; i++ {
		if _, err := l.Append(batch(t, "i", 4, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "orders-0", "*.index"))
	if err := os.WriteFile(idx[0], []byte("garbage!garbage!xyz"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(idx[1]); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, opts)
	defer l.Close()
	recs := readAll(t, l, 0)
	if len(recs) != 160 {
		t.Fatalf("read %d records, want 160", len(recs))
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
}

func TestRetention(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	t.Run("by size keeps the newest segments", func(t *testing.T) {
		l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 2048, RetentionBytes: 5000, RetentionAge: -1, Now: clock})
		defer l.Close()
		for i := 0; i < 150; i++ {
			if _, err := l.Append(batch(t, "s", 5, now.Load()), 0); err != nil {
				t.Fatal(err)
			}
		}
		commit(l)
		n, err := l.ApplyRetention()
		if err != nil || n == 0 {
			t.Fatalf("deleted %d segments, err %v", n, err)
		}
		o := l.Offsets()
		if o.LogStart == 0 || o.LogEnd != 750 {
			t.Fatalf("offsets %+v", o)
		}
		if _, err := l.Read(o.LogStart-1, 100, o.HighWatermark); !errors.Is(err, api.ErrOffsetOutOfRange) {
			t.Fatalf("read below the log start: %v", err)
		}
		if recs := readAll(t, l, o.LogStart); int64(len(recs)) != 750-o.LogStart {
			t.Fatalf("read %d records from the new start %d", len(recs), o.LogStart)
		}
	})
	t.Run("by age and never above the HW", func(t *testing.T) {
		l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 2048, RetentionAge: time.Hour, Now: clock})
		defer l.Close()
		old := now.Load() - 2*time.Hour.Milliseconds()
		for i := 0; i < 20; i++ {
			if _, err := l.Append(batch(t, "old", 5, old), 0); err != nil {
				t.Fatal(err)
			}
		}
		l.SetHighWatermark(10)
		if n, _ := l.ApplyRetention(); n != 0 {
			t.Fatalf("retention deleted %d segments holding uncommitted offsets", n)
		}
		commit(l)
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(batch(t, "new", 5, now.Load()), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		commit(l)
		if n, _ := l.ApplyRetention(); n == 0 {
			t.Fatal("nothing deleted by age")
		}
		if got := l.Offsets().LogStart; got != 100 {
			t.Fatalf("log start %d, want 100 (the first new record)", got)
		}
	})
}

func TestFlushPolicy(t *testing.T) {
	t.Run("every message", func(t *testing.T) {
		ffs := faultfs.New(osFS(t, t.TempDir()))
		l := openLog(t, ffs, commitlog.Options{FlushMessages: 1, FlushInterval: -1})
		defer l.Close()
		warmUp(t, l)
		before := ffs.Syncs()
		for i := 0; i < 5; i++ {
			if _, err := l.Append(batch(t, "f", 3, 1), 0); err != nil {
				t.Fatal(err)
			}
			if got := ffs.Syncs() - before; got != i+1 {
				t.Fatalf("after %d appends %d fsyncs", i+1, got)
			}
		}
	})
	t.Run("within the interval", func(t *testing.T) {
		ffs := faultfs.New(osFS(t, t.TempDir()))
		interval := 50 * time.Millisecond
		l := openLog(t, ffs, commitlog.Options{FlushInterval: interval})
		defer l.Close()
		warmUp(t, l)
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		before := ffs.Syncs()
		if _, err := l.Append(batch(t, "f", 3, 1), 0); err != nil {
			t.Fatal(err)
		}
		if ffs.Syncs() != before {
			t.Fatal("interval policy fsynced inside Append")
		}
		// The fsync comes by timer after the interval: not inside Append,
		// and within a few intervals (20 of them leave room for a loaded
		// machine, and still tell "within flush.ms" from "never" or
		// "at the next roll").
		appended := time.Now()
		testwait.Check(t, 20*interval, "the interval fsync", func() error {
			if ffs.Syncs() == before {
				return fmt.Errorf("no fsync %v after an append with flush.ms=%v", time.Since(appended), interval)
			}
			return nil
		})
	})
	t.Run("never", func(t *testing.T) {
		ffs := faultfs.New(osFS(t, t.TempDir()))
		l := openLog(t, ffs, commitlog.Options{FlushInterval: -1})
		defer l.Close()
		warmUp(t, l)
		before := ffs.Syncs()
		for i := 0; i < 5; i++ {
			if _, err := l.Append(batch(t, "f", 3, 1), 0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
		if ffs.Syncs() != before {
			t.Fatal("fsync with flushing off")
		}
	})
}

// warmUp appends one batch so that the epoch checkpoint, which is fsynced when a
// new leader epoch first writes, is out of the way of fsync counting.
func warmUp(t *testing.T, l *commitlog.Log) {
	t.Helper()
	if _, err := l.Append(batch(t, "warm", 1, 1), 0); err != nil {
		t.Fatal(err)
	}
}

func TestDiskErrorMakesLogReadOnly(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(osFS(t, dir))
	l := openLog(t, ffs, commitlog.Options{})
	if _, err := l.Append(batch(t, "ok", 5, 1), 0); err != nil {
		t.Fatal(err)
	}
	commit(l)
	ffs.FailNextWrite(nil)
	if _, err := l.Append(batch(t, "bad", 5, 1), 0); !errors.Is(err, api.ErrStorage) {
		t.Fatalf("append on a failing disk: %v, want STORAGE_ERROR", err)
	}
	if _, err := l.Append(batch(t, "after", 5, 1), 0); !errors.Is(err, api.ErrStorage) {
		t.Fatalf("append after a disk error: %v, want STORAGE_ERROR", err)
	}
	if l.Err() == nil {
		t.Fatal("Err() is nil on a read-only log")
	}
	if n := len(readAll(t, l, 0)); n != 5 {
		t.Fatalf("read %d records from the read-only log, want 5", n)
	}
	ffs.FailNextSync(nil)
	_ = l.Close() // read-only since the failed sync: Close reports it again
	l = openLog(t, osFS(t, dir), commitlog.Options{})
	defer l.Close()
	if end := l.Offsets().LogEnd; end != 5 {
		t.Fatalf("reopened log ends at %d, want 5 (the half-written batch dropped)", end)
	}
}

// Running out of file descriptors when a segment rolls is passing, not a
// disk failure: the append fails retriably, the log stays writable, and
// the next append rolls.
func TestRollWithoutDescriptors(t *testing.T) {
	ffs := faultfs.New(osFS(t, t.TempDir()))
	l := openLog(t, ffs, commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	for range 3 {
		if _, err := l.Append(batch(t, "a", 5, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	segs := len(l.ClosedSegments())
	for i := 0; len(l.ClosedSegments()) == segs; i++ {
		ffs.FailNextOpen(syscall.EMFILE)
		_, err := l.Append(batch(t, "b", 5, 1), 0)
		if err == nil {
			commit(l)
			continue // no roll yet: the open was not needed
		}
		if !errors.Is(err, api.ErrStorage) || l.Err() != nil {
			t.Fatalf("append whose roll found no descriptor: %v; Err() %v", err, l.Err())
		}
		ffs.FailNextOpen(nil)
		if _, err := l.Append(batch(t, "c", 5, 1), 0); err != nil {
			t.Fatalf("append after descriptors came back: %v", err)
		}
		commit(l)
		if len(l.ClosedSegments()) != segs+1 {
			t.Fatalf("%d segments after the retried roll, want %d", len(l.ClosedSegments()), segs+1)
		}
		if n := len(readAll(t, l, 0)); n != 5*(3+i+1) {
			t.Fatalf("read %d records, want %d", n, 5*(3+i+1))
		}
		return
	}
	t.Fatal("the log rolled without opening a file")
}

func TestTruncateAndEpochs(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	for i := 0; i < 30; i++ {
		if _, err := l.Append(batch(t, "e", 5, 1), int32(i/10)); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	if epoch, end := l.EndOffsetForEpoch(1); epoch != 1 || end != 100 {
		t.Fatalf("end of epoch 1: %d %d", epoch, end)
	}
	if epoch, end := l.EndOffsetForEpoch(7); epoch != 2 || end != 150 {
		t.Fatalf("end of epoch 7: %d %d", epoch, end)
	}
	end, err := l.TruncateTo(73)
	if err != nil || end != 70 {
		t.Fatalf("truncate to 73: end %d, %v (want 70: batches stay whole)", end, err)
	}
	o := l.Offsets()
	if o.LogEnd != 70 || o.HighWatermark != 70 {
		t.Fatalf("offsets after truncate %+v", o)
	}
	if got := l.Epochs(); len(got) != 2 || got[1] != (commitlog.EpochEntry{Epoch: 1, StartOffset: 50}) {
		t.Fatalf("epochs after truncate %v", got)
	}
	info, err := l.Append(batch(t, "new", 5, 1), 3)
	if err != nil || info.FirstOffset != 70 {
		t.Fatalf("append after truncate %+v %v", info, err)
	}
	if n := len(readAll(t, l, 0)); n != 70 {
		t.Fatalf("read %d", n)
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	for i := 0; i < 20; i++ {
		if _, err := l.Append(batch(t, "t", 5, int64(1000+10*i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	tests := []struct {
		ts     int64
		want   int64
		wantOK bool
	}{{0, 0, true}, {1000, 0, true}, {1003, 3, true}, {1006, 5, true}, {1192, 97, true}, {1194, 99, true}, {1195, 0, false}}
	for _, tt := range tests {
		got, ok, err := l.OffsetForTimestamp(tt.ts)
		if err != nil || ok != tt.wantOK || (ok && got != tt.want) {
			t.Errorf("ts %d: %d %v %v, want %d %v", tt.ts, got, ok, err, tt.want, tt.wantOK)
		}
	}
}

func TestWaitWakesOnAppend(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx, 0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on an idle log: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- l.Wait(ctx, 0, 0)
	}()
	if _, err := l.Append(batch(t, "w", 1, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
}

func TestReopenDoesNotRollAtOnce(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{})
	if _, err := l.Append(batch(t, "a", 2, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, commitlog.Options{})
	defer l.Close()
	if _, err := l.Append(batch(t, "b", 2, 1), 0); err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "orders-0", "*.log")); len(segs) != 1 {
		t.Fatalf("reopened log rolled: %v", segs)
	}
}

func TestResetTo(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 2048})
	for i := 0; i < 20; i++ {
		if _, err := l.Append(batch(t, "r", 5, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.ResetTo(500, nil); err != nil {
		t.Fatal(err)
	}
	if o := l.Offsets(); o.LogStart != 500 || o.LogEnd != 500 || o.HighWatermark != 500 {
		t.Fatalf("offsets after reset %+v", o)
	}
	b := batch(t, "leader", 3, 1)
	recordbatch.SetBaseOffset(b, 500)
	recordbatch.SetLeaderEpoch(b, 4)
	if _, err := l.AppendReplica(b); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	if o := l.Offsets(); o.LogStart != 500 || o.LogEnd != 503 {
		t.Fatalf("offsets after reopen %+v", o)
	}
}

// BenchmarkAppend measures Append, the broker's produce path below HTTP:
// validation, offset stamping and the write, for a batch of 1,000 records of
// about 100 bytes in each codec. Bytes per second count the records
// uncompressed, so codecs compare.
func BenchmarkAppend(b *testing.B) {
	// Values like api's benchmarks use: words and numbers, which compress
	// about as well as JSON events do.
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"order", "created", "shipped", "user", "amount", "currency", "EUR", "status", "ok"}
	recs := make([]recordbatch.Record, 1000)
	for i := range recs {
		v := make([]byte, 0, 120)
		for len(v) < 100 {
			v = append(v, words[rng.IntN(len(words))]...)
			v = fmt.Appendf(v, "%d,", rng.IntN(100000))
		}
		recs[i] = recordbatch.Record{Timestamp: 1_700_000_000_000 + int64(i), Key: fmt.Appendf(nil, "user-%d", rng.IntN(50)), Value: v[:100]}
	}
	raw, err := recordbatch.Encode(nil, recs, recordbatch.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []api.Compression{api.CompressionNone, api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd} {
		batch, err := recordbatch.Encode(nil, recs, recordbatch.Options{Compression: c})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.String(), func(b *testing.B) {
			// Segments of 64 MiB keep the page cache warm; a roll now and
			// then is part of the path.
			l := openLog(b, osFS(b, b.TempDir()), commitlog.Options{SegmentBytes: 64 << 20})
			defer l.Close()
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Append(batch, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAssignedEpochAcrossRestarts: a new leader's epoch, assigned before it
// wrote anything, is kept once the first append in it is; with nothing in
// it, a restart (a crash or a clean close) does not keep it, and that
// changes no answer a follower gets.
func TestAssignedEpochAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, osFS(t, dir), commitlog.Options{})
	if _, err := l.Append(batch(t, "a", 10, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := l.AssignEpoch(3); err != nil {
		t.Fatal(err)
	}
	if epoch, end := l.EndOffsetForEpoch(1); epoch != 1 || end != 10 {
		t.Fatalf("end of epoch 1 with epoch 3 assigned: %d %d, want 1 10", epoch, end)
	}
	// A crash (no Close) before any write in epoch 3.
	l = openLog(t, osFS(t, dir), commitlog.Options{})
	if got := l.Epochs(); fmt.Sprint(got) != fmt.Sprint([]commitlog.EpochEntry{{Epoch: 1, StartOffset: 0}}) {
		t.Fatalf("epochs after a crash: %v, want epoch 1 alone", got)
	}
	if epoch, end := l.EndOffsetForEpoch(1); epoch != 1 || end != 10 {
		t.Fatalf("end of epoch 1 after the crash: %d %d, want 1 10 as before", epoch, end)
	}
	// Assigned again and written in: a crash keeps it.
	if err := l.AssignEpoch(3); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(batch(t, "b", 10, 1), 3); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), commitlog.Options{})
	want := []commitlog.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 10}}
	if got := l.Epochs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("epochs after a write in epoch 3 and a crash: %v, want %v", got, want)
	}
	// Assigned with nothing written, then closed: the clean reopen drops
	// it, and epoch 3 still ends at the log end.
	if err := l.AssignEpoch(5); err != nil {
		t.Fatal(err)
	}
	if epoch, end := l.EndOffsetForEpoch(3); epoch != 3 || end != 20 {
		t.Fatalf("end of epoch 3 with epoch 5 assigned: %d %d, want 3 20", epoch, end)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), commitlog.Options{})
	defer l.Close()
	if got := l.Epochs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("epochs after a clean close: %v, want %v", got, want)
	}
	if epoch, end := l.EndOffsetForEpoch(3); epoch != 3 || end != 20 {
		t.Fatalf("end of epoch 3 after the restart: %d %d, want 3 20", epoch, end)
	}
}
