package broker

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
)

// DefaultMaxFetchSessions is how many replication fetch sessions a broker
// holds by default (Kafka's max.incremental.fetch.session.cache.slots).
const DefaultMaxFetchSessions = 1000

// fetchSessions are the replication fetch sessions this broker holds as a
// leader (KIP-227): for each follower's stream, the partitions it fetches
// here, the offset and leader epoch of each as last sent, and the positions
// last answered, so that a request names only what changed and an answer
// carries only what moved. At most max sessions are held; a new one evicts
// the least recently used idle one.
type fetchSessions struct {
	max int

	mu     sync.Mutex // guards the fields below; never held across a fetch
	lastID int32
	byID   map[int32]*fetchSession
}

// fetchSession is one follower's session. sem (capacity 1) is held by the
// one request that uses it at a time; the fields below it are guarded by
// holding sem.
type fetchSession struct {
	id, replica int32
	sem         chan struct{}
	lastUsed    time.Time // guarded by fetchSessions.mu
	// wake (capacity 1) ends the long poll of the request in flight, or
	// the next one's (PathReplicaFetchWake); sent to without sem.
	wake chan struct{}

	epoch int32 // the epoch the next request must carry
	parts map[brokerapi.TopicPartition]*sessionPartition
	order []brokerapi.TopicPartition // fetch order; an answer's next read starts at start
	start int
	// full is set until the session's first answer, which carries every
	// partition.
	full bool
}

// sessionPartition is one partition of a session: where the follower
// fetches it, and what the session last answered for it.
type sessionPartition struct {
	offset      int64
	leaderEpoch int32
	answered    bool
	hw, ls, le  int64
}

func newFetchSessions(max int) *fetchSessions {
	return &fetchSessions{max: max, byID: map[int32]*fetchSession{}}
}

// acquire returns the session a request names, held for it (release gives
// it back): a new one for epoch 0 (dropping the older session it names, if
// that is the same follower's), else the one named, at the epoch it
// expects. FETCH_SESSION_ID_NOT_FOUND: no such session for this follower
// (evicted, or the leader restarted); INVALID_FETCH_SESSION_EPOCH: not the
// epoch it expects (an answer was lost). Either way the follower starts a
// new session.
func (fs *fetchSessions) acquire(ctx context.Context, replica, id, epoch int32, now time.Time) (*fetchSession, error) {
	if epoch == 0 {
		return fs.create(replica, id, now), nil
	}
	fs.mu.Lock()
	s := fs.byID[id]
	if s == nil || s.replica != replica {
		fs.mu.Unlock()
		return nil, api.Errorf(api.CodeFetchSessionNotFound, "no fetch session %d of replica %d here", id, replica)
	}
	s.lastUsed = now
	fs.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, api.Errorf(api.CodeRequestTimedOut, "fetch session %d is busy with an earlier request", id)
	}
	if epoch != s.epoch {
		want := s.epoch
		<-s.sem
		return nil, api.Errorf(api.CodeInvalidFetchEpoch, "fetch session %d expects epoch %d, not %d", id, want, epoch)
	}
	return s, nil
}

// create starts a session for replica, dropping its older session old.
func (fs *fetchSessions) create(replica, old int32, now time.Time) *fetchSession {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if s := fs.byID[old]; s != nil && s.replica == replica {
		delete(fs.byID, old)
	}
	if len(fs.byID) >= fs.max {
		fs.evictLocked()
	}
	for {
		fs.lastID++
		if fs.lastID <= 0 {
			fs.lastID = 1
		}
		if fs.byID[fs.lastID] == nil {
			break
		}
	}
	s := &fetchSession{id: fs.lastID, replica: replica, sem: make(chan struct{}, 1), wake: make(chan struct{}, 1), lastUsed: now,
		parts: map[brokerapi.TopicPartition]*sessionPartition{}, full: true}
	s.sem <- struct{}{}
	fs.byID[s.id] = s
	return s
}

// evictLocked drops the least recently used session. One in use is
// dropped too: its request finishes, and the next finds it gone.
func (fs *fetchSessions) evictLocked() {
	var lru *fetchSession
	for _, s := range fs.byID {
		if lru == nil || s.lastUsed.Before(lru.lastUsed) {
			lru = s
		}
	}
	if lru != nil {
		delete(fs.byID, lru.id)
	}
}

