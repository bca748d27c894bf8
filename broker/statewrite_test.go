package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/coord"
)

func TestPlanBatches(t *testing.T) {
	tests := []struct {
		name            string
		costs           []int
		maxOps, maxSize int
		want            [][]int
	}{
		{"none", nil, 3, 100, nil},
		{"one batch", []int{10, 10, 10}, 3, 100, [][]int{{0, 1, 2}}},
		{"by count", []int{1, 1, 1, 1, 1, 1, 1}, 3, 100, [][]int{{0, 1, 2}, {3, 4, 5}, {6}}},
		{"by bytes", []int{40, 40, 40, 40}, 10, 100, [][]int{{0, 1}, {2, 3}}},
		{"exactly the bytes", []int{50, 50, 50}, 10, 100, [][]int{{0, 1}, {2}}},
		{"an op past the bytes goes alone", []int{10, 500, 10}, 10, 100, [][]int{{0}, {1}, {2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := planBatches(tc.costs, tc.maxOps, tc.maxSize); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// runStateBatch against a real in-process coordinator: a node per op at
// version 0, a fence node at version 0, and the changes a case makes
// before the batch goes out.
func TestRunStateBatch(t *testing.T) {
	const n = 6
	connLost := fmt.Errorf("multi: %w", coord.ErrConnectionLoss)
	tests := []struct {
		name     string
		fence    bool
		stale    []int // nodes set behind the batch's back
		gone     []int // nodes deleted
		deposed  bool  // the fence node set
		failWith error // every Multi fails with this
		want     []writeOutcome
		calls    int
	}{
		{"all written", true, nil, nil, false, nil,
			[]writeOutcome{writeDone, writeDone, writeDone, writeDone, writeDone, writeDone}, 1},
		{"one stale: the rest go again without it", true, []int{2}, nil, false, nil,
			[]writeOutcome{writeDone, writeDone, writeLost, writeDone, writeDone, writeDone}, 2},
		{"stale first and last", true, []int{0, 5}, nil, false, nil,
			[]writeOutcome{writeLost, writeDone, writeDone, writeDone, writeDone, writeLost}, 3},
		{"a deleted node is a lost race", true, nil, []int{3}, false, nil,
			[]writeOutcome{writeDone, writeDone, writeDone, writeLost, writeDone, writeDone}, 2},
		{"without a fence, op 0 is a state", false, []int{0}, nil, false, nil,
			[]writeOutcome{writeLost, writeDone, writeDone, writeDone, writeDone, writeDone}, 2},
		{"deposed: nothing written", true, []int{1}, nil, true, nil,
			[]writeOutcome{writeFenced, writeFenced, writeFenced, writeFenced, writeFenced, writeFenced}, 1},
		{"no answer: all unknown", true, nil, nil, false, connLost,
			[]writeOutcome{writeFailed, writeFailed, writeFailed, writeFailed, writeFailed, writeFailed}, 1},
		{"an op named with no sentinel of a race", true, nil, nil, false, &coord.MultiError{Index: -1, Err: coord.ErrBadVersion},
			[]writeOutcome{writeFailed, writeFailed, writeFailed, writeFailed, writeFailed, writeFailed}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			store, err := coord.NewMemStore(coord.MemOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			c := store.Session()
			path := func(i int) string { return fmt.Sprintf("/s%d", i) }
			for i := range n {
				if _, err := c.Create(ctx, path(i), []byte("0"), 0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Create(ctx, "/fence", nil, 0); err != nil {
				t.Fatal(err)
			}
			for _, i := range tc.stale {
				if _, err := c.Set(ctx, path(i), []byte("other"), 0); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.gone {
				if err := c.Delete(ctx, path(i), coord.AnyVersion); err != nil {
					t.Fatal(err)
				}
			}
			if tc.deposed {
				if _, err := c.Set(ctx, "/fence", []byte("1"), 0); err != nil {
					t.Fatal(err)
				}
			}
			ops := make([]coord.Op, n)
			batch := make([]int, n)
			for i := range ops {
				ops[i], batch[i] = coord.SetOp(path(i), []byte("new"), 0), i
			}
			var fence *coord.Op
			if tc.fence {
				f := coord.CheckOp("/fence", 0)
				fence = &f
			}
			calls := 0
			multi := func(ctx context.Context, ops ...coord.Op) ([]coord.OpResult, error) {
				calls++
				if tc.failWith != nil {
					return nil, tc.failWith
				}
				return c.Multi(ctx, ops...)
			}
			results := make([]stateResult, n)
			runStateBatch(ctx, multi, fence, ops, batch, results)
			var got []writeOutcome
			for _, r := range results {
				got = append(got, r.outcome)
			}
			if !slices.Equal(got, tc.want) || calls != tc.calls {
				t.Fatalf("outcomes %v in %d Multis, want %v in %d", got, calls, tc.want, tc.calls)
			}
			// What was reported written is written, at the version reported,
			// and nothing else is.
			for i, r := range results {
				data, st, err := c.Get(ctx, path(i))
				switch {
				case r.outcome == writeDone && (err != nil || string(data) != "new" || st.Version != r.version):
					t.Errorf("node %d reported written at version %d: %q version %d %v", i, r.version, data, st.Version, err)
				case r.outcome != writeDone && err == nil && string(data) == "new":
					t.Errorf("node %d was written, reported %v", i, r.outcome)
				}
			}
		})
	}
}
