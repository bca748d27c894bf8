// Package replica is ISR replication: on a leader, each follower's progress,
// the high watermark computed from it and the ISR changes it calls for; on a
// follower, the replication stream to each leader (one goroutine for every
// partition followed there, in a fetch session) and the truncation by
// leader epoch each partition runs before it joins.
package replica

import (
	"slices"
	"sort"
	"time"
)

// Follower is what a leader knows of one follower.
type Follower struct {
	// LEO is the follower's log end offset: the offset of its last fetch,
	// since a follower asks for the offset after what it has. -1 until the
	// follower fetched under this leadership.
	LEO int64
	// LastCaughtUp is the last time the follower had everything the leader had
	// (Kafka's lastCaughtUpTimeMs): a fetch at or past the leader's LEO at that
	// moment, or at or past the leader's LEO as of the follower's previous fetch.
	LastCaughtUp time.Time
	lastFetchAt  time.Time
	lastFetchLEO int64 // the leader's LEO when the follower last fetched
}

// Progress is a leader's view of its followers for one partition and one
// leader epoch. It is not safe for concurrent use: the partition owns it under
// its mutex. This is where the high watermark comes from.
type Progress struct {
	self      int32
	isr       []int32
	followers map[int32]*Follower
}

// NewProgress starts tracking for a new leadership. Followers start with an
// unknown LEO; ISR members are taken as caught up now, so each gets a full
// lag window to show up.
func NewProgress(self int32, replicas, isr []int32, now time.Time) *Progress {
	p := &Progress{self: self, isr: slices.Clone(isr), followers: map[int32]*Follower{}}
	for _, id := range replicas {
		if id != self {
			p.followers[id] = &Follower{LEO: -1, LastCaughtUp: now, lastFetchLEO: -1}
		}
	}
	return p
}

// SetISR replaces the ISR after a committed ISR change.
func (p *Progress) SetISR(isr []int32) { p.isr = slices.Clone(isr) }

// ISRSize is the number of ISR members.
func (p *Progress) ISRSize() int { return len(p.isr) }

// ISR returns a copy of the current ISR.
func (p *Progress) ISR() []int32 { return slices.Clone(p.isr) }

// InISR reports whether id is in the ISR.
func (p *Progress) InISR(id int32) bool { return slices.Contains(p.isr, id) }

// Follower returns a follower's progress, or nil for a broker that is not a replica.
func (p *Progress) Follower(id int32) *Follower { return p.followers[id] }

// OnFetch records a follower's fetch at fetchOffset while the leader's log
// ends at leaderLEO.
func (p *Progress) OnFetch(id int32, fetchOffset, leaderLEO int64, now time.Time) bool {
	f, ok := p.followers[id]
	if !ok {
		return false
	}
	switch {
	case fetchOffset >= leaderLEO:
		f.LastCaughtUp = now
	case f.lastFetchLEO >= 0 && fetchOffset >= f.lastFetchLEO:
		f.LastCaughtUp = f.lastFetchAt
	}
	f.LEO = fetchOffset
	f.lastFetchAt, f.lastFetchLEO = now, leaderLEO
	return true
}

// HighWatermark is the smallest LEO over the ISR (the leader counts with
// leaderLEO). A member that has not fetched yet holds it where it is: the
// result never passes an ISR member's known position.
func (p *Progress) HighWatermark(leaderLEO int64) (hw int64, known bool) {
	hw = leaderLEO
	for _, id := range p.isr {
		if id == p.self {
			continue
		}
		f, ok := p.followers[id]
		if !ok || f.LEO < 0 {
			return 0, false
		}
		hw = min(hw, f.LEO)
	}
	return hw, true
}

// Laggards are ISR followers that have not been caught up for longer than
// maxLag: the ISR should shrink without them.
func (p *Progress) Laggards(now time.Time, maxLag time.Duration) []int32 {
	var out []int32
	for _, id := range p.isr {
		if f, ok := p.followers[id]; ok && now.Sub(f.LastCaughtUp) > maxLag {
			out = append(out, id)
		}
	}
	return out
}

// Joiners are followers outside the ISR whose LEO reached hw (and the start of
// the current leader epoch, so they hold this leader's lineage) and that are
// caught up now (a follower that stopped fetching is not, however far it got):
// the ISR should grow with them.
func (p *Progress) Joiners(hw, epochStart int64, now time.Time, maxLag time.Duration) []int32 {
	var out []int32
	for id, f := range p.followers {
		if !p.InISR(id) && f.LEO >= 0 && f.LEO >= hw && f.LEO >= epochStart && now.Sub(f.LastCaughtUp) <= maxLag {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
