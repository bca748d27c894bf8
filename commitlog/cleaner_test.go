package commitlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// t0 is the tests' clock: record timestamps are set relative to it, and
// Clean is told the time explicitly.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func put(k, v string, ts time.Time) recordbatch.Record {
	return recordbatch.Record{Timestamp: ts.UnixMilli(), Key: []byte(k), Value: []byte(v)}
}

func del(k string, ts time.Time) recordbatch.Record {
	return recordbatch.Record{Timestamp: ts.UnixMilli(), Key: []byte(k)}
}

// history is every record appended to a test log, by offset.
type history map[int64]recordbatch.Record

// appendRecs appends recs as one batch and remembers them at their offsets.
func (h history) appendRecs(t testing.TB, l *commitlog.Log, codec api.Compression, recs ...recordbatch.Record) commitlog.AppendInfo {
	t.Helper()
	b, err := recordbatch.Encode(nil, recs, recordbatch.Options{Compression: codec})
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Append(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		r.Offset = info.FirstOffset + int64(i)
		h[r.Offset] = r
	}
	return info
}

// fillKeyed appends n batches of updates to seven keys, with a tombstone in
// every fifth batch and a record without a key in every seventh, and commits
// them. ts is the records' timestamp.
func (h history) fillKeyed(t testing.TB, l *commitlog.Log, codec api.Compression, n int, ts time.Time) {
	t.Helper()
	for i := 0; i < n; i++ {
		var recs []recordbatch.Record
		for j := 0; j < 3; j++ {
			k := (i*3 + j) % 7
			recs = append(recs, put(fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-v%d", k, i), ts))
		}
		if i%5 == 4 {
			recs = append(recs, del(fmt.Sprintf("k%d", i%7), ts))
		}
		if i%7 == 6 {
			recs = append(recs, recordbatch.Record{Timestamp: ts.UnixMilli(), Value: []byte(fmt.Sprintf("unkeyed-%d", i))})
		}
		h.appendRecs(t, l, codec, recs...)
	}
	commit(l)
}

// survivors is what a clean covering the offsets below limit keeps: above
// limit everything, below it each key's latest record there and every
// record without a key (no record protected by age, no tombstone due).
func (h history) survivors(limit int64) []int64 {
	latest := map[string]int64{}
	for off, r := range h {
		if off < limit && r.Key != nil && off >= latest[string(r.Key)] {
			latest[string(r.Key)] = off
		}
	}
	var out []int64
	for off, r := range h {
		if off >= limit || r.Key == nil || latest[string(r.Key)] == off {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return out
}

// checkLog reads the whole committed log and checks it holds exactly the
// records at the offsets want, each as it was appended.
func (h history) checkLog(t testing.TB, l *commitlog.Log, want []int64) {
	t.Helper()
	got := readAll(t, l, l.Offsets().LogStart)
	var offs []int64
	for _, r := range got {
		offs = append(offs, r.Offset)
		w, ok := h[r.Offset]
		if !ok || !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) ||
			(r.Value == nil) != (w.Value == nil) || r.Timestamp != w.Timestamp {
			t.Fatalf("offset %d holds key %q value %q, appended as key %q value %q", r.Offset, r.Key, r.Value, w.Key, w.Value)
		}
	}
	if !slices.Equal(offs, want) {
		t.Fatalf("log holds offsets\n%v\nwant\n%v", offs, want)
	}
}

// latestValues maps every key to its latest record's value ("<nil>" for a
// tombstone), over the records at offsets offs.
func (h history) latestValues(offs []int64) map[string]string {
	out := map[string]string{}
	for _, off := range offs {
		if r := h[off]; r.Key != nil {
			v := string(r.Value)
			if r.Value == nil {
				v = "<nil>"
			}
			out[string(r.Key)] = v
		}
	}
	return out
}

func allOffsets(h history) []int64 {
	var out []int64
	for off := range h {
		out = append(out, off)
	}
	slices.Sort(out)
	return out
}

// cleanLimit is where a clean stops: the start of the active segment (the
// tests commit everything).
func cleanLimit(l *commitlog.Log) int64 {
	segs := l.ClosedSegments()
	if len(segs) == 0 {
		return 0
	}
	return segs[len(segs)-1].Next
}

// leftovers lists the clean's temporary files in the partition directory.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.cleaned", "*.swap"} {
		m, err := filepath.Glob(filepath.Join(dir, "orders-0", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			out = append(out, filepath.Base(f))
		}
	}
	sort.Strings(out)
	return out
}

func TestCleanKeepsLatestValuePerKey(t *testing.T) {
	for _, codec := range []api.Compression{api.CompressionNone, api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, osFS(t, dir), commitlog.Options{SegmentBytes: 1024, IndexIntervalBytes: 128})
			defer l.Close()
			h := history{}
			h.fillKeyed(t, l, codec, 60, t0)
			limit := cleanLimit(l)
			if limit == 0 || limit == l.Offsets().LogEnd {
				t.Fatalf("fixture: clean limit %d, log end %d; want closed segments and a non-empty active one", limit, l.Offsets().LogEnd)
			}
			active := activeSegment(t, dir)
			activeBefore, err := os.ReadFile(active)
			if err != nil {
				t.Fatal(err)
			}
			before := l.Offsets()

			st, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := h.survivors(limit)
			if !st.Cleaned || st.Segments == 0 || st.Removed != int64(len(h)-len(want)) || st.CleanedTo != limit || st.BytesOut >= st.BytesIn {
				t.Fatalf("stats %+v; %d of %d records should go", st, len(h)-len(want), len(h))
			}
			h.checkLog(t, l, want)
			if got, all := h.latestValues(want), h.latestValues(allOffsets(h)); fmt.Sprint(got) != fmt.Sprint(all) {
				t.Fatalf("latest values after the clean %v, before %v", got, all)
			}
			if after := l.Offsets(); after != before {
				t.Fatalf("offsets moved: %+v, were %+v", after, before)
			}
			if activeAfter, err := os.ReadFile(active); err != nil || !bytes.Equal(activeAfter, activeBefore) {
				t.Fatalf("the active segment changed (%v)", err)
			}
			if left := leftovers(t, dir); len(left) != 0 {
				t.Fatalf("files left behind: %v", left)
			}

			// A removed offset reads as the next record that survived.
			for off := int64(0); off < limit; off++ {
				i, _ := slices.BinarySearch(want, off)
				recs := readAll(t, l, off)
				if len(recs) == 0 || recs[0].Offset != want[i] {
					t.Fatalf("reading from %d starts at %v, want %d", off, recs, want[i])
				}
			}
			// And the log goes on where it was.
			info := h.appendRecs(t, l, codec, put("k1", "after", t0))
			if info.FirstOffset != before.LogEnd {
				t.Fatalf("next append at %d, want %d", info.FirstOffset, before.LogEnd)
			}
		})
	}
}

