package coord

import "sync"

// sessionFeed delivers session states to one reader, in order, never dropping one and
// never blocking the writer: pushes queue in memory and a goroutine hands them to the
// out channel as the reader takes them. The handle that creates a feed owns its
// goroutine and stops it with close.
type sessionFeed struct {
	out  chan SessionState
	wake chan struct{} // capacity 1: a push happened since the goroutine last looked
	stop chan struct{} // closed by close
	done chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex     // guards queue and stopped
	queue    []SessionState // pushed, not yet handed to out
	stopped  bool
	stopOnce sync.Once
}

func newSessionFeed() *sessionFeed {
	f := &sessionFeed{
		out:  make(chan SessionState),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go f.run()
	return f
}

// push queues s for the reader. It never blocks; after close it does nothing.
func (f *sessionFeed) push(s SessionState) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.queue = append(f.queue, s)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// close stops the goroutine, drops what the reader has not taken, closes out and
// waits for the goroutine to return.
func (f *sessionFeed) close() {
	f.stopOnce.Do(func() {
		f.mu.Lock()
		f.stopped = true
		f.queue = nil
		f.mu.Unlock()
		close(f.stop)
	})
	<-f.done
}

func (f *sessionFeed) run() {
	defer close(f.done)
	defer close(f.out)
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			f.mu.Unlock()
			select {
			case <-f.wake:
				continue
			case <-f.stop:
				return
			}
		}
		next := f.queue[0]
		f.queue = f.queue[1:]
		f.mu.Unlock()
		select {
		case f.out <- next:
		case <-f.stop:
			return
		}
	}
}
