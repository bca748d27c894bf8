package quota

import (
	"testing"
	"time"
)

// step is one call on a bucket at a time offset from the start.
type step struct {
	at     time.Duration
	op     string // "take", "charge", "throttle"
	n      int64
	wantMs int64 // the throttle the call returns (take, throttle)
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name  string
		rate  float64
		steps []step
	}{
		{"a new bucket admits its burst", 1000, []step{
			{0, "take", 1000, 0},
			{0, "throttle", 0, 0}, // exactly at capacity: still admitted
			{0, "take", 1, 0},     // admitted, and now 1 over
			{0, "take", 1, 1},     // refused: 1 byte over at 1000/s is 1 ms
		}},
		{"throttle time is the over-quota amount over the rate", 1000, []step{
			{0, "take", 3000, 0}, // a burst past the capacity is admitted whole
			{0, "take", 1, 2000}, // 2000 over at 1000/s
			{500 * time.Millisecond, "take", 1, 1500},
			{2 * time.Second, "take", 10, 0}, // paid off: admitted
		}},
		{"a refused request takes nothing", 100, []step{
			{0, "take", 200, 0},
			{0, "take", 50, 1000},
			{0, "take", 50, 1000},
			{time.Second, "take", 50, 0},
		}},
		{"waiting the throttle time exactly is enough", 3, []step{
			{0, "take", 4, 0},
			{0, "take", 1, 334}, // 1/3 s rounded up to the millisecond
			{334 * time.Millisecond, "take", 1, 0},
		}},
		{"refill stops at the capacity", 10, []step{
			{0, "take", 10, 0},
			{time.Hour, "take", 10, 0},
			{time.Hour, "take", 1, 0},
			{time.Hour, "take", 1, 100},
		}},
		{"charges after the fact put the bucket in debt", 1000, []step{
			{0, "take", 0, 0},
			{0, "charge", 5000, 0},
			{0, "take", 0, 4000},
			{0, "throttle", 0, 4000},
			{4 * time.Second, "take", 0, 0},
		}},
		{"debt is capped at maxThrottle", 1, []step{
			{0, "charge", 1 << 40, 0},
			{0, "throttle", 0, maxThrottle.Milliseconds()},
			{maxThrottle, "take", 1, 0},
		}},
		{"a clock going back refills nothing and takes nothing back", 100, []step{
			{time.Second, "take", 150, 0},
			{0, "take", 1, 500},
			{time.Second, "take", 1, 500},
		}},
		{"no rate admits everything", 0, []step{
			{0, "take", 1 << 50, 0},
			{0, "take", 1 << 50, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Bucket
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				var got time.Duration
				switch s.op {
				case "take":
					got = b.Take(now, tt.rate, s.n)
				case "charge":
					b.Charge(now, tt.rate, s.n)
				case "throttle":
					got = b.Throttle(now, tt.rate)
				}
				if got != time.Duration(s.wantMs)*time.Millisecond {
					t.Fatalf("step %d (%s %d at %v): throttle %v, want %d ms", i, s.op, s.n, s.at, got, s.wantMs)
				}
			}
		})
	}
}

// TestBucketBound checks the bound the enforcement promises: over any run
// of takes, what is admitted by time T is at most rate×T + rate×Burst +
// the largest single request, and a caller that keeps asking gets close to
// the rate.
func TestBucketBound(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const rate = 10_000.0
	for _, size := range []int64{1, 700, 10_000, 45_000} {
		var b Bucket
		admitted := int64(0)
		for ms := 0; ms <= 10_000; ms++ { // a request every millisecond for 10 s
			if b.Take(t0.Add(time.Duration(ms)*time.Millisecond), rate, size) == 0 {
				admitted += size
			}
		}
		limit := int64(rate*10+rate*Burst.Seconds()) + size
		if admitted > limit {
			t.Errorf("size %d: admitted %d bytes in 10 s at %v/s, more than %d", size, admitted, rate, limit)
		}
		if demand := size * 10_001; admitted < min(demand, int64(rate*10)-size) {
			t.Errorf("size %d: admitted only %d bytes in 10 s at %v/s", size, admitted, rate)
		}
	}
}
