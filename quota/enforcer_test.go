package quota

import (
	"strconv"
	"testing"
	"time"
)

// clock is a settable time for enforcers under test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestEnforcer(t *testing.T) {
	clk := &clock{time.Unix(1_700_000_000, 0)}
	cfg := NewConfig([]Quota{
		{Entity: Entity{Principal: Default}, ProducerByteRate: 1000},
		{Entity: Entity{Principal: "User:alice"}, ConsumerByteRate: 500, RequestRate: 2},
	})
	e := NewEnforcer(func() *Config { return cfg }, clk.now)

	// A default quota is per principal: bob's burst does not throttle carol.
	if d := e.Admit("User:bob", "", Produce, 5000); d != 0 {
		t.Fatalf("bob's first produce throttled %v", d)
	}
	if d := e.Debt("User:bob", "", Produce); d != 4*time.Second {
		t.Fatalf("bob's debt after 5000 bytes at 1000/s: %v, want 4s", d)
	}
	if d := e.Debt("User:carol", "", Produce); d != 0 {
		t.Fatalf("carol, who sent nothing, is in debt: %v", d)
	}
	if d := e.Debt("User:bob", "", Fetch); d != 0 {
		t.Fatalf("bob, who has no fetch quota, is in debt: %v", d)
	}
	if d := e.Admit("User:bob", "x", Produce, 1); d != 4*time.Second {
		t.Fatalf("bob in debt: throttle %v, want 4s", d)
	}
	if d := e.Admit("User:carol", "", Produce, 1000); d != 0 {
		t.Fatalf("carol throttled by bob's debt: %v", d)
	}
	// Fetches are admitted with nothing and charged what they served.
	if d := e.Admit("User:alice", "", Fetch, 0); d != 0 {
		t.Fatal(d)
	}
	e.Charge("User:alice", "", Fetch, 1500)
	if d := e.Admit("User:alice", "", Fetch, 0); d != 2*time.Second {
		t.Fatalf("alice after 1500 bytes at 500/s: throttle %v, want 2s", d)
	}
	// Requests: a burst of two a second.
	for i := 0; i < 3; i++ {
		if d := e.Admit("User:alice", "", Request, 1); d != 0 {
			t.Fatalf("request %d throttled %v", i, d)
		}
	}
	if d := e.Admit("User:alice", "", Request, 1); d != 500*time.Millisecond {
		t.Fatalf("fourth request: throttle %v, want 500ms", d)
	}
	// No quota of that kind: admitted whatever the amount.
	if d := e.Admit("User:alice", "", Produce, 1<<40); d != 0 {
		t.Fatal(d)
	}
	clk.t = clk.t.Add(4 * time.Second)
	if d := e.Debt("User:bob", "", Produce); d != 0 {
		t.Fatalf("bob's debt after his throttle time: %v", d)
	}
	if d := e.Admit("User:bob", "", Produce, 1); d != 0 {
		t.Fatalf("bob after his throttle time: %v", d)
	}

	st := e.Stats()
	if got := st["User:bob"]; got.Amount[Produce] != 5001 || got.Throttled[Produce] != 1 || got.ThrottleTime[Produce] != 4*time.Second {
		t.Errorf("bob's stats %+v", got)
	}
	if got := st["User:alice"]; got.Amount[Fetch] != 1500 || got.Amount[Request] != 3 || got.Throttled[Request] != 1 || got.Throttled[Fetch] != 1 {
		t.Errorf("alice's stats %+v", got)
	}
}

// TestEnforcerBounds: callers with client ids of their own choosing cannot
// grow the enforcer past its bounds.
func TestEnforcerBounds(t *testing.T) {
	clk := &clock{time.Unix(1_700_000_000, 0)}
	cfg := NewConfig([]Quota{{Entity: Entity{ClientID: Default}, ProducerByteRate: 10}})
	e := NewEnforcer(func() *Config { return cfg }, clk.now)
	for i := 0; i < MaxBuckets+500; i++ {
		e.Admit("User:u"+strconv.Itoa(i%(MaxStatsPrincipals+10)), "c"+strconv.Itoa(i), Produce, 100)
	}
	if n := e.Buckets(Produce); n > MaxBuckets {
		t.Errorf("%d buckets, more than %d", n, MaxBuckets)
	}
	st := e.Stats()
	if len(st) > MaxStatsPrincipals+1 {
		t.Errorf("stats for %d principals", len(st))
	}
	if _, ok := st[OtherPrincipal]; !ok {
		t.Errorf("no %s row", OtherPrincipal)
	}
	// The overflow bucket is shared: it throttles.
	if d := e.Admit("User:new", "fresh", Produce, 1); d == 0 {
		t.Error("a caller past the bucket bound was not throttled by the shared overflow bucket")
	}
	// Once the buckets are full again (a few seconds later), the sweep
	// drops them and new callers get buckets of their own.
	clk.t = clk.t.Add(time.Minute)
	if d := e.Admit("User:new", "fresh", Produce, 1); d != 0 {
		t.Errorf("after the sweep: throttled %v", d)
	}
	if n := e.Buckets(Produce); n > 2 {
		t.Errorf("%d buckets after the sweep, want the new caller's (and the overflow's at most)", n)
	}
}

// BenchmarkEnforcerAdmit is the cost a broker adds to each request: with no
// quotas, and with a default quota that gives every caller a bucket.
func BenchmarkEnforcerAdmit(b *testing.B) {
	for _, tc := range []struct {
		name   string
		quotas []Quota
	}{
		{"none", nil},
		{"default", []Quota{{Entity: Entity{Principal: Default}, ProducerByteRate: 1e12, RequestRate: 1e12}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := NewConfig(tc.quotas)
			e := NewEnforcer(func() *Config { return cfg }, nil)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e.Admit("User:alice", "app", Produce, 1000)
				}
			})
		})
	}
}
