package push

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// gate is a subscription's door to its endpoint, shared by every partition
// this gateway delivers: while the endpoint is down it lets one request (a
// probe) through at a time after each backoff; it spaces requests to the
// subscription's rate; and it counts successes, which is how a failure is
// told to be the record's rather than the endpoint's.
type gate struct {
	minBackoff, maxBackoff time.Duration
	interval               time.Duration // between requests, from rate.max_per_second; 0: none

	mu sync.Mutex // guards everything below
	// successes counts 2xx answers; a ticket holds its value at issue.
	successes uint64
	down      bool      // the endpoint is unreachable: probing
	downSince time.Time // when the current outage began
	failures  int       // outage failures in a row (the backoff's exponent)
	until     time.Time // no request before this (backoff or Retry-After)
	probing   bool      // a probe is in flight
	next      time.Time // the rate's next free slot
	changed   chan struct{}
	lastErr   string
}

func newGate(minBackoff, maxBackoff time.Duration, perSecond float64) *gate {
	g := &gate{minBackoff: minBackoff, maxBackoff: maxBackoff, changed: make(chan struct{})}
	if perSecond > 0 {
		g.interval = time.Duration(float64(time.Second) / perSecond)
	}
	return g
}

// ticket is a pass to send one request.
type ticket struct {
	seq   uint64 // successes when issued
	probe bool
}

// acquire waits until a request may be sent. While the endpoint is down
// only one probe is out at a time.
func (g *gate) acquire(ctx context.Context) (ticket, error) {
	for {
		g.mu.Lock()
		now := time.Now()
		wait := time.Duration(0)
		switch {
		case now.Before(g.until):
			wait = g.until.Sub(now)
		case g.down && g.probing:
			wait = -1 // until the probe's answer
		case g.interval > 0 && now.Before(g.next):
			wait = g.next.Sub(now)
		}
		if wait == 0 {
			t := ticket{seq: g.successes, probe: g.down}
			if g.down {
				g.probing = true
			}
			if g.interval > 0 {
				g.next = now.Add(g.interval)
			}
			g.mu.Unlock()
			return t, nil
		}
		changed := g.changed
		g.mu.Unlock()
		if err := waitFor(ctx, changed, wait); err != nil {
			return ticket{}, err
		}
	}
}

// cancel returns a ticket that was not used (its request was not sent).
func (g *gate) cancel(t ticket) {
	if !t.probe {
		return
	}
	g.mu.Lock()
	g.probing = false
	g.signalLocked()
	g.mu.Unlock()
}

// report records a request's outcome and returns whether a failure counts
// as an attempt against its record, and how long the subscription backs
// off (0 when it does not).
func (g *gate) report(t ticket, o outcome, retryAfterMax time.Duration) (counts bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.signalLocked()
	if t.probe {
		g.probing = false
	}
	now := time.Now()
	switch o.verdict {
	case delivered:
		g.successes++
		g.down, g.failures, g.until = false, 0, time.Time{}
		return false
	case refused:
		// The endpoint answered for this record: it is up.
		g.down, g.failures = false, 0
		g.lastErr = o.errOf().Error()
		return true
	case throttled:
		g.lastErr = o.errOf().Error()
		d := o.retryAfter
		if d <= 0 {
			g.failures++
			d = backoff(g.minBackoff, g.maxBackoff, g.failures)
		}
		g.until = later(g.until, now.Add(min(d, retryAfterMax)))
		return false
	case gone:
		g.lastErr = o.errOf().Error()
		return false
	}
	// unreachable
	g.lastErr = o.errOf().Error()
	if g.successes > t.seq {
		// Another request succeeded since this one was sent: the endpoint
		// works, so this failure is the record's.
		return true
	}
	if !g.down {
		g.down, g.downSince = true, now
	}
	g.failures++
	g.until = later(g.until, now.Add(backoff(g.minBackoff, g.maxBackoff, g.failures)))
	return false
}

// outage reports since when the endpoint has been down (zero when up).
func (g *gate) outage() (since time.Time, lastErr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.down {
		return time.Time{}, g.lastErr
	}
	return g.downSince, g.lastErr
}

// backingOff reports whether requests are being held back.
func (g *gate) backingOff() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down || time.Now().Before(g.until)
}

func (g *gate) signalLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// backoff is exponential with full jitter: uniform in [0, min·2^(n-1)],
// capped at max, and never below a tenth of min (so a probe is not sent
// back to back).
func backoff(minD, maxD time.Duration, n int) time.Duration {
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return max(time.Duration(rand.Int64N(int64(d)+1)), minD/10)
}

// retryBackoff spaces the tries of one refused record: exponential with
// equal jitter (half fixed, half random), so a record is not tried again
// at once, and records refused together spread out.
func retryBackoff(minD, maxD time.Duration, n int) time.Duration {
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitFor waits for ctx, ch, or d (d < 0: no timeout).
func waitFor(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	var timer <-chan time.Time
	if d >= 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-timer:
	}
	return nil
}
