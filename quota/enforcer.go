package quota

import (
	"sync"
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
// Safe for concurrent use: one mutex guards the buckets and counters, held
// only for a map lookup and a little arithmetic, never across I/O (a leaf
// in any lock order).
type Enforcer struct {
	config func() *Config
	now    func() time.Time

	mu        sync.Mutex
	buckets   [numKinds]map[Entity]*Bucket
	lastSweep [numKinds]time.Time
	stats     map[string]*Stats
}

// NewEnforcer returns an enforcer of the quotas config returns at each
// call (a watched copy), on the clock now (time.Now when nil).
func NewEnforcer(config func() *Config, now func() time.Time) *Enforcer {
	if now == nil {
		now = time.Now
	}
	e := &Enforcer{config: config, now: now, stats: map[string]*Stats{}}
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
	rate, key := e.config().Resolve(principal, clientID, k)
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.statsLocked(principal)
	if rate == 0 {
		st.Amount[k] += n
		return 0
	}
	d := e.bucketLocked(k, key, now, rate).Take(now, rate, n)
	if d > 0 {
		st.Throttled[k]++
		st.ThrottleTime[k] += d
		return d
	}
	st.Amount[k] += n
	return 0
}

// Charge takes n units of kind for an admitted request whose size was
// known only once it was served.
func (e *Enforcer) Charge(principal, clientID string, k Kind, n int64) {
	rate, key := e.config().Resolve(principal, clientID, k)
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.statsLocked(principal).Amount[k] += n
	if rate > 0 {
		e.bucketLocked(k, key, now, rate).Charge(now, rate, n)
	}
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

func (e *Enforcer) statsLocked(principal string) *Stats {
	st, ok := e.stats[principal]
	if ok {
		return st
	}
	if len(e.stats) >= MaxStatsPrincipals {
		principal = OtherPrincipal
		if st, ok := e.stats[principal]; ok {
			return st
		}
	}
	st = &Stats{}
	e.stats[principal] = st
	return st
}

// Stats copies the counters by principal.
func (e *Enforcer) Stats() map[string]Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Stats, len(e.stats))
	for p, st := range e.stats {
		out[p] = *st
	}
	return out
}

// Buckets is how many buckets of kind are held (for tests and metrics).
func (e *Enforcer) Buckets(k Kind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buckets[k])
}
