package broker

import (
	"sync"

	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/replica"
)

// streams are this broker's replication streams as a follower: one
// replica.Stream per leader, carrying every partition this broker follows
// there, and one Truncator whose workers run the partitions' epoch
// truncations before they join. The broker owns them; close stops them all.
type streams struct {
	self       int32
	client     *brokerapi.Client
	peerAddr   func(id int32) (string, bool)
	recovering func(where string, f func()) bool
	trunc      *replica.Truncator

	mu       sync.Mutex // guards byLeader; taken after Partition.mu, before a Stream's locks
	byLeader map[int32]*replica.Stream
	closed   bool
}

func newStreams(self int32, client *brokerapi.Client, peerAddr func(int32) (string, bool), recovering func(string, func()) bool) *streams {
	return &streams{self: self, client: client, peerAddr: peerAddr, recovering: recovering,
		trunc:    replica.NewTruncator(replica.DefaultTruncations, recovering),
		byLeader: map[int32]*replica.Stream{}}
}

// follow makes p follow leader at epoch, on the stream to that leader
// (started on first use). It is false when the leader is not registered: a
// later state or view says more.
func (s *streams) follow(p *Partition, leader, epoch int32) bool {
	if _, ok := s.peerAddr(leader); !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	st := s.byLeader[leader]
	if st == nil {
		st = replica.NewStream(replica.StreamConfig{
			Self: s.self, LeaderID: leader, Client: s.client, Truncator: s.trunc,
			LeaderAddr: func() (string, bool) { return s.peerAddr(leader) },
			Recover:    s.recovering,
			Logger:     p.deps.log,
		})
		s.byLeader[leader] = st
	}
	st.Add(replica.StreamPartition{Topic: p.Topic, Partition: p.ID, LeaderEpoch: epoch, Log: p.log})
	return true
}

// unfollow takes p off its stream to leader; when it returns, the stream
// no longer changes p's log.
func (s *streams) unfollow(p *Partition, leader int32) {
	s.mu.Lock()
	st := s.byLeader[leader]
	s.mu.Unlock()
	if st != nil {
		st.Remove(p.Topic, p.ID)
	}
}

// count is the number of streams and of the partitions on them.
func (s *streams) count() (streams, partitions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.byLeader {
		streams++
		partitions += st.Len()
	}
	return streams, partitions
}

// close stops every stream, then the truncation workers: after it no
// follower changes a log.
func (s *streams) close() {
	s.mu.Lock()
	s.closed = true
	all := s.byLeader
	s.byLeader = map[int32]*replica.Stream{}
	s.mu.Unlock()
	for _, st := range all {
		st.Close()
	}
	s.trunc.Close()
}

// ReplicationStreams counts this broker's replication streams (one per
// leader it follows) and the partitions on them.
func (b *Broker) ReplicationStreams() (streams, partitions int) { return b.streams.count() }
