package sink_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

// TestStoreContract holds every Store to the contract of store.go: the
// in-memory reference, the Redis store (stream mode) and the S3 archive
// against the real Redis and S3 server of `make test`.
func TestStoreContract(t *testing.T) {
	for _, f := range storeFixtures(false) {
		t.Run(f.name, func(t *testing.T) { testStore(t, f.new) })
	}
}

// testStore is the Store contract. What every implementation guarantees:
//   - Claim records the fence and answers the next offset to write, -1
//     while nothing was written; the same fence again, or a higher one, is
//     allowed and answers the same next; a lower one is ErrFenced and
//     changes nothing (fencing by grant epoch).
//   - Write writes the records at or above next and moves next past the
//     last one, all or nothing: the same batch twice lands once, records
//     below next are skipped, a batch whose offsets do not ascend is
//     ErrBadBatch and changes nothing.
//   - A writer whose fence was superseded (a zombie) changes nothing: its
//     writes and claims are ErrFenced; the new owner resumes from the next
//     offset the old one made durable (resume offset).
//
// A store that gathers records (fixture.gathers) answers the durable next,
// which may trail what was handed over: the suite settles it where the
// contract speaks of what is written.
func testStore(t *testing.T, newFixture func(t *testing.T) storeFixture) {
	t.Run("Claim", func(t *testing.T) { storeClaim(t, newFixture(t)) })
	t.Run("WriteOnce", func(t *testing.T) { storeWriteOnce(t, newFixture(t)) })
	t.Run("SkipsBelowNext", func(t *testing.T) { storeSkipsBelowNext(t, newFixture(t)) })
	t.Run("FencedWriteChangesNothing", func(t *testing.T) { storeFencedWrite(t, newFixture(t)) })
	t.Run("BadBatchChangesNothing", func(t *testing.T) { storeBadBatch(t, newFixture(t)) })
	t.Run("ZombieWriteRefused", func(t *testing.T) { storeZombie(t, newFixture(t)) })
}

// write writes recs and, for a gathering store, settles them; it returns
// the durable next offset.
func write(t *testing.T, fx storeFixture, s sink.Store, tp api.TopicPartition, fence int64, recs []sink.Record) int64 {
	t.Helper()
	ctx := t.Context()
	next, err := s.Write(ctx, tp, fence, recs)
	if err != nil {
		t.Fatalf("write %v at fence %d: %v", renderRecords(recs), fence, err)
	}
	if fx.settle != nil {
		if next, err = fx.settle(ctx, s, tp, fence); err != nil {
			t.Fatalf("settling %v at fence %d: %v", renderRecords(recs), fence, err)
		}
	}
	return next
}

func wantUnchanged(t *testing.T, fx storeFixture, what, before string) {
	t.Helper()
	if after := fx.state(t); after != before {
		t.Fatalf("%s changed the store:\nbefore\n%s\nafter\n%s", what, before, after)
	}
}

// Claim: fencing by grant epoch, and the next offset to resume from.
func storeClaim(t *testing.T, fx storeFixture) {
	ctx := t.Context()
	s := fx.open(t, noLog)
	next, err := s.Claim(ctx, tp0(), 3)
	if err != nil || next != -1 {
		t.Fatalf("first claim: next %d, %v; want -1", next, err)
	}
	if next = write(t, fx, s, tp0(), 3, kvRecords(10, "a", "1", "b", "2")); next != 12 {
		t.Fatalf("write: next %d; want 12", next)
	}
	if next, err = s.Claim(ctx, tp0(), 3); err != nil || next != 12 {
		t.Fatalf("claim again at the same fence: next %d, %v; want 12", next, err)
	}
	if next, err = s.Claim(ctx, tp0(), 5); err != nil || next != 12 {
		t.Fatalf("claim at a higher fence: next %d, %v; want 12", next, err)
	}
	before := fx.state(t)
	if _, err = s.Claim(ctx, tp0(), 4); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("claim at a lower fence: %v, want ErrFenced", err)
	}
	wantUnchanged(t, fx, "a refused claim", before)
}

// WriteOnce: the same batch written twice lands once; of an overlapping
// batch only the new records land; keys, values, null values and headers
// are kept.
func storeWriteOnce(t *testing.T, fx storeFixture) {
	s := fx.open(t, noLog)
	if _, err := s.Claim(t.Context(), tp0(), 1); err != nil {
		t.Fatal(err)
	}
	b := kvRecords(0, "a", "1", "b", "2", "c", "3")
	b[1].Headers = map[string]string{"h": "x"}
	for i := range 2 {
		if next := write(t, fx, s, tp0(), 1, b); next != 3 {
			t.Fatalf("write %d: next %d, want 3", i+1, next)
		}
	}
	if next := write(t, fx, s, tp0(), 1, kvRecords(1, "b", "2", "c", "3", "d", "<nil>")); next != 4 {
		t.Fatalf("overlapping write: next %d, want 4", next)
	}
	got := renderRecords(fx.records(t, tp0()))
	want := []string{"0:a:1:-", `1:b:2:{"h":"x"}`, "2:c:3:-", "3:d:<nil>:-"}
	if !slices.Equal(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
}

// SkipsBelowNext: records below the stored next are skipped.
func storeSkipsBelowNext(t *testing.T, fx storeFixture) {
	s := fx.open(t, noLog)
	if _, err := s.Claim(t.Context(), tp0(), 1); err != nil {
		t.Fatal(err)
	}
	if next := write(t, fx, s, tp0(), 1, kvRecords(5, "a", "1")); next != 6 {
		t.Fatalf("write 5: next %d, want 6", next)
	}
	if next := write(t, fx, s, tp0(), 1, kvRecords(2, "x", "1", "y", "2", "z", "3", "a", "1", "b", "2")); next != 7 {
		t.Fatalf("write 2-6: next %d, want 7", next)
	}
	var offsets []int64
	for _, r := range fx.records(t, tp0()) {
		offsets = append(offsets, r.Offset)
	}
	if !slices.Equal(offsets, []int64{5, 6}) {
		t.Fatalf("the store holds offsets %v, want [5 6]", offsets)
	}
}

// FencedWriteChangesNothing: a write under a fence below the claimed one
// is ErrFenced and changes nothing.
func storeFencedWrite(t *testing.T, fx storeFixture) {
	ctx := t.Context()
	s := fx.open(t, noLog)
	if _, err := s.Claim(ctx, tp0(), 1); err != nil {
		t.Fatal(err)
	}
	write(t, fx, s, tp0(), 1, kvRecords(0, "a", "1"))
	if _, err := s.Claim(ctx, tp0(), 2); err != nil {
		t.Fatal(err)
	}
	before := fx.state(t)
	if _, err := s.Write(ctx, tp0(), 1, kvRecords(1, "b", "2")); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("write under an old fence: %v, want ErrFenced", err)
	}
	wantUnchanged(t, fx, "a fenced write", before)
}