func TestCleanTombstonesLastDeleteRetention(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	h := history{}
	h.appendRecs(t, l, api.CompressionNone, put("gone", "v1", t0), put("kept", "v1", t0))
	h.appendRecs(t, l, api.CompressionNone, del("gone", t0), put("kept", "v2", t0))
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	h.appendRecs(t, l, api.CompressionNone, put("other", "v1", t0))
	commit(l)
	opts := commitlog.CleanOptions{MinCleanableDirtyRatio: 0.5, DeleteRetention: time.Hour}

	tests := []struct {
		name    string
		at      time.Time
		cleaned bool
		want    []int64
	}{
		// The first clean drops the old values; the tombstone stays.
		{"first clean", t0, true, []int64{2, 3, 4}},
		// No new data, and the tombstone is not due: nothing to do.
		{"before delete.retention.ms", t0.Add(59 * time.Minute), false, []int64{2, 3, 4}},
		// Due: a clean runs without new data, and the tombstone goes.
		{"after delete.retention.ms", t0.Add(time.Hour), true, []int64{3, 4}},
		// Nothing left to do.
		{"after that", t0.Add(2 * time.Hour), false, []int64{3, 4}},
	}
	for _, tt := range tests {
		st, err := l.Clean(context.Background(), tt.at, opts)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if st.Cleaned != tt.cleaned {
			t.Fatalf("%s: cleaned=%v, want %v (%+v)", tt.name, st.Cleaned, tt.cleaned, st)
		}
		h.checkLog(t, l, tt.want)
	}
}

func TestCleanTombstoneClockStartsAtFirstClean(t *testing.T) {
	// A tombstone written long ago but cleaned for the first time now still
	// gets its full delete.retention.ms.
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	h := history{}
	old := t0.Add(-48 * time.Hour)
	h.appendRecs(t, l, api.CompressionNone, put("a", "v1", old), del("a", old))
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	commit(l)
	opts := commitlog.CleanOptions{DeleteRetention: time.Hour}
	if _, err := l.Clean(context.Background(), t0, opts); err != nil {
		t.Fatal(err)
	}
	h.checkLog(t, l, []int64{1})
	if _, err := l.Clean(context.Background(), t0.Add(time.Hour), opts); err != nil {
		t.Fatal(err)
	}
	h.checkLog(t, l, nil)
}

