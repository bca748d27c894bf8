package quota

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of an enforcer's memory. A full bucket equals a new one, so
// forgetting it changes nothing; the bounds only matter when more callers
// than that are over their quotas at once.
const (
	// MaxBuckets bounds the buckets of one kind. Past it, full buckets are
	// dropped; when none is, new callers share one overflow bucket per kind
	// until some are.
	MaxBuckets = 10000
	// MaxStatsPrincipals bounds the principals counted one by one (and so
	// the metric series); the others are counted as OtherPrincipal.
	MaxStatsPrincipals = 1000
	// OtherPrincipal labels the principals past MaxStatsPrincipals.
	OtherPrincipal = "<other>"
)

var overflowKey = Entity{Principal: "<overflow>"}

// Stats are one principal's counters since the enforcer started.
type Stats struct {
	// Amount is what the principal was admitted: bytes for Produce and
	// Fetch, requests for Request.
	Amount [numKinds]int64
	// Throttled counts refused requests, by kind.
	Throttled [numKinds]int64
	// ThrottleTime sums the throttle times those refusals announced.
	ThrottleTime [numKinds]time.Duration
}

// Enforcer applies the quotas of a Config to callers: one Bucket per kind
// and bucket key (Config.Resolve), and counters per principal.
//
// Safe for concurrent use: one mutex guards the buckets, held only for a
// map lookup and a little arithmetic, never across I/O (a leaf in any lock
// order), and taken only for callers with a quota; the counters are atomic,
// in a map read without locks.
type Enforcer struct {
	config func() *Config
	now    func() time.Time

	mu        sync.Mutex // guards buckets and lastSweep
	buckets   [numKinds]map[Entity]*Bucket
	lastSweep [numKinds]time.Time

	stats      sync.Map // principal → *counters
	statsCount atomic.Int64
}

type counters struct {
	amount, throttled, throttleNs [numKinds]atomic.Int64
}

// NewEnforcer returns an enforcer of the quotas config returns at each
// call (a watched copy), on the clock now (time.Now when nil).
func NewEnforcer(config func() *Config, now func() time.Time) *Enforcer {
	if now == nil {
		now = time.Now
	}
	e := &Enforcer{config: config, now: now}
	for k := range e.buckets {
		e.buckets[k] = map[Entity]*Bucket{}
	}
	return e
}

// Admit asks for n units of kind for the caller: 0 when admitted (n is
// then taken), else the throttle time, and nothing is taken. A caller
// without a quota of that kind is always admitted. Fetches ask with n 0
// and Charge what they served.
func (e *Enforcer) Admit(principal, clientID string, k Kind, n int64) time.Duration {
	st := e.counters(principal)
	rate, key := e.config().Resolve(principal, clientID, k)
	if rate == 0 {
		st.amount[k].Add(n)
		return 0
	}
	now := e.now()
	e.mu.Lock()
	d := e.bucketLocked(k, key, now, rate).Take(now, rate, n)
	e.mu.Unlock()
	if d > 0 {
		st.throttled[k].Add(1)
		st.throttleNs[k].Add(int64(d))
		return d
	}
	st.amount[k].Add(n)
	return 0
}

// Charge takes n units of kind for an admitted request whose size was
// known only once it was served.
func (e *Enforcer) Charge(principal, clientID string, k Kind, n int64) {
	e.counters(principal).amount[k].Add(n)
	rate, key := e.config().Resolve(principal, clientID, k)
	if rate == 0 {
		return
	}
	now := e.now()
	e.mu.Lock()
	e.bucketLocked(k, key, now, rate).Charge(now, rate, n)
	e.mu.Unlock()
}

// Debt is how long the caller must wait at now before its next request of
// kind is admitted, taking nothing: above 0 only when a request it was
// admitted for left that quota in debt. A successful answer carries it
// (Kafka's throttle_time_ms), so a client can pause before its next request
// instead of being refused.
func (e *Enforcer) Debt(principal, clientID string, k Kind) time.Duration {
	rate, key := e.config().Resolve(principal, clientID, k)
	if rate == 0 {
		return 0
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.buckets[k][key]
	if !ok {
		if b, ok = e.buckets[k][overflowKey]; !ok {
			return 0
		}
	}
	return b.Throttle(now, rate)
}

// bucketLocked finds or makes the bucket of key, within MaxBuckets.
func (e *Enforcer) bucketLocked(k Kind, key Entity, now time.Time, rate float64) *Bucket {
	m := e.buckets[k]
	if b, ok := m[key]; ok {
		return b
	}
	// One place of MaxBuckets is the overflow bucket's.
	if len(m) >= MaxBuckets-1 && now.Sub(e.lastSweep[k]) >= time.Second {
		// Full buckets are new buckets: dropping them changes nothing. At
		// most one sweep a second, so callers past the bound cost one
		// lookup each, not a scan.
		e.lastSweep[k] = now
		for key, b := range m {
			r, _ := e.config().Resolve(key.Principal, key.ClientID, k)
			if b.Full(now, r) {
				delete(m, key)
			}
		}
	}
	if len(m) >= MaxBuckets-1 {
		key = overflowKey
		if b, ok := m[key]; ok {
			return b
		}
	}
	b := &Bucket{}
	m[key] = b
	return b
}

// counters are principal's, or OtherPrincipal's past MaxStatsPrincipals
// (a few more may slip in while many new principals arrive at once).
func (e *Enforcer) counters(principal string) *counters {
	if c, ok := e.stats.Load(principal); ok {
		return c.(*counters)
	}
	if e.statsCount.Load() >= MaxStatsPrincipals {
		principal = OtherPrincipal
	}
	c, loaded := e.stats.LoadOrStore(principal, &counters{})
	if !loaded {
		e.statsCount.Add(1)
	}
	return c.(*counters)
}

// Stats copies the counters by principal.
func (e *Enforcer) Stats() map[string]Stats {
	out := map[string]Stats{}
	e.stats.Range(func(k, v any) bool {
		c := v.(*counters)
		var st Stats
		for i := range numKinds {
			st.Amount[i] = c.amount[i].Load()
			st.Throttled[i] = c.throttled[i].Load()
			st.ThrottleTime[i] = time.Duration(c.throttleNs[i].Load())
		}
		out[k.(string)] = st
		return true
	})
	return out
}

// Buckets is how many buckets of kind are held (for tests and metrics).
func (e *Enforcer) Buckets(k Kind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buckets[k])
}
