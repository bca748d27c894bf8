package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
	"github.com/sluice-io/sluice/replica"
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

// partitionDeps is what partitions share with their broker.
type partitionDeps struct {
	self   int32
	client *brokerapi.Client
	log    *slog.Logger
	// peerAddr resolves a broker ID to the address to dial (nil: unknown).
	peerAddr func(id int32) (string, bool)
	// kickISR asks the ISR loop to look at this broker's leader partitions now.
	kickISR func()
	// inSyncable reports whether a broker's replica of a partition may
	// join its ISR: the broker is registered and does not report the
	// replica's log failed.
	inSyncable func(id int32, topic string, partition int32) bool
	// resign gives up a leadership this process did not win itself (see
	// Partition.applyState). It returns at once: it queues the hand-back for
	// the broker's hand-back loop (resign.go), taking only the queue's lock.
	resign func(p *Partition, st api.PartitionState, version int32)
	// recovering runs f, noting a panic in it (Broker.recovering), and
	// reports whether it panicked.
	recovering func(where string, f func()) bool
	// follow puts a partition on the replication stream to leader at
	// epoch (false: the leader is not registered); unfollow takes it off,
	// and returns once the stream no longer changes its log (streams.go).
	follow   func(p *Partition, leader, epoch int32) bool
	unfollow func(p *Partition, leader int32)
	// files is where every partition log's segment descriptors come from.
	files *commitlog.FilePool
	// logFailed tells the storage loop that a log turned read-only; it
	// returns at once (the log's lock is held).
	logFailed func()
	// lowSpace is the refusal of a leader append while the data
	// directory's free space is below its watermark, nil otherwise.
	lowSpace func() error
}

// Partition is one partition replica on this broker: its log and the role the
// controller gave it. As leader it tracks its followers (replica.Progress)
// and moves the HW; as follower it is one partition of the broker's
// replication stream to its leader (streams.go).
type Partition struct {
	Topic   string
	ID      int32
	topicID string
	log     *commitlog.Log
	// cfg is the topic's config; an altered config replaces it (setConfig).
	cfg  atomic.Pointer[api.TopicConfig]
	deps *partitionDeps
	tier partitionTier

	mu           sync.Mutex         // guards the fields below
	state        api.PartitionState // the last state applied
	stateVersion int32              // its znode version
	replicas     []int32
	fenced       bool              // the broker lost its coordinator session: act on nothing until a fresh state arrives
	fenceGen     uint64            // fence generation of the last fence (see manager); older states are not applied
	inherited    bool              // the first state this process applied has been looked at
	resignedAt   int32             // leader epoch this replica handed back (-1: none); it never leads at or below it
	progress     *replica.Progress // non-nil while leading
	epochStart   int64             // log end when this leadership began
	following    int32             // the leader whose stream carries this replica (-1: none)
	handingOver  int32             // leader epoch closed to writes for a controlled shutdown (-1: none; handover.go)
}

func newPartition(topic, topicID string, id int32, log *commitlog.Log, cfg api.TopicConfig, replicas []int32, deps *partitionDeps) *Partition {
	p := &Partition{Topic: topic, topicID: topicID, ID: id, log: log, deps: deps, replicas: replicas,
		state: api.PartitionState{Leader: -1, LeaderEpoch: -1}, stateVersion: -1, resignedAt: -1, following: -1, handingOver: -1}
	p.cfg.Store(&cfg)
	return p
}

// config is the topic's config as last applied. Callers read it once per
// decision, so one decision never mixes an old and a new config.
func (p *Partition) config() *api.TopicConfig { return p.cfg.Load() }

// setConfig applies an altered topic config: first to the log (sizes,
// retention, fsync policy), then to every later decision of the partition.
func (p *Partition) setConfig(cfg api.TopicConfig) error {
	if err := p.log.Retune(logOptions(cfg)); err != nil {
		return err
	}
	p.cfg.Store(&cfg)
	return nil
}

func (p *Partition) String() string { return fmt.Sprintf("%s-%d", p.Topic, p.ID) }

