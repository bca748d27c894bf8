package commitlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
)

// A leader whose oldest segments are gone (tiering, retention) hands the
// producer table as of its log start to a follower that starts over there;
// the follower, should it lead, still answers a retry of a batch from
// before its start with the original offsets instead of writing it again.
func TestResetToCarriesTheLeadersProducers(t *testing.T) {
	leader := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer leader.Close()
	first, err := leader.Append(idemBatch(t, 11, 0, 0, 3), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := leader.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := leader.Append(batch(t, "filler", 4, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(leader)
	if n, err := leader.DeleteSegmentsBelow(leader.Offsets().LogEnd); err != nil || n == 0 {
		t.Fatalf("deleted %d segments: %v", n, err)
	}
	start := leader.Offsets().LogStart
	if start <= first.LastOffset {
		t.Fatalf("log start %d still holds the producer's batch", start)
	}
	if _, err := leader.ProducerSnapshotAt(start - 1); !errors.Is(err, commitlog.ErrNoProducerSnapshot) {
		t.Fatalf("a snapshot where none was taken: %v", err)
	}
	snap, err := leader.ProducerSnapshotAt(start)
	if err != nil {
		t.Fatalf("the snapshot at the leader's start: %v", err)
	}

	dir := t.TempDir()
	follower := openLog(t, osFS(t, dir), commitlog.Options{})
	if err := follower.ResetTo(start, snap); err != nil {
		t.Fatal(err)
	}
	// A crash (no Close): the table comes back from the snapshot file.
	reopened := openLog(t, osFS(t, dir), commitlog.Options{})
	defer reopened.Close()
	for name, l := range map[string]*commitlog.Log{"reset": follower, "reopened after a crash": reopened} {
		dup, err := l.Append(idemBatch(t, 11, 0, 0, 3), 0)
		if err != nil || !dup.Duplicate || dup.FirstOffset != first.FirstOffset || dup.LastOffset != first.LastOffset {
			t.Fatalf("%s: retry of a batch below the start: %+v %v; want a duplicate at %d-%d", name, dup, err, first.FirstOffset, first.LastOffset)
		}
		if _, err := l.Append(idemBatch(t, 11, 0, 5, 1), 0); !errors.Is(err, api.ErrOutOfOrderSequence) {
			t.Fatalf("%s: a sequence gap: %v, want OUT_OF_ORDER_SEQUENCE", name, err)
		}
	}
	// Without the snapshot the same retry would be written again: the
	// behaviour the snapshot exists to prevent.
	bare := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer bare.Close()
	if err := bare.ResetTo(start, nil); err != nil {
		t.Fatal(err)
	}
	if info, err := bare.Append(idemBatch(t, 11, 0, 0, 3), 0); err != nil || info.Duplicate {
		t.Fatalf("without a snapshot: %+v %v; want the batch written anew", info, err)
	}
}

func TestResetToRefusesABadSnapshot(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	defer l.Close()
	if _, err := l.Append(batch(t, "a", 3, 1), 0); err != nil {
		t.Fatal(err)
	}
	for name, snap := range map[string]string{
		"not JSON":         `{"offset":`,
		"another offset":   `{"offset":7,"producers":{}}`,
		"batch past start": `{"offset":100,"producers":{"4":{"epoch":0,"batches":[{"first_seq":0,"last_seq":1,"first_offset":99,"last_offset":100}]}}}`,
		"no batches":       `{"offset":100,"producers":{"4":{"epoch":0,"batches":[]}}}`,
	} {
		if err := l.ResetTo(100, []byte(snap)); !errors.Is(err, api.ErrCorruptRecord) {
			t.Fatalf("%s: %v, want CORRUPT_RECORD", name, err)
		}
		if o := l.Offsets(); o.LogStart != 0 || o.LogEnd != 3 {
			t.Fatalf("%s: a refused reset changed the log: %+v", name, o)
		}
	}
}

// Snapshots are kept one per segment base plus the newest, whatever the
// number of clean restarts; the one-file form of older versions is taken
// over at open.
func TestProducerSnapshotFiles(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, osFS(t, dir), commitlog.Options{})
	for i := int16(0); i < 6; i++ {
		if _, err := l.Append(idemBatch(t, 21, 0, int32(i), 1), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, osFS(t, dir), commitlog.Options{})
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(idemBatch(t, 21, 0, 6, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "orders-0", "*.producers"))
	// Segments at 0 and 6: the snapshot at the roll (6) and the one of the
	// last close (7); those of the earlier closes went.
	if len(snaps) != 2 {
		t.Fatalf("snapshot files %v, want the roll's and the last close's", snaps)
	}
	// The older single file: its table is used and it is renamed.
	for _, s := range snaps {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	// Producer 77 is known to the file only, not to the log's batches.
	legacy := `{"offset":7,"producers":{"77":{"epoch":0,"batches":[{"first_seq":0,"last_seq":0,"first_offset":3,"last_offset":3}]}}}`
	if err := os.WriteFile(filepath.Join(dir, "orders-0", "producer-snapshot"), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), commitlog.Options{})
	defer l.Close()
	if info, err := l.Append(idemBatch(t, 77, 0, 0, 1), 0); err != nil || !info.Duplicate || info.FirstOffset != 3 {
		t.Fatalf("retry known only to the legacy snapshot: %+v %v", info, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "orders-0", "producer-snapshot")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the legacy file is still there: %v", err)
	}
}
