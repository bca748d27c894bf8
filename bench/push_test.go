package bench

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The set counts each (partition, offset) once, whatever the order and
// however far apart, counts what came again as duplicates, leaves the first
// request out of the rate's records, and is done at the want-th distinct
// record.
func TestOffsetSet(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := newOffsetSet(6)
	steps := []struct {
		name string
		recs []pushedRecord
		// distinct, dups, counted after the step
		distinct, dups, counted int64
		done                    bool
	}{
		{"first request", []pushedRecord{{0, 0, 10}, {0, 1, 10}}, 2, 0, 0, false},
		{"another partition, far offset", []pushedRecord{{3, 100_000, 5}}, 3, 0, 1, false},
		{"again", []pushedRecord{{0, 1, 10}, {3, 100_000, 5}}, 3, 2, 1, false},
		{"offset 63 and 64 (a word's edge)", []pushedRecord{{0, 63, 1}, {0, 64, 1}}, 5, 2, 3, false},
		{"the last one, and one again in the same request", []pushedRecord{{1, 7, 2}, {1, 7, 2}}, 6, 3, 4, true},
	}
	for i, st := range steps {
		if err := s.add(t0.Add(time.Duration(i)*time.Second), st.recs); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		c := s.snapshot()
		if c.distinct != st.distinct || c.dups != st.dups || c.counted != st.counted {
			t.Fatalf("%s: distinct %d dups %d counted %d; want %d %d %d", st.name, c.distinct, c.dups, c.counted, st.distinct, st.dups, st.counted)
		}
		if done := !c.last.IsZero(); done != st.done {
			t.Fatalf("%s: done %v (last %v), want %v", st.name, done, c.last, st.done)
		}
	}
	c := s.snapshot()
	if c.requests != 5 || !c.first.Equal(t0) || !c.last.Equal(t0.Add(4*time.Second)) {
		t.Errorf("requests %d, first %v, last %v", c.requests, c.first, c.last)
	}
	if c.bytes != 10+10+5+1+1+2 || c.countedBytes != 5+1+1+2 {
		t.Errorf("bytes %d, counted bytes %d", c.bytes, c.countedBytes)
	}
	if err := s.add(t0, []pushedRecord{{0, -1, 0}}); err == nil {
		t.Error("a negative offset was counted")
	}
	if got, err := waitAll(context.Background(), 6, 100*time.Millisecond, time.Minute, snapOf(s, nil)); err != nil || got.distinct != 6 {
		t.Errorf("wait on a done set: %d, %v", got.distinct, err)
	}
}

// snapOf reads s, or fails with failed.
func snapOf(s *offsetSet, failed error) func() (offsetCounts, error) {
	return func() (offsetCounts, error) {
		if failed != nil {
			return offsetCounts{}, failed
		}
		return s.snapshot(), nil
	}
}

// The wait ends with the endpoint's failure, and when no record comes.
func TestWaitAll(t *testing.T) {
	s := newOffsetSet(2)
	failed := errors.New("a request the endpoint could not count")
	if _, err := waitAll(context.Background(), 2, 100*time.Millisecond, time.Minute, snapOf(s, failed)); !errors.Is(err, failed) {
		t.Errorf("wait with a failed endpoint: %v", err)
	}
	if _, err := waitAll(context.Background(), 2, 100*time.Millisecond, time.Millisecond, snapOf(s, nil)); err == nil || !strings.Contains(err.Error(), "0 of 2 records") {
		t.Errorf("wait without records: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := waitAll(ctx, 2, 100*time.Millisecond, time.Minute, snapOf(s, nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("wait after its context ended: %v", err)
	}
}

// The endpoint's counter reads a one-record request's offset from the
// sluice-* headers and a batch's from its JSON array; a request it cannot
// read is an error.
func TestCountTarget(t *testing.T) {
	s := newOffsetSet(4)
	h := http.Header{}
	h.Set("sluice-partition", "2")
	h.Set("sluice-offset", "41")
	one := &countTarget{set: s}
	if err := one.receive(time.Now(), h, []byte(`"xxxx"`)); err != nil {
		t.Fatal(err)
	}
	batch := &countTarget{set: s, batched: true}
	body := `[{"topic":"t","partition":2,"offset":41,"timestamp":1,"value":"xxxx"},{"topic":"t","partition":0,"offset":5,"timestamp":1,"value":{"a":1}}]`
	if err := batch.receive(time.Now(), http.Header{}, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if c := s.snapshot(); c.distinct != 2 || c.dups != 1 || c.bytes != 6+7 {
		t.Errorf("distinct %d, dups %d, bytes %d; want 2, 1, 13", c.distinct, c.dups, c.bytes)
	}
	if err := one.receive(time.Now(), http.Header{}, nil); err == nil {
		t.Error("a request without sluice-partition was counted")
	}
	if err := batch.receive(time.Now(), http.Header{}, []byte(`{"not":"an array"}`)); err == nil {
		t.Error("a batch that is not an array was counted")
	}
}
