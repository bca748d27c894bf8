package coord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPipeline(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		n, limit  int
		failAt    int // -1: none
		wantErr   error
		wantCalls func(calls int) bool
		wantMax   int // most calls at once allowed
	}{
		{"none", 0, 4, -1, nil, func(c int) bool { return c == 0 }, 0},
		{"fewer than the limit", 3, 8, -1, nil, func(c int) bool { return c == 3 }, 3},
		{"bounded", 1000, 8, -1, nil, func(c int) bool { return c == 1000 }, 8},
		{"default bound", 1000, 0, -1, nil, func(c int) bool { return c == 1000 }, DefaultInFlight},
		{"first error stops the rest", 1000, 4, 10, boom, func(c int) bool { return c < 1000 }, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls, now, peak atomic.Int64
			var mu sync.Mutex
			seen := map[int]bool{}
			err := Pipeline(t.Context(), tc.n, tc.limit, func(ctx context.Context, i int) error {
				calls.Add(1)
				cur := now.Add(1)
				defer now.Add(-1)
				for {
					p := peak.Load()
					if cur <= p || peak.CompareAndSwap(p, cur) {
						break
					}
				}
				mu.Lock()
				if seen[i] {
					t.Errorf("index %d called twice", i)
				}
				seen[i] = true
				mu.Unlock()
				if i == tc.failAt {
					return boom
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if !tc.wantCalls(int(calls.Load())) {
				t.Fatalf("%d calls", calls.Load())
			}
			if int(peak.Load()) > tc.wantMax {
				t.Fatalf("%d calls at once, limit %d", peak.Load(), tc.wantMax)
			}
		})
	}
	// A cancelled ctx: no call is made, and its error is Pipeline's.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	if err := Pipeline(ctx, 10, 2, func(context.Context, int) error { called = true; return nil }); !errors.Is(err, context.Canceled) || called {
		t.Fatalf("cancelled: err %v, called %v", err, called)
	}
}
