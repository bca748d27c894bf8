package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/api"
)

// The cluster's state as the gateway shows it (GET /v1/cluster), and waits
// on it.

// milestone is a state of the cluster a step waits for.
type milestone struct {
	name    string
	reached func(api.ClusterInfo) bool
	// at is when the first answer that showed the state was asked for,
	// since the step began; -1 until then.
	at time.Duration
	// timeout is how long it was waited for.
	timeout time.Duration
}

// pollStats are the gaps between the polls of GET /v1/cluster: the
// resolution of every time Scale reports.
type pollStats struct {
	n       int
	sum     time.Duration
	longest time.Duration
}

func (p *pollStats) add(gap time.Duration) {
	p.n++
	p.sum += gap
	p.longest = max(p.longest, gap)
}

func (p *pollStats) mean() time.Duration {
	if p.n == 0 {
		return 0
	}
	return p.sum / time.Duration(p.n)
}

// clusterPollTimeout bounds one GET /v1/cluster; a slower answer counts as
// none, and the poll goes on.
const clusterPollTimeout = 10 * time.Second

// clusterInfo is one GET /v1/cluster.
func (s *scaleRun) clusterInfo(ctx context.Context) (api.ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterPollTimeout)
	defer cancel()
	return s.cl.Cluster(ctx)
}

// waitState polls GET /v1/cluster until every milestone is reached or
// timeout has passed since t0 (those not reached keep at -1). It returns
// the last answer; an error only when ctx ends.
func (s *scaleRun) waitState(ctx context.Context, t0 time.Time, timeout time.Duration, ms ...*milestone) (api.ClusterInfo, error) {
	for _, m := range ms {
		m.at, m.timeout = -1, timeout
	}
	deadline := t0.Add(timeout)
	var last api.ClusterInfo
	var prev time.Time
	for {
		asked := time.Now()
		if !prev.IsZero() {
			s.polls.add(asked.Sub(prev))
		}
		prev = asked
		ci, err := s.clusterInfo(ctx)
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		pending := 0
		if err == nil {
			last = ci
			for _, m := range ms {
				if m.at < 0 && m.reached(ci) {
					m.at = asked.Sub(t0)
				}
			}
		}
		for _, m := range ms {
			if m.at < 0 {
				pending++
			}
		}
		if pending == 0 {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// at is the cell of a milestone's time: seconds, or that it timed out
// (and then the run's logs will be printed).
func (s *scaleRun) at(m *milestone) string {
	if m.at < 0 {
		s.timedOut = true
		return fmt.Sprintf("timed out after %s", m.timeout)
	}
	return secs(m.at)
}

// healthy: every broker registered, a controller, every partition created
// so far there, each with a live leader and its full ISR.
func (s *scaleRun) healthy(ci api.ClusterInfo) bool {
	alive := 0
	for _, b := range ci.Brokers {
		if b.Alive {
			alive++
		}
	}
	h := ci.Partitions
	return alive == s.o.Brokers && ci.Controller >= 0 && h.Total >= s.created && h.Offline == 0 && h.UnderReplicated == 0
}

// balanced: every broker registered, no partition offline, and every
// broker leading the partitions it is the first replica of (the controller
// moves leadership back to them once they are in sync again). An ISR may
// be short meanwhile: a follower of a busy broker drops out and back in.
func (s *scaleRun) balanced(ci api.ClusterInfo) bool {
	alive := 0
	for _, b := range ci.Brokers {
		if b.Alive {
			alive++
		}
	}
	if alive != s.o.Brokers || ci.Partitions.Offline > 0 {
		return false
	}
	for _, b := range ci.Brokers {
		if b.PartitionsLed != s.preferred[b.ID] {
			return false
		}
	}
	return true
}

// brokerIn returns broker id as ci shows it; not alive when ci does not list it.
func brokerIn(ci api.ClusterInfo, id int32) api.BrokerStatus {
	for _, b := range ci.Brokers {
		if b.ID == id {
			return b
		}
	}
	return api.BrokerStatus{ID: id}
}

// ledAgain: broker id is gone from the cluster's brokers (its session
// ended) and every partition has a live leader.
func ledAgain(id int32) func(api.ClusterInfo) bool {
	return func(ci api.ClusterInfo) bool { return !brokerIn(ci, id).Alive && ci.Partitions.Offline == 0 }
}
