// Package testwait is the one poll-until helper of the tests: wait for a
// condition against a deadline instead of sleeping a guessed time.
package testwait

import (
	"testing"
	"time"
)

// For polls cond until it holds, failing the test with what if d passes
// first. It polls often at first (1 ms) and backs off to every 50 ms, so a
// fast condition costs no latency and a slow one little CPU.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
