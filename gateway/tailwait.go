package gateway

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// tails shares one long poll per partition among the WebSocket and SSE
// streams waiting at its end. A stream whose last fetch found nothing waits here
// instead of long-polling the leader itself: one poll per partition (a
// goroutine the gateway owns, on its WaitGroup) asks the leader for the
// lowest offset any waiter is at, and when data arrives (or the poll
// fails) wakes every waiter it has records for (below the HW it saw;
// every waiter after a failure) with what it read (up to 1 MiB of batches):
// the waiters at the offset it was made at render that, the others fetch
// for themselves, without waiting. A poll that times out with nothing
// polls again while anyone waits, and ends when the last waiter leaves.
// So 10,000 idle consumers of a partition cost the broker one long poll,
// not 10,000, and the gateway one broker connection instead of one each.
type tails struct {
	src tailSource

	mu      sync.Mutex // guards m and every tail's waiters
	m       map[tailKey]*tail
	waiting int // waiters in all tails
}

// tailSource is what the shared polls need of their gateway.
type tailSource interface {
	// tailContext is the polls' context: it acts as the gateway (a poll
	// serves the streams of any principal, each authorized when it
	// started) and ends when the gateway closes.
	tailContext() context.Context
	// goFunc starts a goroutine the gateway waits for in Close; once
	// closing it starts nothing and reports false.
	goFunc(f func()) bool
	// fetchFrom fetches raw batches from the partition's leader, waiting
	// up to p.MaxWait for some at p.Offset.
	fetchFrom(ctx context.Context, topic string, partition int32, p brokerapi.FetchParams) (*brokerapi.FetchResponse, error)
}

type tailKey struct {
	topic     string
	partition int32
}

// tail is one partition's waiters and its running poll.
type tail struct {
	waiters map[*tailWaiter]struct{}
	cancel  context.CancelFunc // ends the running poll

	// While the poll asks the leader: the offset it asks at, and what ends
	// that request so the poll asks again, lower, for a waiter that joins
	// below it (nil between requests).
	from    int64
	restart context.CancelFunc
}

// tailWaiter is one stream waiting at one partition. A group member waits
// at each of its partitions with waiters that share one wake-up.
type tailWaiter struct {
	k      tailKey
	t      *tail
	offset int64
	wake   *tailWake
	data   *tailData // set before the wake-up: what the poll read, nil after a failure
}

// tailWake is fired once, by the first poll that finds something for any
// of its waiters: it closes ch (wait, waitAny) or calls fn (join).
type tailWake struct {
	once sync.Once
	ch   chan struct{}
	fn   func()
}

func newTailWake() *tailWake { return &tailWake{ch: make(chan struct{})} }

func (w *tailWake) fire() {
	w.once.Do(func() {
		if w.ch != nil {
			close(w.ch)
		}
		if w.fn != nil {
			w.fn()
		}
	})
}

// tailData is a shared poll's answer, read-only: the batches at from.
type tailData struct {
	from, next, hw int64
	raw            []byte
}

func newTails(src tailSource) *tails { return &tails{src: src, m: map[tailKey]*tail{}} }

func (g *Gateway) tailContext() context.Context {
	return auth.WithPrincipal(g.ctx, brokerapi.PrincipalGateway)
}

// wait blocks until the partition probably holds data at or past offset
// (or a poll of it failed): true, with the poll's answer when it has one;
// or ctx ends: false.
func (ts *tails) wait(ctx context.Context, topic string, partition int32, offset int64) (*tailData, bool) {
	wake := newTailWake()
	ts.mu.Lock()
	k := tailKey{topic, partition}
	t, w := ts.joinLocked(k, offset, wake)
	ts.mu.Unlock()
	select {
	case <-wake.ch:
		return w.data, true
	case <-ctx.Done():
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.leaveLocked(k, t, w) {
		return w.data, true // woken meanwhile
	}
	return nil, false
}

// join is wait without a goroutine that waits: it adds a waiter at offset
// and returns at once. When the partition probably holds data at or past
// offset (or a poll of it failed), wake is called, on the poll's goroutine
// with ts.mu held: it must neither block nor call ts. woken then tells what
// the poll read; leave removes a waiter that gives up.
func (ts *tails) join(topic string, partition int32, offset int64, wake func()) *tailWaiter {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	_, w := ts.joinLocked(tailKey{topic, partition}, offset, &tailWake{fn: wake})
	return w
}

// woken reports whether w's poll has woken it, with what it read (nil
// after a failure).
func (ts *tails) woken(w *tailWaiter) (*tailData, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, waiting := w.t.waiters[w]; waiting {
		return nil, false
	}
	return w.data, true
}

// leave removes a waiter of join that gives up; it does nothing to one
// already woken.
func (ts *tails) leave(w *tailWaiter) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.leaveLocked(w.k, w.t, w)
}

