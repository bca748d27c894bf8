package coord

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Follower keeps a copy of some nodes current: one goroutine calls Reload,
// which reads what it follows with watches that call the WatchFunc it is
// given, and calls it again whenever one of them fires. A failed Reload is
// retried every RetryInterval. The zero value is not usable: set Reload.
type Follower struct {
	// Reload reads the followed nodes and publishes a copy; every watch it
	// sets must call fire. Required.
	Reload func(ctx context.Context, fire WatchFunc) error
	// What names the copy in the log line of a failed Reload.
	What string
	// RetryInterval between failed Reloads; default 500 ms.
	RetryInterval time.Duration
	Logger        *slog.Logger

	loadOnce sync.Once
	loaded   chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func (f *Follower) loadedCh() chan struct{} {
	f.loadOnce.Do(func() { f.loaded = make(chan struct{}) })
	return f.loaded
}

// Loaded is closed once the first Reload succeeded.
func (f *Follower) Loaded() <-chan struct{} { return f.loadedCh() }

// Start starts the goroutine; Close stops it.
func (f *Follower) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	loaded := f.loadedCh()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.run(ctx, loaded)
	}()
}

// Close stops the goroutine and waits for it.
func (f *Follower) Close() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
}

func (f *Follower) run(ctx context.Context, loaded chan struct{}) {
	retry := f.RetryInterval
	if retry <= 0 {
		retry = 500 * time.Millisecond
	}
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	first := true
	for ctx.Err() == nil {
		// Any watch of this round wakes the next one; a fire after the
		// round began is kept (capacity one), so no change is missed.
		changed := make(chan struct{}, 1)
		fire := func(Event) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
		if err := f.Reload(ctx, fire); err != nil {
			if ctx.Err() == nil {
				log.Warn("reading "+f.What+" failed; retrying", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		if first {
			close(loaded)
			first = false
		}
		select {
		case <-ctx.Done():
		case <-changed:
		}
	}
}