func TestCleanMinCompactionLag(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	h := history{}
	old, young := t0.Add(-2*time.Hour), t0.Add(-time.Minute)
	h.appendRecs(t, l, api.CompressionNone,
		put("a", "old", old),     // 0: superseded and old: goes
		put("a", "young", young), // 1: superseded but young: stays for now
		put("a", "latest", young),
		put("b", "old", old),     // 3: superseded and old: goes
		del("b", old),            // 4: b's tombstone
		put("c", "young", young), // 5: superseded but young
		del("c", old),            // 6: a tombstone stamped older than the value it deletes
	)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	commit(l)
	opts := commitlog.CleanOptions{MinCompactionLag: time.Hour}
	tests := []struct {
		name string
		at   time.Time
		want []int64
	}{
		// Tombstones stay at their first clean.
		{"first clean", t0, []int64{1, 2, 4, 5, 6}},
		// b's tombstone is due (delete.retention.ms 0) and goes; c's stays
		// while c's young value does, or that value would come back.
		{"young values stay", t0.Add(30 * time.Minute), []int64{1, 2, 5, 6}},
		{"past the lag", t0.Add(2 * time.Hour), []int64{2}},
	}
	for _, tt := range tests {
		if _, err := l.Clean(context.Background(), tt.at, opts); err != nil {
			t.Fatal(err)
		}
		h.checkLog(t, l, tt.want)
		opts.Force = true
	}
}

func TestCleanDirtyRatio(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 1024})
	h := history{}
	h.fillKeyed(t, l, api.CompressionNone, 40, t0)
	// Tombstones are not due within the test, so the survivors are easy to say.
	opts := commitlog.CleanOptions{MinCleanableDirtyRatio: 0.5, DeleteRetention: time.Hour}
	st, err := l.Clean(context.Background(), t0, opts)
	if err != nil || !st.Cleaned || st.DirtyRatio != 1 {
		t.Fatalf("first clean: %+v %v", st, err)
	}
	// Nothing new: nothing to do, across a reopen too (the checkpoint).
	if st, err := l.Clean(context.Background(), t0, opts); err != nil || st.Cleaned || st.DirtyRatio != 0 {
		t.Fatalf("clean without new data: %+v %v", st, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	if st, err := l.Clean(context.Background(), t0, opts); err != nil || st.Cleaned || st.CleanedTo == 0 {
		t.Fatalf("clean after reopen without new data: %+v %v", st, err)
	}
	// A little new data: below the ratio. Then enough.
	var st2 commitlog.CleanStats
	for i := 0; !st2.Cleaned; i++ {
		if i > 200 {
			t.Fatal("the dirty ratio never reached 0.5")
		}
		h.fillKeyed(t, l, api.CompressionNone, 1, t0)
		st2, err = l.Clean(context.Background(), t0, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !st2.Cleaned && st2.DirtyRatio >= 0.5 {
			t.Fatalf("dirty ratio %v but no clean", st2.DirtyRatio)
		}
	}
	if st2.DirtyRatio < 0.5 {
		t.Fatalf("cleaned at dirty ratio %v", st2.DirtyRatio)
	}
	h.checkLog(t, l, h.survivors(cleanLimit(l)))
}

func TestCleanCompactOnlyHasNoRetention(t *testing.T) {
	// What a compacted-only topic's config gives the log: no time or size
	// retention, so old segments stay however old and large.
	cfg, err := api.ParseTopicConfig(map[string]string{"cleanup.policy": "compact", "retention.ms": "1", "retention.bytes": "1024"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024, RetentionAge: cfg.Retention, RetentionBytes: cfg.RetentionBytes})
	defer l.Close()
	h := history{}
	h.fillKeyed(t, l, api.CompressionNone, 40, t0.Add(-30*24*time.Hour))
	if n, err := l.ApplyRetention(); err != nil || n != 0 {
		t.Fatalf("retention deleted %d segments of a compacted-only log (%v)", n, err)
	}
}

func TestCleanKeepsProducerState(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 1024})
	h := history{}
	// Producer 9 overwrites one key; each batch is superseded by the next.
	seq := int32(0)
	var lastBatch []byte
	for i := 0; i < 30; i++ {
		b, err := recordbatch.Encode(nil, []recordbatch.Record{put("p", fmt.Sprint("v", i), t0)}, recordbatch.Options{ProducerID: 9, ProducerEpoch: 1, BaseSequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		h[info.FirstOffset] = put("p", fmt.Sprint("v", i), t0)
		lastBatch, seq = b, seq+1
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	h.appendRecs(t, l, api.CompressionNone, put("x", "active", t0))
	commit(l)
	if _, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); err != nil {
		t.Fatal(err)
	}
	h.checkLog(t, l, []int64{29, 30})

	// A follower copying the cleaned log, and this log reopened without its
	// producer snapshot, both rebuild the producer from batch headers.
	follower := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024})
	defer follower.Close()
	for from := int64(0); from < l.Offsets().HighWatermark; {
		res, err := l.Read(from, 1<<20, l.Offsets().HighWatermark)
		if err != nil {
			t.Fatal(err)
		}
		copied, err := res.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := follower.AppendReplica(copied); err != nil {
			t.Fatalf("a follower refuses the compacted batches from %d: %v", from, err)
		}
		from = res.NextOffset
	}
	commit(follower)
	h.checkLog(t, follower, []int64{29, 30})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "orders-0", "*.producers"))
	if len(snaps) == 0 {
		t.Fatal("no producer snapshot to remove")
	}
	for _, s := range snaps {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, fsys, commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	for name, lg := range map[string]*commitlog.Log{"reopened": l, "follower": follower} {
		info, err := lg.Append(bytes.Clone(lastBatch), 0)
		if err != nil || !info.Duplicate || info.FirstOffset != 29 {
			t.Fatalf("%s: retry of the last batch: %+v %v; want a duplicate at 29", name, info, err)
		}
		b, _ := recordbatch.Encode(nil, []recordbatch.Record{put("p", "next", t0)}, recordbatch.Options{ProducerID: 9, ProducerEpoch: 1, BaseSequence: seq})
		if info, err := lg.Append(b, 0); err != nil || info.Duplicate {
			t.Fatalf("%s: next batch: %+v %v", name, info, err)
		}
	}
}

