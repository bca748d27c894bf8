// Package gogroup owns the goroutines a component starts and waits for when
// it closes, and refuses to start any once the close has begun waiting.
//
// A bare sync.WaitGroup cannot promise that: an Add that races the Wait of
// a Close may start a goroutine that outlives the component, or make Wait
// return before it ends. Group takes the Add and the switch to closing under
// one mutex, so every goroutine Go started before Close is waited for and
// none starts after.
package gogroup

import "sync"

// Group is a set of owned goroutines. The zero value is ready to use; a
// Group must not be copied.
type Group struct {
	mu      sync.Mutex // guards closing; wg.Add happens only under it
	closing bool
	wg      sync.WaitGroup
}

// Go starts f on a goroutine of the group and reports true, or, once Close
// has been called, starts nothing and reports false. A caller whose work
// must still happen (an answer a client waits for) does it itself then.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Close refuses new goroutines and waits for those already started. It may
// be called more than once.
func (g *Group) Close() {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	g.wg.Wait()
}
