package commitlog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

func idemBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1, Value: []byte("v")}
	}
	b, err := recordbatch.Encode(nil, recs, recordbatch.Options{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIdempotentProducer(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	l := openLog(t, fsys, commitlog.Options{})
	app := func(b []byte) (commitlog.AppendInfo, error) { return l.Append(b, 0) }

	first, err := app(idemBatch(t, 7, 0, 0, 3))
	if err != nil || first.FirstOffset != 0 || first.LastOffset != 2 || first.Duplicate {
		t.Fatalf("first batch: %+v %v", first, err)
	}
	if _, err := app(batch(t, "other", 2, 1)); err != nil { // interleaved plain writes
		t.Fatal(err)
	}
	retry, err := app(idemBatch(t, 7, 0, 0, 3))
	if err != nil || !retry.Duplicate || retry.FirstOffset != 0 || retry.LastOffset != 2 {
		t.Fatalf("retry: %+v %v", retry, err)
	}
	next, err := app(idemBatch(t, 7, 0, 3, 2))
	if err != nil || next.Duplicate || next.FirstOffset != 5 {
		t.Fatalf("next batch: %+v %v", next, err)
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"gap", idemBatch(t, 7, 0, 9, 1), api.ErrOutOfOrderSequence},
		{"older than remembered", idemBatch(t, 7, 0, 1, 1), api.ErrOutOfOrderSequence},
		{"new epoch not at zero", idemBatch(t, 7, 1, 5, 1), api.ErrOutOfOrderSequence},
	}
	for _, tt := range tests {
		if _, err := app(tt.b); !errors.Is(err, tt.want) {
			t.Fatalf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := app(idemBatch(t, 7, 1, 0, 1)); err != nil {
		t.Fatalf("new epoch at zero: %v", err)
	}
	if _, err := app(idemBatch(t, 7, 0, 5, 1)); !errors.Is(err, api.ErrProducerFenced) {
		t.Fatalf("old epoch after a bump: %v, want PRODUCER_FENCED", err)
	}
	end := l.Offsets().LogEnd

	// The table survives a crash (no Close) and is rebuilt from the log.
	l2 := openLog(t, osFS(t, dir), commitlog.Options{})
	defer l2.Close()
	again, err := l2.Append(idemBatch(t, 7, 1, 0, 1), 0)
	if err != nil || !again.Duplicate || again.FirstOffset != end-1 {
		t.Fatalf("retry after reopen: %+v %v (log end %d)", again, err, end)
	}
	if _, err := l2.Append(idemBatch(t, 7, 0, 5, 1), 0); !errors.Is(err, api.ErrProducerFenced) {
		t.Fatalf("fencing after reopen: %v", err)
	}
	// Truncation forgets what it cut.
	if _, err := l2.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	if info, err := l2.Append(idemBatch(t, 7, 0, 3, 2), 0); err != nil || info.Duplicate || info.FirstOffset != 5 {
		t.Fatalf("re-append after truncation: %+v %v", info, err)
	}
}

// The table outlives the segments that held the batches: retention deletes
// them, the log reopens, and a retry of an old batch is still a duplicate.
func TestProducerStateOutlivesDeletedSegments(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, osFS(t, dir), commitlog.Options{})
	first, err := l.Append(idemBatch(t, 9, 0, 0, 2), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(batch(t, "filler", 5, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	if n, err := l.DeleteSegmentsBelow(l.Offsets().LogEnd); err != nil || n == 0 {
		t.Fatalf("deleted %d segments: %v", n, err)
	}
	if l.Offsets().LogStart <= first.LastOffset {
		t.Fatal("the producer's segment is still there")
	}
	// A crash: no Close.
	l2 := openLog(t, osFS(t, dir), commitlog.Options{})
	defer l2.Close()
	again, err := l2.Append(idemBatch(t, 9, 0, 0, 2), 0)
	if err != nil || !again.Duplicate || again.FirstOffset != first.FirstOffset {
		t.Fatalf("retry after its segment was deleted: %+v %v (first %+v)", again, err, first)
	}
	if _, err := l2.Append(idemBatch(t, 9, 0, 2, 1), 0); err != nil {
		t.Fatalf("next sequence: %v", err)
	}
}

// Producers idle past ProducerIDExpiration are forgotten (Kafka's
// producer.id.expiration.ms); active ones keep their deduplication state,
// through a snapshot and reopen too.
func TestExpireIdleProducers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(pid int64, seq int32, ts time.Time) []byte {
		b, err := recordbatch.Encode(nil, []recordbatch.Record{{Timestamp: ts.UnixMilli(), Value: []byte("v")}}, recordbatch.Options{ProducerID: pid, BaseSequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	opts := commitlog.Options{Now: func() time.Time { return now }, ProducerIDExpiration: time.Hour}
	l := openLog(t, osFS(t, dir), opts)
	for _, b := range [][]byte{at(7, 0, now.Add(-2*time.Hour)), at(8, 0, now.Add(-time.Minute))} {
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.ExpireProducers(); n != 1 {
		t.Fatalf("expired %d producers, want 1 (the one idle for 2 h)", n)
	}
	// The forgotten producer starts afresh; the active one is still checked.
	if _, err := l.Append(at(7, 50, now), 0); err != nil {
		t.Fatalf("a forgotten producer's next batch: %v", err)
	}
	if _, err := l.Append(at(8, 50, now), 0); !errors.Is(err, api.ErrOutOfOrderSequence) {
		t.Fatalf("an active producer skipping sequences: %v, want OUT_OF_ORDER_SEQUENCE", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), opts)
	if _, err := l.Append(at(8, 50, now), 0); !errors.Is(err, api.ErrOutOfOrderSequence) {
		t.Fatalf("after a reopen: %v, want OUT_OF_ORDER_SEQUENCE", err)
	}
}
