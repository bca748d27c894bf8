package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A produce whose deadline passed asks its leader for a millisecond, not
// a negative timeout (which the broker refuses as INVALID_REQUEST, a 400
// for a valid request).
func TestLeaderTimeoutIsNeverNegative(t *testing.T) {
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if got := leaderTimeout(past); got != time.Millisecond {
		t.Fatalf("a deadline a second ago asks the leader for %v, want 1ms", got)
	}
	if got := leaderTimeout(context.Background()); got != 0 {
		t.Fatalf("no deadline asks the leader for %v, want 0 (its default)", got)
	}
	soon, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if got := leaderTimeout(soon); got <= 59*time.Second || got > time.Minute {
		t.Fatalf("a minute's deadline asks the leader for %v", got)
	}
}

// A deadline that passes keeps retrying until then, and returns the last
// error.
func TestRetryUntilTheDeadline(t *testing.T) {
	refused := errors.New("not enough replicas")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	calls := 0
	_, err := retry(ctx, func(error) bool { return true }, func() (int, error) {
		calls++
		if ctx.Err() != nil {
			t.Error("an attempt was made after the deadline")
		}
		return 0, refused
	})
	if !errors.Is(err, refused) || calls < 2 {
		t.Fatalf("retry: %v after %d attempts, want the last error after several", err, calls)
	}
}
