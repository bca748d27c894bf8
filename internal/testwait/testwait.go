// Package testwait is the one poll-until helper of the tests: wait for a
// condition against a deadline instead of sleeping a guessed time.
//
// Check is the one to reach for: the condition returns nil when it holds or
// an error saying what it saw, and a timeout reports the last of those
// errors, so a failure reads "waiting for the ISR to shrink: isr [1 2 3],
// want [1]" rather than only "timed out". For waits a bool says enough.
package testwait

import (
	"testing"
	"time"
)

// Check polls cond until it returns nil, failing the test with what and the
// last error cond returned if d passes first. It polls often at first
// (1 ms) and backs off to every 50 ms, so a fast condition costs no latency
// and a slow one little CPU.
func Check(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Until(d, cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
	}
}

// For is Check for a condition that has nothing to say when it does not
// hold yet.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if Until(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) != nil {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Until polls cond until it returns nil or d passes, and returns cond's
// last error (nil when it held). For a caller that is not a test's own
// goroutine (t.Fatal must not be called there) or that handles the timeout
// itself.
func Until(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