// applyState takes a state read from the coordinator. Older states (lower
// epoch, or the same epoch at a lower znode version) are ignored, and so are
// states read at a live generation (gen) older than the partition's last
// fence: they may predate the disconnect that fenced it. A new leader or
// epoch changes the role; the same leadership with another ISR only updates
// the ISR. Callers are serialized (manager.reconcile): the role is stopped and
// started outside the lock, and two calls at once could both start one.
func (p *Partition) applyState(st api.PartitionState, version int32, gen uint64) {
	p.mu.Lock()
	if gen < p.fenceGen {
		p.mu.Unlock()
		return
	}
	// Older states are ignored: a lower leader epoch, a lower znode version
	// within one epoch, or one written by an older controller than the
	// state already applied for the same epoch.
	if st.LeaderEpoch < p.state.LeaderEpoch ||
		(st.LeaderEpoch == p.state.LeaderEpoch && (version < p.stateVersion || st.ControllerEpoch < p.state.ControllerEpoch)) {
		p.mu.Unlock()
		return
	}
	// The role is in place when this leadership's progress exists or the
	// replica is on its leader's stream; a follower that could not join (its
	// leader was not registered yet) joins with a later call of the same
	// state.
	running := st.Leader < 0 || (st.Leader == p.deps.self && p.progress != nil) || (st.Leader != p.deps.self && p.following >= 0)
	sameRole := st.LeaderEpoch == p.state.LeaderEpoch && st.Leader == p.state.Leader && !p.fenced && running
	p.state, p.stateVersion, p.fenced = st, version, false
	if sameRole {
		if p.progress != nil {
			p.progress.SetISR(st.ISR)
			p.advanceHWLocked()
		}
		p.mu.Unlock()
		return
	}
	old := p.following
	p.following, p.progress = -1, nil
	p.mu.Unlock()
	if old >= 0 {
		p.deps.unfollow(p, old) // outside the lock: the stream never takes it, but unfollow waits for an append under way
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state.LeaderEpoch != st.LeaderEpoch || p.state.Leader != st.Leader {
		return // a newer state was applied while the old follower stopped
	}
	self := p.deps.self
	if !p.inherited {
		p.inherited = true
		if st.Leader == self {
			// The state says we lead, but this process never won that
			// leadership: it is left from before a restart, and the log may
			// have lost its unsynced tail since (a power loss). Leading on it
			// would make followers truncate acknowledged records. Hand the
			// leadership back so the controller elects an ISR member that
			// kept everything; this replica rejoins as a follower.
			p.resignedAt = st.LeaderEpoch
			p.deps.resign(p, st, version) // queues it for the hand-back loop; takes only the queue's lock
			return
		}
	}
	switch {
	case st.Leader == self && st.LeaderEpoch <= p.resignedAt:
		return // handed back; waiting for the controller's election
	case st.Leader == self:
		if err := p.log.AssignEpoch(st.LeaderEpoch); err != nil {
			p.deps.log.Error("cannot record the new leader epoch", "partition", p.String(), "err", err)
			return
		}
		p.progress = replica.NewProgress(self, p.replicas, st.ISR, time.Now())
		p.epochStart = p.log.Offsets().LogEnd
		p.advanceHWLocked()
		p.deps.log.Info("leading", "partition", p.String(), "epoch", st.LeaderEpoch, "isr", st.ISR, "leo", p.epochStart)
	case st.Leader >= 0 && slices.Contains(p.replicas, self):
		if p.deps.follow(p, st.Leader, st.LeaderEpoch) {
			p.following = st.Leader
		}
	}
}

// leaderState returns the leader epoch and state znode version this replica
// leads with; ok is false when it does not lead (or is fenced).
func (p *Partition) leaderState() (epoch, version int32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.LeaderEpoch, p.stateVersion, p.leaderLocked() == nil
}

// waitStateNewerThan waits (up to 5 s) until a state newer than version is
// applied.
func (p *Partition) waitStateNewerThan(ctx context.Context, version int32) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		v := p.stateVersion
		p.mu.Unlock()
		if v > version {
			return nil
		}
		if time.Now().After(deadline) {
			return api.Errorf(api.CodeRequestTimedOut, "%s: no newer partition state arrived", p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// positions are the partition's offsets with the remote tier included: the
// log starts at the first remote segment when there is one.
func (p *Partition) positions() brokerapi.Positions {
	o := p.log.Offsets()
	pos := brokerapi.Positions{LogStartOffset: o.LogStart, LocalStartOffset: o.LogStart, HighWatermark: o.HighWatermark, LogEndOffset: o.LogEnd, RemoteEndOffset: -1}
	if start, end := p.tier.remoteBounds(); start >= 0 {
		pos.LogStartOffset = min(start, o.LogStart)
		pos.RemoteEndOffset = end
	}
	return pos
}

// fence stops the partition from acknowledging anything until a state read
// live at generation gen or later is applied (the coordinator session was
// lost: someone else may lead now).
func (p *Partition) fence(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fenced = true
	p.fenceGen = max(p.fenceGen, gen)
}

// stopRole takes the replica off its replication stream, for shutdown and
// deletion.
func (p *Partition) stopRole() {
	p.mu.Lock()
	f := p.following
	p.following, p.progress = -1, nil
	p.mu.Unlock()
	if f >= 0 {
		p.deps.unfollow(p, f)
	}
}

// advanceHWLocked moves the HW to the smallest LEO over the ISR.
func (p *Partition) advanceHWLocked() {
	if p.progress == nil {
		return
	}
	if hw, known := p.progress.HighWatermark(p.log.Offsets().LogEnd); known {
		p.log.SetHighWatermark(hw)
	}
}

// leaderLocked checks that this replica leads and is not fenced.
func (p *Partition) leaderLocked() error {
	if p.progress == nil || p.fenced || p.state.Leader != p.deps.self {
		return api.Errorf(api.CodeNotLeader, "broker %d does not lead %s (leader %d, epoch %d)", p.deps.self, p, p.state.Leader, p.state.LeaderEpoch)
	}
	return nil
}

// checkEpochLocked fences a request that names a leader epoch (-1: none named).
func (p *Partition) checkEpochLocked(requested int32) error {
	cur := p.state.LeaderEpoch
	switch {
	case requested < 0:
		return nil
	case requested < cur:
		return api.Errorf(api.CodeFencedLeaderEpoch, "%s: epoch %d is older than %d", p, requested, cur)
	case requested > cur:
		return api.Errorf(api.CodeUnknownLeaderEpoch, "%s: epoch %d is newer than %d", p, requested, cur)
	}
	return nil
}

// checkLeader is leaderLocked plus the epoch check, for read paths.
func (p *Partition) checkLeader(requestedEpoch int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.leaderLocked(); err != nil {
		return err
	}
	return p.checkEpochLocked(requestedEpoch)
}

// Produce appends raw batches as leader and waits for the acks asked for.
// requestedEpoch (-1: none) fences a sender routing on stale metadata.
func (p *Partition) Produce(ctx context.Context, batches []byte, acks Acks, requestedEpoch int32) (brokerapi.ProduceResult, error) {
	res, epoch, err := p.appendAsLeader(batches, acks, requestedEpoch)
	if err != nil {
		return res, err
	}
	if acks == AcksAll {
		if err := p.waitCommitted(ctx, epoch, res.LastOffset+1); err != nil {
			return res, err
		}
	}
	res.HighWatermark = p.log.Offsets().HighWatermark
	return res, nil
}

// appendAsLeader is Produce without the wait: the leader and epoch checks,
// min.insync.replicas for acks=all, and the append. It returns the epoch
// the batches were written in, for waitCommitted.
func (p *Partition) appendAsLeader(batches []byte, acks Acks, requestedEpoch int32) (brokerapi.ProduceResult, int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.leaderLocked(); err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	if err := p.checkEpochLocked(requestedEpoch); err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	if err := p.handingOverLocked(); err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	epoch := p.state.LeaderEpoch
	cfg := p.config()
	if acks == AcksAll && p.progress.ISRSize() < cfg.MinInsyncReplicas {
		isr := p.progress.ISR()
		return brokerapi.ProduceResult{}, 0, api.Errorf(api.CodeNotEnoughReplicas, "%s has %d in-sync replicas %v, min.insync.replicas is %d", p, len(isr), isr, cfg.MinInsyncReplicas)
	}
	if err := checkBatchTimes(batches, *cfg, time.Now().UnixMilli()); err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	if err := p.deps.lowSpace(); err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	info, err := p.log.Append(batches, epoch)
	if err != nil {
		return brokerapi.ProduceResult{}, 0, err
	}
	p.advanceHWLocked()
	return brokerapi.ProduceResult{BaseOffset: info.FirstOffset, LastOffset: info.LastOffset}, epoch, nil
}

// checkBatchTimes refuses, with INVALID_TIMESTAMP, a produced batch whose
// newest record is further ahead of this broker's clock (now, in ms) than
// message.timestamp.after.max.ms, or further behind than
// message.timestamp.before.max.ms, as Kafka's broker does: the gateway checks
// each JSON record against its own clock, but raw batches reach the broker as
// their producer wrote them. The header's maxTimestamp stands for the newest
// record; the log's validation then refuses a batch where it does not. So the
// future bound holds for every record, while the past bound refuses a batch
// only when its newest record is too old. LogAppendTime batches carry no
// producer timestamps.
func checkBatchTimes(buf []byte, cfg api.TopicConfig, now int64) error {
	_, err := recordbatch.Scan(buf, false, func(h recordbatch.Header, _ []byte) error {
		ts := h.MaxTimestamp
		switch {
		case h.LogAppendTime() || ts < 0:
			return nil // not a producer's timestamp, or refused by the log's validation
		case ts > now && ts-now > cfg.TimestampAfterMaxMs:
			return api.Errorf(api.CodeInvalidTimestamp, "batch timestamp %d is %d ms ahead of the broker's clock; %s is %d",
				ts, ts-now, api.ConfigTimestampAfterMaxMs, cfg.TimestampAfterMaxMs)
		case ts < now && now-ts > cfg.TimestampBeforeMaxMs:
			return api.Errorf(api.CodeInvalidTimestamp, "batch timestamp %d is %d ms behind the broker's clock; %s is %d",
				ts, now-ts, api.ConfigTimestampBeforeMaxMs, cfg.TimestampBeforeMaxMs)
		}
		return nil
	})
	return err
}

// waitCommitted blocks until the HW reaches end. It gives up, with an error
// that says the outcome is unknown, when this leadership ends first, and with
// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrinks below the minimum.
func (p *Partition) waitCommitted(ctx context.Context, epoch int32, end int64) error {
	minISR := p.config().MinInsyncReplicas
	for {
		o := p.log.Offsets()
		if o.HighWatermark >= end {
			// Committed, but to how many copies? When the ISR shrank below
			// the minimum the HW jumped without the copies acks=all promises
			// (Kafka's checkEnoughReplicasReachOffset).
			p.mu.Lock()
			isr := p.isrSizeLocked()
			p.mu.Unlock()
			if isr < minISR {
				return api.Errorf(api.CodeNotEnoughReplicasPost, "%s: written, but the ISR shrank to %d, below min.insync.replicas %d", p, isr, minISR)
			}
			return nil
		}
		p.mu.Lock()
		lost := p.progress == nil || p.fenced || p.state.LeaderEpoch != epoch
		isr := p.isrSizeLocked()
		p.mu.Unlock()
		if lost {
			return api.Errorf(api.CodeRequestTimedOut, "%s: leadership changed before the write was replicated; it may or may not be committed", p)
		}
		if isr < minISR {
			return api.Errorf(api.CodeNotEnoughReplicasPost, "%s: the ISR shrank to %d, below min.insync.replicas %d, before the write was replicated", p, isr, minISR)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := p.log.Wait(wctx, o.HighWatermark, o.LogEnd)
		cancel()
		if ctx.Err() != nil {
			return api.Errorf(api.CodeRequestTimedOut, "%s: not replicated to the ISR in time; the write may still commit", p)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// isrSizeLocked is the ISR size while leading, else 0.
func (p *Partition) isrSizeLocked() int {
	if p.progress == nil {
		return 0
	}
	return p.progress.ISRSize()
}

// onFollowerFetch records a follower's fetch position (the leader side of
// replication) and moves the HW. It returns the read limit for the fetch.
func (p *Partition) onFollowerFetch(id int32, offset int64, epoch int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.leaderLocked(); err != nil {
		return err
	}
	if err := p.checkEpochLocked(epoch); err != nil {
		return err
	}
	leo := p.log.Offsets().LogEnd
	if offset > leo {
		// The follower holds data the leader does not: it must truncate
		// first. Counting it as progress would move the HW over nothing.
		return api.Errorf(api.CodeOffsetOutOfRange, "%s: follower %d fetches at %d, past the leader's log end %d", p, id, offset, leo)
	}
	if !p.progress.OnFetch(id, offset, leo, time.Now()) {
		return api.Errorf(api.CodeInvalidRequest, "broker %d is not a replica of %s", id, p)
	}
	p.advanceHWLocked()
	if !p.progress.InISR(id) {
		p.deps.kickISR()
	}
	return nil
}

// isrChange computes the ISR this leader wants now, or ok false when it is
// the current one.
func (p *Partition) isrChange(now time.Time, maxLag time.Duration) (st api.PartitionState, version int32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leaderLocked() != nil {
		return st, 0, false
	}
	isr := p.progress.ISR()
	out := p.progress.Laggards(now, maxLag)
	var in []int32
	for _, id := range p.progress.Joiners(p.log.Offsets().HighWatermark, p.epochStart, now, maxLag) {
		// Only registered brokers whose replica has not failed and that
		// are not shutting down: the controller drops the others from the
		// ISR, and adding them back would flap it (a follower with a
		// failed log still fetches at its log end, which looks caught up;
		// a draining broker is on its way out).
		if p.deps.inSyncable(id, p.Topic, p.ID) {
			in = append(in, id)
		}
	}
	if len(out) == 0 && len(in) == 0 {
		return st, 0, false
	}
	next := make([]int32, 0, len(isr)+len(in))
	for _, id := range p.replicas { // keep replica order
		if (slices.Contains(isr, id) && !slices.Contains(out, id)) || slices.Contains(in, id) {
			next = append(next, id)
		}
	}
	st = p.state
	st.ISR = next
	return st, p.stateVersion, true
}

// applyISR records an ISR change this leader committed to the coordinator.
func (p *Partition) applyISR(st api.PartitionState, version int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.LeaderEpoch != p.state.LeaderEpoch || version <= p.stateVersion {
		return
	}
	p.state, p.stateVersion = st, version
	if p.progress != nil {
		p.progress.SetISR(st.ISR)
		p.advanceHWLocked()
	}
}

// Status describes the partition for the internal API.
func (p *Partition) Status() brokerapi.PartitionStatus {
	p.mu.Lock()
	leader := p.leaderLocked() == nil
	var followers []brokerapi.FollowerStatus
	if leader {
		for _, id := range p.replicas {
			if f := p.progress.Follower(id); f != nil {
				followers = append(followers, brokerapi.FollowerStatus{Broker: id, LogEndOffset: f.LEO})
			}
		}
	}
	p.mu.Unlock()
	st := brokerapi.PartitionStatus{Partition: p.ID, Leader: leader, Positions: p.positions(),
		LocalBytes: p.localBytes(), RemoteBytes: p.remoteBytes(), Followers: followers}
	if err := p.log.Err(); err != nil {
		st.Error = err.Error()
	}
	return st
}

// localBytes is the size of every local segment, the active one included.
func (p *Partition) localBytes() int64 { return p.log.BytesAbove(-1) }

// remoteBytes sums the log objects of the remote segments: 0 for a topic
// that does not tier, -1 when the list is not loaded here (followers, and a
// leader before its first tier pass).
func (p *Partition) remoteBytes() int64 {
	if !p.config().RemoteStorage {
		return 0
	}
	segs, loaded := p.tier.snapshot()
	if !loaded {
		return -1
	}
	var n int64
	for _, s := range segs {
		n += s.Size
	}
	return n
}

// isReplica reports whether broker id is in the assignment.
func isReplica(replicas []int32, id int32) bool { return slices.Contains(replicas, id) }
