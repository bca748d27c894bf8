package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
)

// Acks is how many replicas must have a batch before a produce is answered.
type Acks int

const (
	AcksNone   Acks = 0  // answer before writing
	AcksLeader Acks = 1  // answer once the leader wrote it
	AcksAll    Acks = -1 // answer once every ISR member has it (HW passed it)
)

// ParseAcks reads "0", "1", "all" or "-1".
func ParseAcks(s string) (Acks, error) {
	switch s {
	case "", "all", "-1":
		return AcksAll, nil
	case "1":
		return AcksLeader, nil
	case "0":
		return AcksNone, nil
	}
	return 0, api.Errorf(api.CodeInvalidRequest, "acks=%q: want 0, 1 or all", s)
}

// Partition is one partition replica on this broker: its log and the role the
// controller gave it.
type Partition struct {
	Topic string
	ID    int32
	self  int32
	log   *commitlog.Log
	cfg   api.TopicConfig

	mu    sync.RWMutex       // guards state
	state api.PartitionState // the last state applied from the controller
}

func newPartition(topic string, id, self int32, log *commitlog.Log, cfg api.TopicConfig) *Partition {
	return &Partition{Topic: topic, ID: id, self: self, log: log, cfg: cfg, state: api.PartitionState{Leader: -1, LeaderEpoch: -1}}
}

// Log is the partition's local log.
func (p *Partition) Log() *commitlog.Log { return p.log }

func (p *Partition) String() string { return fmt.Sprintf("%s-%d", p.Topic, p.ID) }

// applyState takes a new leader/ISR state from the controller. States with an
// older leader epoch than the one applied are ignored.
func (p *Partition) applyState(st api.PartitionState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.LeaderEpoch < p.state.LeaderEpoch {
		return
	}
	p.state = st
	if p.isSoleReplicaLocked() {
		// Leader with no followers in sync: everything it has is committed.
		p.log.SetHighWatermark(p.log.Offsets().LogEnd)
	}
}

func (p *Partition) isSoleReplicaLocked() bool {
	return p.state.Leader == p.self && len(p.state.ISR) == 1 && p.state.ISR[0] == p.self
}

// leaderEpoch returns the current epoch if this replica leads, else NOT_LEADER.
func (p *Partition) leaderEpoch() (int32, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.state.Leader != p.self {
		return 0, api.Errorf(api.CodeNotLeader, "broker %d does not lead %s (leader %d, epoch %d)", p.self, p, p.state.Leader, p.state.LeaderEpoch)
	}
	return p.state.LeaderEpoch, nil
}

// checkEpoch fences a request that names a leader epoch (-1: none named).
func (p *Partition) checkEpoch(requested int32) error {
	if requested < 0 {
		return nil
	}
	p.mu.RLock()
	cur := p.state.LeaderEpoch
	p.mu.RUnlock()
	switch {
	case requested < cur:
		return api.Errorf(api.CodeFencedLeaderEpoch, "%s: epoch %d is older than %d", p, requested, cur)
	case requested > cur:
		return api.Errorf(api.CodeUnknownLeaderEpoch, "%s: epoch %d is newer than %d", p, requested, cur)
	}
	return nil
}

// Produce appends raw batches as leader and waits for the acks asked for.
func (p *Partition) Produce(ctx context.Context, batches []byte, acks Acks) (brokerapi.ProduceResult, error) {
	p.mu.RLock()
	if p.state.Leader != p.self {
		p.mu.RUnlock()
		return brokerapi.ProduceResult{}, api.Errorf(api.CodeNotLeader, "broker %d does not lead %s", p.self, p)
	}
	epoch := p.state.LeaderEpoch
	if acks == AcksAll && len(p.state.ISR) < p.cfg.MinInsyncReplicas {
		n := len(p.state.ISR)
		p.mu.RUnlock()
		return brokerapi.ProduceResult{}, api.Errorf(api.CodeNotEnoughReplicas, "%s has %d in-sync replicas, min.insync.replicas is %d", p, n, p.cfg.MinInsyncReplicas)
	}
	info, err := p.log.Append(batches, epoch)
	if err == nil && p.isSoleReplicaLocked() {
		p.log.SetHighWatermark(info.LastOffset + 1)
	}
	p.mu.RUnlock()
	if err != nil {
		return brokerapi.ProduceResult{}, err
	}
	res := brokerapi.ProduceResult{BaseOffset: info.FirstOffset, LastOffset: info.LastOffset}
	if acks == AcksAll {
		if err := p.waitCommitted(ctx, info.LastOffset+1); err != nil {
			return res, err
		}
	}
	res.HighWatermark = p.log.Offsets().HighWatermark
	return res, nil
}

// waitCommitted blocks until the HW reaches end.
func (p *Partition) waitCommitted(ctx context.Context, end int64) error {
	for {
		o := p.log.Offsets()
		if o.HighWatermark >= end {
			return nil
		}
		if err := p.log.Wait(ctx, o.HighWatermark, o.LogEnd); err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return api.Errorf(api.CodeRequestTimedOut, "%s: not replicated to the ISR in time; the write may still commit", p)
			}
			return err
		}
	}
}

// Status describes the partition for the internal API.
func (p *Partition) Status() brokerapi.PartitionStatus {
	p.mu.RLock()
	leader := p.state.Leader == p.self
	p.mu.RUnlock()
	o := p.log.Offsets()
	st := brokerapi.PartitionStatus{Partition: p.ID, Leader: leader, Positions: brokerapi.Positions{
		LogStartOffset: o.LogStart, HighWatermark: o.HighWatermark, LogEndOffset: o.LogEnd,
	}}
	if err := p.log.Err(); err != nil {
		st.Error = err.Error()
	}
	return st
}

// isReplica reports whether broker id is in the assignment.
func isReplica(replicas []int32, id int32) bool { return slices.Contains(replicas, id) }