// waitAny is wait at several partitions at once (a group member's, each
// at its position): true when any of them probably holds data at or past
// its offset (or a poll of one failed), false when ctx ends first.
func (ts *tails) waitAny(ctx context.Context, at []api.PartitionOffset) bool {
	wake := newTailWake()
	type joined struct {
		k tailKey
		t *tail
		w *tailWaiter
	}
	js := make([]joined, len(at))
	ts.mu.Lock()
	for i, p := range at {
		k := tailKey{p.Topic, p.Partition}
		t, w := ts.joinLocked(k, p.Offset, wake)
		js[i] = joined{k, t, w}
	}
	ts.mu.Unlock()
	woke := false
	select {
	case <-wake.ch:
		woke = true
	case <-ctx.Done():
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, j := range js {
		if !ts.leaveLocked(j.k, j.t, j.w) {
			woke = true
		}
	}
	return woke
}

// joinLocked adds a waiter at offset to k's tail, starting its poll if
// none runs.
func (ts *tails) joinLocked(k tailKey, offset int64, wake *tailWake) (*tail, *tailWaiter) {
	t := ts.m[k]
	if t == nil {
		pctx, cancel := context.WithCancel(ts.src.tailContext())
		t = &tail{waiters: map[*tailWaiter]struct{}{}, cancel: cancel}
		ts.m[k] = t
		// Refused only once the gateway is closing: every waiter's
		// stream ends with it, so none waits for a poll that never runs.
		ts.src.goFunc(func() { ts.poll(pctx, k, t) })
	}
	if t.restart != nil && offset < t.from {
		// The poll asks past this waiter, whose records may be there
		// already: it would wait for the next record after them, or its
		// time out. It asks again, at the lowest offset.
		t.restart()
		t.restart = nil
	}
	w := &tailWaiter{k: k, t: t, offset: offset, wake: wake}
	t.waiters[w] = struct{}{}
	ts.waiting++
	return t, w
}

// leaveLocked removes a waiter that gives up, and the tail's poll with the
// last one; false when the poll had already woken and removed it.
func (ts *tails) leaveLocked(k tailKey, t *tail, w *tailWaiter) bool {
	if _, ok := t.waiters[w]; !ok {
		return false
	}
	delete(t.waiters, w)
	ts.waiting--
	if len(t.waiters) == 0 && ts.m[k] == t {
		// Nobody waits: the poll goes (a newcomer starts another).
		delete(ts.m, k)
		t.cancel()
	}
	return true
}

// poll long-polls the partition's leader while t has waiters.
func (ts *tails) poll(ctx context.Context, k tailKey, t *tail) {
	defer t.cancel()
	var pause time.Duration // after a failed poll: a failure that persists is not a busy loop
	for {
		if pause > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
		ts.mu.Lock()
		if ts.m[k] != t || len(t.waiters) == 0 {
			if ts.m[k] == t {
				delete(ts.m, k)
			}
			ts.mu.Unlock()
			return
		}
		from := int64(-1)
		for w := range t.waiters {
			if from < 0 || w.offset < from {
				from = w.offset
			}
		}
		rctx, restart := context.WithCancel(ctx)
		t.from, t.restart = from, restart
		ts.mu.Unlock()

		data, moved := ts.pollOnce(rctx, k, from)
		ts.mu.Lock()
		t.restart = nil
		ts.mu.Unlock()
		restarted := rctx.Err() != nil && ctx.Err() == nil
		restart()
		pause = 0
		if restarted {
			// A waiter joined below from (joinLocked): ask again at once,
			// at the lowest offset; what this request read, if anything,
			// that one reads too.
			continue
		}
		if moved && (data == nil || len(data.raw) == 0) {
			// It failed, or answered at once without batches: the next
			// one could only do the same.
			pause = time.Second
		}
		if ctx.Err() != nil {
			// The last waiter left, or the gateway closes: the waiters'
			// own contexts end them.
			return
		}
		if !moved {
			continue
		}
		ts.mu.Lock()
		for w := range t.waiters {
			if data != nil && w.offset >= data.hw {
				// Nothing for it yet (the poll asked below it, for
				// another): it waits for the next answer.
				continue
			}
			w.data = data
			w.wake.fire()
			delete(t.waiters, w)
			ts.waiting--
		}
		ts.mu.Unlock()
	}
}

// pollOnce is one long poll at from: moved when the partition holds data
// there (or past it), with what it read; moved without data when the poll
// failed and the waiters should fetch to learn why; not moved when it
// waited its time out with nothing.
func (ts *tails) pollOnce(ctx context.Context, k tailKey, from int64) (*tailData, bool) {
	ctx, cancel := context.WithTimeout(ctx, wsIdlePollWait+wsRetryBudget)
	defer cancel()
	fr, err := ts.src.fetchFrom(ctx, k.topic, k.partition, brokerapi.FetchParams{
		Offset: from, MaxBytes: defaultMaxBytes, MaxWait: wsIdlePollWait, LeaderEpoch: -1,
	})
	if err != nil {
		return nil, true
	}
	defer fr.Body.Close()
	raw := make([]byte, fr.Size)
	if _, err := io.ReadFull(fr.Body, raw); err != nil {
		return nil, true
	}
	if fr.Size == 0 && fr.HighWatermark <= from {
		return nil, false
	}
	return &tailData{from: from, next: fr.NextOffset, hw: fr.HighWatermark, raw: raw}, true
}

// collectors export the shared polls and their waiters.
func (ts *tails) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_ws_tail_polls", Help: "Partitions long-polled on behalf of WebSocket and SSE streams waiting at their end (one poll each).",
		}, func() float64 { ts.mu.Lock(); defer ts.mu.Unlock(); return float64(len(ts.m)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_ws_tail_waiters", Help: "WebSocket and SSE streams waiting at the end of their partition on a shared poll.",
		}, func() float64 { ts.mu.Lock(); defer ts.mu.Unlock(); return float64(ts.waiting) }),
	}
}
