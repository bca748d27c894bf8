package gogroup

import (
	"sync"
	"sync/atomic"
	"testing"
)

// No goroutine Go started runs after Close returned, and Go starts none
// after, however the calls interleave with Close.
func TestCloseWaitsForEveryStartedGoroutine(t *testing.T) {
	for round := 0; round < 200; round++ {
		var g Group
		var closed atomic.Bool
		var callers sync.WaitGroup
		for i := 0; i < 8; i++ {
			callers.Add(1)
			go func() {
				defer callers.Done()
				for j := 0; j < 20; j++ {
					before := closed.Load()
					ok := g.Go(func() {
						if closed.Load() {
							t.Error("a goroutine ran after Close returned")
						}
					})
					if ok && before {
						t.Error("Go started a goroutine after Close returned")
					}
				}
			}()
		}
		g.Close()
		closed.Store(true)
		callers.Wait()
	}
}

func TestGoAfterCloseRefuses(t *testing.T) {
	var g Group
	ran := make(chan struct{})
	if !g.Go(func() { close(ran) }) {
		t.Fatal("Go refused before Close")
	}
	g.Close()
	select {
	case <-ran:
	default:
		t.Fatal("Close returned before the goroutine ended")
	}
	if g.Go(func() { t.Error("ran after Close") }) {
		t.Fatal("Go reported a start after Close")
	}
	g.Close() // a second Close is harmless
}