// release gives a session back after its request, moving its epoch on.
func (fs *fetchSessions) release(s *fetchSession, now time.Time) {
	s.epoch++
	if s.epoch <= 0 {
		s.epoch = 1
	}
	fs.mu.Lock()
	s.lastUsed = now
	fs.mu.Unlock()
	<-s.sem
}

// wake ends the long poll of replica's session id: the one in flight, or
// else the next. FETCH_SESSION_ID_NOT_FOUND: no such session for it.
func (fs *fetchSessions) wake(replica, id int32) error {
	fs.mu.Lock()
	s := fs.byID[id]
	fs.mu.Unlock()
	if s == nil || s.replica != replica {
		return api.Errorf(api.CodeFetchSessionNotFound, "no fetch session %d of replica %d here", id, replica)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// size is the number of sessions held.
func (fs *fetchSessions) size() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.byID)
}

// apply takes a request's added, changed and removed partitions.
// INVALID_REQUEST when the session would hold more than
// MaxReplicaFetchPartitions; nothing is applied then.
func (s *fetchSession) apply(changed []brokerapi.ReplicaFetchPartition, removed []brokerapi.TopicPartition) error {
	added := 0
	for _, c := range changed {
		if s.parts[c.TopicPartition] == nil {
			added++
		}
	}
	if len(s.parts)+added > brokerapi.MaxReplicaFetchPartitions {
		return api.Errorf(api.CodeInvalidRequest, "a fetch session holds at most %d partitions", brokerapi.MaxReplicaFetchPartitions)
	}
	for _, tp := range removed {
		if s.parts[tp] == nil {
			continue
		}
		delete(s.parts, tp)
		for i, o := range s.order {
			if o == tp {
				s.order = append(s.order[:i], s.order[i+1:]...)
				break
			}
		}
	}
	for _, c := range changed {
		sp := s.parts[c.TopicPartition]
		if sp == nil {
			sp = &sessionPartition{}
			s.parts[c.TopicPartition] = sp
			s.order = append(s.order, c.TopicPartition)
		}
		sp.offset, sp.leaderEpoch = c.FetchOffset, c.LeaderEpoch
	}
	if s.start >= len(s.order) {
		s.start = 0
	}
	return nil
}

// spec is the fetch over every partition of the session, at the offsets it
// holds, starting where the last answer's data ended (so that under
// MaxBytes every partition gets its turn).
func (s *fetchSession) spec(r brokerapi.ReplicaFetchRequest) (FetchSpec, []brokerapi.TopicPartition) {
	n := len(s.order)
	order := make([]brokerapi.TopicPartition, 0, n)
	order = append(order, s.order[s.start:]...)
	order = append(order, s.order[:s.start]...)
	spec := FetchSpec{ReplicaID: r.ReplicaID, Wake: s.wake, MaxWait: r.MaxWait, MinBytes: int64(r.MinBytes), MaxBytes: int64(r.MaxBytes),
		Partitions: make([]FetchPartitionSpec, n)}
	for i, tp := range order {
		sp := s.parts[tp]
		spec.Partitions[i] = FetchPartitionSpec{Topic: tp.Topic, Partition: tp.Partition, Offset: sp.offset, LeaderEpoch: sp.leaderEpoch, MaxBytes: int64(r.PartitionMaxBytes)}
	}
	return spec, order
}

// answer picks what an answer carries of res (in order's order): every
// partition in the session's first answer, else those with data, an error,
// or positions other than the session last answered. It records what it
// answered and where the next fetch starts, and returns the indexes of res
// it picked.
func (s *fetchSession) answer(order []brokerapi.TopicPartition, res []FetchedPartition) []int {
	var picked []int
	lastData := -1
	for i := range res {
		f := &res[i]
		sp := s.parts[order[i]]
		moved := !sp.answered || sp.hw != f.HighWatermark || sp.ls != f.LogStart || sp.le != f.LogEnd
		if s.full || f.Size > 0 || f.Err != nil || moved {
			picked = append(picked, i)
			sp.answered, sp.hw, sp.ls, sp.le = true, f.HighWatermark, f.LogStart, f.LogEnd
		}
		if f.Size > 0 {
			lastData = i
		}
	}
	s.full = false
	if lastData >= 0 && len(s.order) > 0 {
		s.start = (s.start + lastData + 1) % len(s.order)
	}
	return picked
}