// BadBatchChangesNothing: a batch whose offsets do not ascend is
// ErrBadBatch, changes nothing, and leaves nothing behind for the next
// write.
func storeBadBatch(t *testing.T, fx storeFixture) {
	ctx := t.Context()
	s := fx.open(t, noLog)
	if _, err := s.Claim(ctx, tp0(), 1); err != nil {
		t.Fatal(err)
	}
	write(t, fx, s, tp0(), 1, kvRecords(0, "a", "1"))
	before := fx.state(t)
	b := kvRecords(1, "b", "2", "c", "3")
	b[1].Offset = 1
	if _, err := s.Write(ctx, tp0(), 1, b); !errors.Is(err, sink.ErrBadBatch) {
		t.Fatalf("offsets not ascending: %v, want ErrBadBatch", err)
	}
	wantUnchanged(t, fx, "a bad batch", before)
	if next := write(t, fx, s, tp0(), 1, kvRecords(1, "b", "2", "c", "3")); next != 3 {
		t.Fatalf("the good batch after it: next %d, want 3", next)
	}
	if got, want := renderRecords(fx.records(t, tp0())), []string{"0:a:1:-", "1:b:2:-", "2:c:3:-"}; !slices.Equal(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
}

// ZombieWriteRefused: a writer whose partition was claimed at a higher
// fence by another store is refused, writes and claims alike, and the
// store is unchanged; the new owner carries on from the durable next.
func storeZombie(t *testing.T, fx storeFixture) {
	ctx := context.Background()
	var recs []sink.Record
	for i := range 30 {
		recs = append(recs, sink.Record{Offset: int64(i), Timestamp: 1_700_000_000_000 + int64(i),
			Key: []byte("k" + strconv.Itoa(i%5)), Value: []byte("v" + strconv.Itoa(i))})
	}
	old, heir := fx.open(t, noLog), fx.open(t, noLog)
	if next, err := old.Claim(ctx, tp0(), 1); err != nil || next != -1 {
		t.Fatalf("first claim: %d, %v", next, err)
	}
	if next, err := old.Write(ctx, tp0(), 1, recs[:10]); err != nil || next != 10 {
		t.Fatalf("write 0-9: %d, %v; want 10", next, err)
	}
	// Five more: written, or gathered (not durable yet).
	durable := int64(15)
	if fx.gathers {
		durable = 10
	}
	if next, err := old.Write(ctx, tp0(), 1, recs[10:15]); err != nil || next != durable {
		t.Fatalf("write 10-14: %d, %v; want %d", next, err, durable)
	}
	// The heir claims at fence 2 and writes on.
	if next, err := heir.Claim(ctx, tp0(), 2); err != nil || next != durable {
		t.Fatalf("heir's claim: %d, %v; want %d", next, err, durable)
	}
	if next, err := heir.Write(ctx, tp0(), 2, recs[10:20]); err != nil || next != 20 {
		t.Fatalf("heir's write 10-19: %d, %v; want 20", next, err)
	}
	before := fx.state(t)
	// The old owner wakes up (a gathering store with a full unit to store):
	// refused.
	if _, err := old.Write(ctx, tp0(), 1, recs[15:20]); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("old owner's write: %v, want ErrFenced", err)
	}
	if _, err := old.Write(ctx, tp0(), 1, recs[20:30]); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("old owner's next write: %v, want ErrFenced", err)
	}
	if _, err := old.Claim(ctx, tp0(), 1); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("old owner's claim at its old fence: %v, want ErrFenced", err)
	}
	wantUnchanged(t, fx, "the old owner", before)
	if next, err := heir.Write(ctx, tp0(), 2, recs[20:30]); err != nil || next != 30 {
		t.Fatalf("heir's write 20-29: %d, %v; want 30", next, err)
	}
	if got, want := renderRecords(fx.records(t, tp0())), renderRecords(recs); !slices.Equal(got, want) {
		t.Fatalf("the store holds\n%v\nwant every record once, in order:\n%v", got, want)
	}
	if fx.settle != nil {
		// Nothing is left gathered: settling stores nothing more.
		if next, err := fx.settle(ctx, heir, tp0(), 2); err != nil || next != 30 {
			t.Fatalf("settling the heir: %d, %v; want 30", next, err)
		}
	}
}
