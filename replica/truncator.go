package replica

import (
	"context"
	"sync"
)

// DefaultTruncations is how many partitions agree on their leader's epoch
// lineage at once (Truncator).
const DefaultTruncations = 8

// Truncator runs the epoch truncations (KIP-101) of the partitions about to
// join a replication stream on a fixed number of worker goroutines, so that
// a broker that starts following a thousand partitions asks their leaders a
// few questions at a time, not a thousand. Its owner (the broker) closes it.
type Truncator struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards queue
	queue  []truncation
	notify chan struct{} // cap 1: the queue has work
}

type truncation struct {
	ctx context.Context
	run func(ctx context.Context)
}

// NewTruncator starts workers goroutines (DefaultTruncations when 0).
// recover, when set, runs each job noting a panic in it.
func NewTruncator(workers int, recover func(where string, f func()) bool) *Truncator {
	if workers <= 0 {
		workers = DefaultTruncations
	}
	if recover == nil {
		recover = func(_ string, f func()) bool { f(); return false }
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Truncator{ctx: ctx, cancel: cancel, notify: make(chan struct{}, 1)}
	t.wg.Add(workers)
	for range workers {
		go func() {
			defer t.wg.Done()
			t.work(recover)
		}()
	}
	return t
}

// Submit queues run, to be called on a worker with ctx unless ctx ended
// first. It does not block.
func (t *Truncator) Submit(ctx context.Context, run func(ctx context.Context)) {
	t.mu.Lock()
	t.queue = append(t.queue, truncation{ctx: ctx, run: run})
	t.mu.Unlock()
	t.signal()
}

func (t *Truncator) signal() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

func (t *Truncator) work(recover func(string, func()) bool) {
	for {
		t.mu.Lock()
		var job truncation
		ok := len(t.queue) > 0
		if ok {
			job = t.queue[0]
			t.queue[0] = truncation{}
			t.queue = t.queue[1:]
		}
		more := len(t.queue) > 0
		t.mu.Unlock()
		if more {
			t.signal() // wake the next worker for the rest
		}
		if !ok {
			select {
			case <-t.notify:
				continue
			case <-t.ctx.Done():
				return
			}
		}
		if job.ctx.Err() == nil && t.ctx.Err() == nil {
			recover("truncation", func() { job.run(job.ctx) })
		}
	}
}

// Close stops the workers after the jobs they run; queued jobs are dropped.
func (t *Truncator) Close() {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	t.queue = nil
	t.mu.Unlock()
}
