package commitlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/commitlog/faultfs"
)

// crashOpts has no flush timer: every change to the disk in these tests is
// one the test made, so a crash point always lands at the same step.
var crashOpts = commitlog.Options{SegmentBytes: 1024, IndexIntervalBytes: 256, FlushInterval: -1}

// keepTombstones cleans with tombstones that are not due within a test, so
// cleaning a cleaned log again changes nothing.
var keepTombstones = commitlog.CleanOptions{DeleteRetention: time.Hour}

// buildKeyed fills a log for the crash tests and checkpoints its HW (a log
// that crashes never writes it at close).
func buildKeyed(t *testing.T, fsys commitlog.FS) (*commitlog.Log, history) {
	t.Helper()
	l := openLog(t, fsys, crashOpts)
	h := history{}
	h.fillKeyed(t, l, api.CompressionGzip, 40, t0)
	if err := l.CheckpointHW(); err != nil {
		t.Fatal(err)
	}
	return l, h
}

func committedOffsets(t *testing.T, l *commitlog.Log) []int64 {
	t.Helper()
	var out []int64
	for _, r := range readAll(t, l, l.Offsets().LogStart) {
		out = append(out, r.Offset)
	}
	return out
}

// TestCleanCrashAtEveryStep kills the clean at every change it makes to the
// disk in turn (a write, an fsync, a rename, a removal...), reopens the
// directory, and checks that the log is the old one or the cleaned one in
// full, with every key's latest value, and takes appends where it ended.
func TestCleanCrashAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long fault test; the full lane runs it")
	}
	// The same log cleaned without a crash.
	ref, h := buildKeyed(t, osFS(t, t.TempDir()))
	old := committedOffsets(t, ref)
	if _, err := ref.Clean(context.Background(), t0, keepTombstones); err != nil {
		t.Fatal(err)
	}
	cleaned := committedOffsets(t, ref)
	end := ref.Offsets().LogEnd
	if err := ref.Close(); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(old, cleaned) {
		t.Fatal("fixture: the clean removed nothing")
	}
	latest := h.latestValues(old)

	seen := map[string]bool{} // kinds of leftovers some crash left
	var outcomes [2]int       // crashes that reopened as the old log, as the cleaned one
	for k := 0; ; k++ {
		dir := t.TempDir()
		ffs := faultfs.New(osFS(t, dir))
		l, _ := buildKeyed(t, ffs)
		ffs.CrashAfter(k)
		_, cerr := l.Clean(context.Background(), t0, keepTombstones)
		crashed := ffs.Crashed()
		if crashed && cerr == nil {
			t.Fatalf("crash after %d changes: Clean reported success", k)
		}
		for _, f := range leftovers(t, dir) {
			seen[f[strings.Index(f, "."):]] = true
		}
		_ = l.Close() // fails past the crash point: no clean-shutdown marker
		if !crashed {
			if cerr != nil {
				t.Fatalf("no crash, yet: %v", cerr)
			}
			t.Logf("the clean makes %d changes", k)
			break
		}

		l = openLog(t, osFS(t, dir), crashOpts)
		if left := leftovers(t, dir); len(left) != 0 {
			t.Fatalf("crash after %d changes: reopened with %v left", k, left)
		}
		got := committedOffsets(t, l)
		switch {
		case slices.Equal(got, old):
			outcomes[0]++
		case slices.Equal(got, cleaned):
			outcomes[1]++
		default:
			t.Fatalf("crash after %d changes: the log holds\n%v\nneither the old\n%v\nnor the cleaned\n%v", k, got, old, cleaned)
		}
		h.checkLog(t, l, got)
		if v := h.latestValues(got); fmt.Sprint(v) != fmt.Sprint(latest) {
			t.Fatalf("crash after %d changes: latest values %v, want %v", k, v, latest)
		}
		info, err := l.Append(batch(t, "after", 1, 1), 0)
		if err != nil || info.FirstOffset != end {
			t.Fatalf("crash after %d changes: append after reopening: %+v %v, want offset %d", k, info, err, end)
		}
		// A clean after the reopen reaches the same result.
		commit(l)
		force := keepTombstones
		force.Force = true
		if _, err := l.Clean(context.Background(), t0, force); err != nil {
			t.Fatalf("crash after %d changes: clean after reopening: %v", k, err)
		}
		if got := committedOffsets(t, l); !slices.Equal(got, append(slices.Clone(cleaned), end)) {
			t.Fatalf("crash after %d changes: cleaning again gives %v", k, got)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{".log.cleaned", ".index.swap", ".log.swap"} {
		if !seen[kind] {
			t.Errorf("no crash left a %s file (saw %v): the test misses a step", kind, seen)
		}
	}
	if outcomes[0] == 0 || outcomes[1] == 0 {
		t.Errorf("outcomes old/cleaned %v: want both", outcomes)
	}
}

func TestCleanDiskErrorsLeaveLogWritable(t *testing.T) {
	tests := []struct {
		name   string
		inject func(*faultfs.FS)
	}{
		{"write", func(f *faultfs.FS) { f.FailNextWrite(nil) }},
		{"fsync", func(f *faultfs.FS) { f.FailNextSync(nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := faultfs.New(osFS(t, dir))
			l, h := buildKeyed(t, ffs)
			defer l.Close()
			before := committedOffsets(t, l)
			tt.inject(ffs)
			if _, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); !errors.Is(err, api.ErrStorage) {
				t.Fatalf("clean on a failing disk: %v, want STORAGE_ERROR", err)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("a failed clean made the log read-only: %v", err)
			}
			if left := leftovers(t, dir); len(left) != 0 {
				t.Fatalf("files left behind: %v", left)
			}
			h.checkLog(t, l, before)
			h.appendRecs(t, l, api.CompressionNone, put("k1", "after", t0))
			commit(l)
			if st, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); err != nil || !st.Cleaned {
				t.Fatalf("clean once the disk works: %+v %v", st, err)
			}
			h.checkLog(t, l, h.survivors(cleanLimit(l)))
		})
	}
}

