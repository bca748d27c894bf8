package commitlog

import "sync"

// A Watcher wakes one waiter when any of the logs it watches moves (the HW
// or the log end, a truncation, a close). A multi-partition fetch watches
// every partition it reads with one Watcher instead of a goroutine or a
// channel select per partition. A wake-up carries no data: the waiter reads
// the logs again.
type Watcher struct{ c chan struct{} }

// NewWatcher returns a Watcher that no log wakes yet.
func NewWatcher() *Watcher { return &Watcher{c: make(chan struct{}, 1)} }

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

func (ws *watchers) wakeAll() {
	ws.mu.Lock()
	for w := range ws.set {
		w.wake()
	}
	ws.mu.Unlock()
}
