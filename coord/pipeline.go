package coord

import (
	"context"
	"sync"
	"sync/atomic"
)

// DefaultInFlight is the number of calls Pipeline keeps outstanding when
// given none: enough that the round trip is paid once per batch rather than
// once per call (ZooKeeper answers a read in tens of microseconds, the
// round trip costs more), few enough to stay far below ZooKeeper's limit
// on a server's outstanding requests (globalOutstandingLimit, 1,000).
const DefaultInFlight = 64

// Pipeline calls fn(ctx, i) for every i in [0, n), at most inFlight at once
// (DefaultInFlight when inFlight < 1), and returns once every call it
// started has returned. Calls a function makes on one Coordinator at the
// same time are pipelined (see Coordinator), so n independent requests cost
// about one round trip and the service's work, not n round trips.
//
// The first error a call returns is Pipeline's: the ctx the calls got is then
// cancelled and the calls not yet started are not made. A call that must
// not stop the others (a conditional write that may lose a race) records its
// outcome and returns nil. It runs the calls on goroutines of its own, at
// most inFlight, and waits for them.
func Pipeline(ctx context.Context, n, inFlight int, fn func(ctx context.Context, i int) error) error {
	if n <= 0 {
		return ctx.Err()
	}
	if inFlight < 1 {
		inFlight = DefaultInFlight
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	work := func() {
		defer wg.Done()
		for ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err })
				cancel()
				return
			}
		}
	}
	workers := min(n, inFlight)
	wg.Add(workers)
	for range workers {
		go work()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if next.Load() < int64(n) {
		// Stopped early without a call's error: the caller's ctx ended.
		return ctx.Err()
	}
	return nil
}