func TestCleanSwapFailureMakesLogReadOnly(t *testing.T) {
	// A rename that fails after the commit point: the log turns read-only
	// and the next Open finishes the swap.
	dir := t.TempDir()
	fail := &renameFailFS{FS: osFS(t, dir), suffix: ".log.swap", to: ".log"}
	l := openLog(t, fail, crashOpts)
	h := history{}
	h.fillKeyed(t, l, api.CompressionNone, 40, t0)
	if err := l.CheckpointHW(); err != nil { // a read-only log does not write it at close
		t.Fatal(err)
	}
	limit := cleanLimit(l)
	if _, err := l.Clean(context.Background(), t0, commitlog.CleanOptions{}); err == nil {
		t.Fatal("clean with a failing rename succeeded")
	}
	if !errors.Is(l.Err(), api.ErrStorage) {
		t.Fatalf("log error %v, want STORAGE_ERROR", l.Err())
	}
	h.checkLog(t, l, allOffsets(h)) // reads go on, from the old segments
	_ = l.Close()                   // failed with STORAGE_ERROR: Close reports it again
	l = openLog(t, osFS(t, dir), crashOpts)
	defer l.Close()
	h.checkLog(t, l, h.survivors(limit))
	if left := leftovers(t, dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

// renameFailFS fails the first rename from a name ending in suffix to one
// ending in to.
type renameFailFS struct {
	commitlog.FS
	suffix, to string
	done       bool
}

func (f *renameFailFS) Rename(oldname, newname string) error {
	if !f.done && strings.HasSuffix(oldname, f.suffix) && strings.HasSuffix(newname, f.to) {
		f.done = true
		return faultfs.ErrInjected
	}
	return f.FS.Rename(oldname, newname)
}

func TestCleanLeftoversOnOpen(t *testing.T) {
	// Files an interrupted clean could leave, written by hand: an unfinished
	// clean (".cleaned", and a ".swap" next to a ".log.cleaned"), and a
	// ".log.swap" of a segment retention deleted since.
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, crashOpts)
	h := history{}
	h.fillKeyed(t, l, api.CompressionNone, 40, t0)
	segs := l.ClosedSegments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, "orders-0")
	name := func(base int64, suffix string) string {
		return filepath.Join(part, fmt.Sprintf("%020d%s", base, suffix))
	}
	garbage := []byte("not a segment")
	for _, f := range []string{
		name(segs[0].Base, ".log.cleaned"), name(segs[0].Base, ".index.cleaned"),
		name(segs[1].Base, ".log.swap"), name(segs[1].Base, ".index.swap"),
		name(999999, ".log.swap"),
	} {
		if err := os.WriteFile(f, garbage, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, fsys, crashOpts)
	defer l.Close()
	if left := leftovers(t, dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
	h.checkLog(t, l, allOffsets(h))
}

func TestCleanThenReopen(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprint("clean shutdown ", clean), func(t *testing.T) {
			dir := t.TempDir()
			ffs := faultfs.New(osFS(t, dir))
			l, h := buildKeyed(t, ffs)
			limit := cleanLimit(l)
			if _, err := l.Clean(context.Background(), t0, keepTombstones); err != nil {
				t.Fatal(err)
			}
			want := h.survivors(limit)
			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				ffs.CrashAfter(0)
				_ = l.Close() // past the crash point: Close fails too
			}
			l = openLog(t, osFS(t, dir), crashOpts)
			defer l.Close()
			h.checkLog(t, l, want)
			// Indexes work: every offset reads as the first survivor at or after it.
			for off := int64(0); off < limit; off += 3 {
				i, _ := slices.BinarySearch(want, off)
				if recs := readAll(t, l, off); len(recs) == 0 || recs[0].Offset != want[i] {
					t.Fatalf("reading from %d after reopening starts at %v, want %d", off, recs, want[i])
				}
			}
			again := keepTombstones
			again.MinCleanableDirtyRatio = 0.5
			if st, err := l.Clean(context.Background(), t0, again); err != nil || st.Cleaned || st.CleanedTo != limit {
				t.Fatalf("clean after reopening without new data: %+v %v", st, err)
			}
		})
	}
}
