package commitlog

import "sync"

// A Watcher wakes one waiter when any of the logs it watches moves in a way
// it waits for (Moves), or is truncated, trimmed, compacted or closed. A
// multi-partition fetch watches every partition it reads with one Watcher
// instead of a goroutine or a channel select per partition. A wake-up
// carries no data: the waiter reads the logs again.
type Watcher struct {
	c  chan struct{}
	on Moves
}

// Moves says which moves of a log wake a Watcher. A truncation, a move of
// the log start, a compacted segment swapped in and a close wake every
// Watcher whatever it waits for.
type Moves uint8

const (
	// EndMoves: an append moved the log end; what a follower copies (it
	// reads up to the log end).
	EndMoves Moves = 1 << iota
	// HWMoves: the HW moved; what a consumer reads (up to the HW).
	HWMoves
	// AnyMoves: either.
	AnyMoves = EndMoves | HWMoves
)

// NewWatcher returns a Watcher that no log wakes yet, waiting for the moves
// in on. A waiter that could use neither kind of move asks for only the
// one it reads up to: a follower's long poll is not woken by every HW move
// its own fetches make, nor a consumer's by every append before the HW
// reaches it.
func NewWatcher(on Moves) *Watcher { return &Watcher{c: make(chan struct{}, 1), on: on} }

// C receives a value after a watched log moved. Wake-ups that come before
// the waiter took the last one are merged into one.
func (w *Watcher) C() <-chan struct{} { return w.c }

func (w *Watcher) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// watchers is a log's set of Watchers, under its own mutex: Watch and
// Unwatch never wait for the log's mu, and notifyLocked takes it inside
// mu (order: Log.mu before watchers.mu).
type watchers struct {
	mu  sync.Mutex
	set map[*Watcher]struct{}
}

// Watch makes w wake when the log moves, until Unwatch. Register before
// reading the positions a wait depends on, so no move falls between the
// read and the wait. A closed log wakes w at once.
func (l *Log) Watch(w *Watcher) {
	l.watch.mu.Lock()
	if l.watch.set == nil {
		l.watch.set = make(map[*Watcher]struct{})
	}
	l.watch.set[w] = struct{}{}
	l.watch.mu.Unlock()
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		w.wake()
	}
}

// Unwatch stops the log from waking w.
func (l *Log) Unwatch(w *Watcher) {
	l.watch.mu.Lock()
	delete(l.watch.set, w)
	l.watch.mu.Unlock()
}

// wake wakes the Watchers waiting for any of the moves in m.
func (ws *watchers) wake(m Moves) {
	ws.mu.Lock()
	for w := range ws.set {
		if w.on&m != 0 {
			w.wake()
		}
	}
	ws.mu.Unlock()
}
