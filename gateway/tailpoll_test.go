package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/testwait"
)

// The shared tail polls against a leader the test plays: each fetch a
// poll makes is handed to the test, which answers it or lets it wait.

// tailLeader is a tailSource whose fetches the test answers.
type tailLeader struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	asks   chan *tailAsk
}

// tailAsk is one fetch of a poll, waiting for the test's answer or its
// context's end.
type tailAsk struct {
	offset int64
	ctx    context.Context
	answer chan tailAnswer
}

type tailAnswer struct {
	raw      []byte
	next, hw int64
	err      error
}

func newTailLeader(t *testing.T) *tailLeader {
	f := &tailLeader{asks: make(chan *tailAsk)}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() {
		f.cancel()
		f.waitPolls(t)
	})
	return f
}

func (f *tailLeader) tailContext() context.Context { return f.ctx }

func (f *tailLeader) goFunc(fn func()) bool {
	f.wg.Go(fn)
	return true
}

func (f *tailLeader) fetchFrom(ctx context.Context, _ string, _ int32, p brokerapi.FetchParams) (*brokerapi.FetchResponse, error) {
	a := &tailAsk{offset: p.Offset, ctx: ctx, answer: make(chan tailAnswer, 1)}
	select {
	case f.asks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ans := <-a.answer:
		if ans.err != nil {
			return nil, ans.err
		}
		return &brokerapi.FetchResponse{Body: io.NopCloser(bytes.NewReader(ans.raw)), Size: int64(len(ans.raw)),
			NextOffset: ans.next, HighWatermark: ans.hw}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ask returns the next fetch a poll makes.
func (f *tailLeader) ask(t *testing.T) *tailAsk {
	t.Helper()
	select {
	case a := <-f.asks:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no poll asked the leader")
		return nil
	}
}

// waitPolls waits for every poll goroutine to end.
func (f *tailLeader) waitPolls(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a shared poll is still running")
	}
}

// wakeCount is a join's wake callback that counts its calls.
type wakeCount struct{ n atomic.Int32 }

func (w *wakeCount) wake() { w.n.Add(1) }

// A waiter that joins below the offset the poll is asking at makes it ask
// again at its offset, so records already there reach it at once; the
// answer then wakes only the waiters it has records for, and the poll
// asks again for the others.
func TestTailPollFollowsTheLowestWaiter(t *testing.T) {
	f := newTailLeader(t)
	ts := newTails(f)
	var atTen, atFive wakeCount
	ten := ts.join("t", 0, 10, atTen.wake)
	first := f.ask(t)
	if first.offset != 10 {
		t.Fatalf("the poll asks at %d, want 10", first.offset)
	}
	five := ts.join("t", 0, 5, atFive.wake)
	select {
	case <-first.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the poll at 10 goes on after a waiter joined at 5")
	}
	second := f.ask(t)
	if second.offset != 5 {
		t.Fatalf("the poll asks again at %d, want 5", second.offset)
	}
	// Records 5 to 9: nothing for the waiter at 10.
	second.answer <- tailAnswer{raw: []byte("batches 5-9"), next: 10, hw: 10}
	testwait.For(t, 10*time.Second, "the waiter at 5 woken", func() bool { return atFive.n.Load() == 1 })
	if d, ok := ts.woken(five); !ok || d == nil || d.from != 5 || string(d.raw) != "batches 5-9" {
		t.Fatalf("the waiter at 5: woken %v with %+v", ok, d)
	}
	third := f.ask(t)
	if third.offset != 10 {
		t.Fatalf("the poll asks next at %d, want 10", third.offset)
	}
	if _, ok := ts.woken(ten); ok || atTen.n.Load() != 0 {
		t.Fatal("the waiter at 10 was woken by records below it")
	}
	third.answer <- tailAnswer{raw: []byte("batch 10"), next: 11, hw: 11}
	testwait.For(t, 10*time.Second, "the waiter at 10 woken", func() bool { return atTen.n.Load() == 1 })
	if d, ok := ts.woken(ten); !ok || d == nil || d.from != 10 {
		t.Fatalf("the waiter at 10: woken %v with %+v", ok, d)
	}
	f.waitPolls(t) // nobody waits: the poll ends
	if len(ts.m) != 0 || ts.waiting != 0 {
		t.Fatalf("%d polls and %d waiters left", len(ts.m), ts.waiting)
	}
}

// Waiters join, leave and wait on two partitions from many goroutines
// while the leader answers some fetches, fails a few and lets others wait:
// every wait ends, every wake-up comes at most once, and once the last
// waiter has gone no poll, waiter or goroutine is left.
func TestTailPollJoinLeaveRace(t *testing.T) {
	f := newTailLeader(t)
	ts := newTails(f)
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		rng := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case a := <-f.asks:
				switch r := rng.IntN(10); {
				case r < 5:
					hw := a.offset + int64(rng.IntN(3))
					a.answer <- tailAnswer{raw: []byte("b"), next: hw, hw: hw}
				case r < 6:
					a.answer <- tailAnswer{next: a.offset, hw: a.offset} // timed out empty
				case r < 7 && rng.IntN(20) == 0:
					a.answer <- tailAnswer{err: errors.New("leader gone")} // the poll pauses a second
				default: // waits until it is restarted or cancelled
				}
			case <-f.ctx.Done():
				return
			}
		}
	}()
	const goroutines, rounds = 16, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range rounds {
				p, off := int32(rng.IntN(2)), int64(rng.IntN(4))
				switch rng.IntN(3) {
				case 0: // a WebSocket's join, given up at once or after a look
					var wc wakeCount
					w := ts.join("t", p, off, wc.wake)
					if rng.IntN(2) == 0 {
						ts.woken(w)
					}
					ts.leave(w)
					if wc.n.Load() > 1 {
						t.Errorf("woken %d times", wc.n.Load())
					}
				case 1: // an SSE stream's wait, bounded
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(500))*time.Microsecond)
					ts.wait(ctx, "t", p, off)
					cancel()
				case 2: // a group member's wait at both partitions
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(500))*time.Microsecond)
					ts.waitAny(ctx, []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: off}, {Topic: "t", Partition: 1, Offset: off + 1}})
					cancel()
				}
			}
		})
	}
	wg.Wait()
	testwait.For(t, 10*time.Second, "every poll gone with its last waiter", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.m) == 0 && ts.waiting == 0
	})
	// The polls end without the gateway closing.
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a shared poll runs with nobody waiting")
	}
	f.cancel()
	<-leaderDone
}
