// Package quota holds client quotas in Kafka's model: per principal and
// client id, a produce byte rate, a fetch byte rate and a request rate; the
// rate limiter that enforces one; the config kept in the coordinator and
// watched; and the enforcer a broker asks for each request.
package quota

import (
	"math"
	"time"
)

// Burst is how many seconds of its rate a bucket holds when full: a caller
// that was idle may send that much at once before it is throttled.
const Burst = time.Second

// Bucket is a token bucket that may go into debt, which makes its throttle
// time Kafka's: a request is admitted while the bucket is not in debt, takes
// all it asks for (so one large request can overdraw it), and a caller in
// debt waits debt / rate, the over-quota amount divided by the quota. Over
// any interval of length T the bucket admits at most
// rate×T + rate×Burst + (one request), whatever the request sizes.
//
// It is pure: the caller passes the time, the rate and the amount, and
// guards it (a Bucket is not safe for concurrent use). The zero value is a
// full bucket.
type Bucket struct {
	// used is what the caller holds against a full bucket: 0 when full,
	// rate×Burst when empty, more when in debt. Starting at zero makes the
	// zero value full and lets the rate change without a reset.
	used float64
	last int64 // UnixNano of the last refill; 0 before the first take
}

// Take asks for n units at now under rate units per second. When the
// bucket is in debt it takes nothing and returns how long the caller must
// wait before a request is admitted again (rounded up to a millisecond);
// otherwise it takes n (possibly going into debt) and returns 0. A rate of
// zero or less admits everything.
func (b *Bucket) Take(now time.Time, rate float64, n int64) time.Duration {
	if rate <= 0 || math.IsInf(rate, 1) || math.IsNaN(rate) {
		return 0
	}
	b.refill(now, rate)
	if d := b.debt(rate); d > 0 {
		return d
	}
	b.add(rate, n)
	return 0
}

// Charge takes n units whatever the state, for amounts known only after a
// request was admitted (the bytes a fetch served).
func (b *Bucket) Charge(now time.Time, rate float64, n int64) {
	if rate <= 0 {
		return
	}
	b.refill(now, rate)
	b.add(rate, n)
}

// add takes n, keeping the debt within maxThrottle of the rate, so a
// caller told to wait maxThrottle is admitted when it comes back.
func (b *Bucket) add(rate float64, n int64) {
	b.used = min(b.used+float64(n), rate*(Burst+maxThrottle).Seconds())
}

// Throttle is how long a caller waits at now before the bucket admits it
// again, without taking anything.
func (b *Bucket) Throttle(now time.Time, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	b.refill(now, rate)
	return b.debt(rate)
}

// Full reports whether the bucket is full at now: it is then the same as a
// new one and may be forgotten.
func (b *Bucket) Full(now time.Time, rate float64) bool {
	if rate <= 0 {
		return true
	}
	b.refill(now, rate)
	return b.used == 0
}

func (b *Bucket) refill(now time.Time, rate float64) {
	t := now.UnixNano()
	if b.last != 0 && t > b.last {
		b.used = max(0, b.used-rate*float64(t-b.last)/1e9)
	}
	if t > b.last {
		b.last = t
	}
}

// debt is the wait until used is back to the capacity, rounded up to a
// millisecond so that a caller who waits exactly that long is admitted.
func (b *Bucket) debt(rate float64) time.Duration {
	over := b.used - rate*Burst.Seconds()
	if over <= 0 {
		return 0
	}
	ms := math.Ceil(over / rate * 1000)
	if ms > float64(maxThrottle/time.Millisecond) {
		return maxThrottle
	}
	return time.Duration(ms) * time.Millisecond
}

// maxThrottle caps a reported throttle time (Kafka caps it at the quota
// window times its samples): a rate lowered a lot after a burst would
// otherwise ask callers to wait for hours.
const maxThrottle = 5 * time.Minute