func TestCleanWhileAppendingAndReading(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{SegmentBytes: 1024})
	defer l.Close()
	h := history{}
	h.fillKeyed(t, l, api.CompressionGzip, 40, t0)
	// A reader that located bytes before the clean keeps reading them.
	res, err := l.Read(0, 1<<20, l.Offsets().HighWatermark)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup // h is the writer's until Wait
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 40; i++ {
			b, err := recordbatch.Encode(nil, []recordbatch.Record{put("w", fmt.Sprint(i), t0)}, recordbatch.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			info, err := l.Append(b, 0)
			if err != nil {
				t.Error(err)
				return
			}
			h[info.FirstOffset] = put("w", fmt.Sprint(i), t0)
			commit(l)
		}
	}()
	if _, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); err != nil && !errors.Is(err, commitlog.ErrCleanRaced) {
		t.Fatal(err)
	}
	wg.Wait()
	old, err := res.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := recordbatch.Scan(old, true, func(_ recordbatch.Header, b []byte) error {
		_, recs, err := recordbatch.Decode(b)
		n += len(recs)
		return err
	}); err != nil || n == 0 {
		t.Fatalf("the descriptor opened before the clean reads %d records (%v)", n, err)
	}
	// Whatever the clean covered, every key keeps its latest value.
	got := readAll(t, l, 0)
	var offs []int64
	for _, r := range got {
		offs = append(offs, r.Offset)
	}
	if a, b := h.latestValues(offs), h.latestValues(allOffsets(h)); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("latest values %v, want %v", a, b)
	}
}

func TestCleanAbandonsWhenSegmentsChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(l *commitlog.Log) error
	}{
		{"retention", func(l *commitlog.Log) error { _, err := l.ApplyRetention(); return err }},
		{"truncation", func(l *commitlog.Log) error { _, err := l.TruncateTo(5); return err }},
		{"reset", func(l *commitlog.Log) error { return l.ResetTo(1000, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			hook := &hookFS{FS: osFS(t, dir)}
			l := openLog(t, hook, commitlog.Options{SegmentBytes: 1024, RetentionBytes: 3000, RetentionAge: -1})
			defer l.Close()
			h := history{}
			h.fillKeyed(t, l, api.CompressionNone, 40, t0)
			// The change lands while the cleaner writes its first segment.
			hook.onCreate = func(name string) {
				if strings.HasSuffix(name, ".log.cleaned") {
					hook.onCreate = nil
					if err := tt.change(l); err != nil {
						t.Error(err)
					}
				}
			}
			if _, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); !errors.Is(err, commitlog.ErrCleanRaced) {
				t.Fatalf("clean racing %s: %v, want ErrCleanRaced", tt.name, err)
			}
			if left := leftovers(t, dir); len(left) != 0 {
				t.Fatalf("files left behind: %v", left)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("the log turned read-only: %v", err)
			}
			commit(l)
			start := l.Offsets().LogStart
			var want []int64
			for _, off := range allOffsets(h) {
				if off >= start && off < l.Offsets().LogEnd {
					want = append(want, off)
				}
			}
			h.checkLog(t, l, want)
		})
	}
}

// hookFS calls onCreate with the name of every file opened with O_CREATE.
type hookFS struct {
	commitlog.FS
	onCreate func(name string)
}

func (f *hookFS) OpenFile(name string, flag int, perm os.FileMode) (commitlog.File, error) {
	if flag&os.O_CREATE != 0 && f.onCreate != nil {
		f.onCreate(name)
	}
	return f.FS.OpenFile(name, flag, perm)
}
