package replica

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
)

// StreamConfig describes one replication stream: this broker following one
// leader, for every partition it follows there.
type StreamConfig struct {
	Self     int32
	LeaderID int32
	// LeaderAddr resolves the leader's address before each request (false:
	// not registered now; the stream waits).
	LeaderAddr func() (string, bool)
	Client     *brokerapi.Client
	// Truncator runs the epoch truncations before a partition joins.
	// Required; the stream does not close it.
	Truncator *Truncator
	// MaxBytes bounds an answer's data; default 16 MiB. PartitionMaxBytes
	// bounds each partition's; default 4 MiB. Batches come whole: one larger
	// than both still comes, alone.
	MaxBytes          int64
	PartitionMaxBytes int64
	// MaxWait is the long-poll bound of a fetch; default 500 ms (Kafka's
	// replica.fetch.wait.max.ms). The leader's ISR clock ticks with each
	// fetch, so it must stay well below replica.lag.time.max.ms.
	MaxWait time.Duration
	// PartitionBackoff is a partition's first pause out of the session
	// after an error; each error in a row doubles it, up to 1 s. Default
	// 20 ms.
	PartitionBackoff time.Duration
	// Recover, when set, runs the stream's loop noting a panic in it; the
	// loop starts again a second later when it panicked.
	Recover func(where string, f func()) bool
	Logger  *slog.Logger
}

// StreamPartition is a partition following the stream's leader in one
// leader epoch.
type StreamPartition struct {
	Topic       string
	Partition   int32
	LeaderEpoch int32
	Log         *commitlog.Log
}

// Stream is one replication stream: one goroutine that fetches every
// partition this broker follows on one leader with one long poll, inside a
// fetch session (brokerapi.ReplicaFetchRequest), so an idle partition costs
// neither a goroutine, nor a request, nor bytes on the wire. A partition
// joins (Add) once its epoch truncation, on the Truncator, agreed with the
// leader's lineage, and leaves (Remove) on a role change. The broker owns
// streams (one per leader) and closes them.
//
// Per partition, as the leader answers:
//   - OFFSET_OUT_OF_RANGE: agree on the lineage again, after checking the
//     leader's log start (resetIfBehind);
//   - CORRUPT_RECORD (from the leader, or its batches do not continue the
//     local log): agree on the lineage again;
//   - a local STORAGE_ERROR: the partition stops (its log is read-only);
//   - anything else (NOT_LEADER, FENCED_LEADER_EPOCH, …): the partition
//     leaves the session and comes back after a backoff, or with the next
//     metadata that names it a new leader or epoch.
//
// A partition that joins, or becomes fetchable, while a fetch waits asks
// the leader to end that long poll (wakeLeader), so it is named in the
// next request at once rather than after MaxWait.
//
// Each of these takes the partition out of the session for at least a
// backoff (PartitionBackoff, doubling to 1 s), so one partition's error, which ends the
// leader's long poll at once, never makes the stream spin.
type Stream struct {
	cfg StreamConfig
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // cap 1: a partition joined or became fetchable

	mu    sync.Mutex // guards parts; taken before member.mu
	parts map[brokerapi.TopicPartition]*member

	// The session as the leader holds it; only the stream's goroutine
	// touches these.
	sessionID    int32
	sessionEpoch int32
	session      map[brokerapi.TopicPartition]sessionEntry
	buf          []byte // the answers' data, shared by every partition
}

// sessionEntry is a partition as the leader's session holds it.
type sessionEntry struct {
	m      *member
	gen    uint64
	offset int64
}

// memberState is where a partition of the stream stands.
type memberState int

const (
	truncating memberState = iota // its truncation is queued or running
	fetching                      // in the session
	waiting                       // out of the session until retryAt, then after
	stopped                       // its log failed; until it leaves
)

// member is one partition of the stream. mu guards the fields below it and
// is held while the stream, or a truncation on its behalf, changes the log:
// once Remove has set left under it, nothing touches the log again.
type member struct {
	sp     StreamPartition
	tp     brokerapi.TopicPartition
	ctx    context.Context // ends when it leaves
	cancel context.CancelFunc

	mu        sync.Mutex
	left      bool
	state     memberState
	after     memberState // the state waiting leads to
	retryAt   time.Time
	gen       uint64 // counts the times it became fetching
	needReset bool   // check the leader's log start before truncating
	leaderHW  int64  // -1 until an answer named it
	backoff   backoff
}

// NewStream starts a stream with no partitions.
func NewStream(cfg StreamConfig) *Stream {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 16 << 20
	}
	if cfg.PartitionMaxBytes == 0 {
		cfg.PartitionMaxBytes = 4 << 20
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.PartitionBackoff == 0 {
		cfg.PartitionBackoff = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stream{cfg: cfg, log: cfg.Logger.With("leader", cfg.LeaderID), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
		parts: map[brokerapi.TopicPartition]*member{}, session: map[brokerapi.TopicPartition]sessionEntry{}}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			if cfg.Recover == nil {
				s.run()
				return
			}
			if !cfg.Recover("replication stream", s.run) {
				return
			}
			s.resetSession()
			sleepCtx(ctx, time.Second)
		}
	}()
	return s
}

// Add makes sp join the stream once its truncation agreed with the leader's
// lineage; a partition already in the stream in another epoch is replaced
// (Remove first). It does not block on the network.
func (s *Stream) Add(sp StreamPartition) {
	tp := brokerapi.TopicPartition{Topic: sp.Topic, Partition: sp.Partition}
	s.mu.Lock()
	old := s.parts[tp]
	s.mu.Unlock()
	if old != nil {
		if old.sp.LeaderEpoch == sp.LeaderEpoch && old.sp.Log == sp.Log {
			return
		}
		s.Remove(sp.Topic, sp.Partition)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	m := &member{sp: sp, tp: tp, ctx: ctx, cancel: cancel, state: truncating, leaderHW: -1, backoff: newBackoffFrom(s.cfg.PartitionBackoff)}
	s.mu.Lock()
	s.parts[tp] = m
	s.mu.Unlock()
	s.truncate(m)
}

// Remove takes a partition out of the stream. When it returns, neither the
// stream nor a truncation changes the partition's log any more.
func (s *Stream) Remove(topic string, partition int32) {
	tp := brokerapi.TopicPartition{Topic: topic, Partition: partition}
	s.mu.Lock()
	m := s.parts[tp]
	delete(s.parts, tp)
	s.mu.Unlock()
	if m == nil {
		return
	}
	m.cancel()
	m.mu.Lock() // waits for an append or a truncation step under way
	m.left = true
	m.mu.Unlock()
	s.wake()
}

// Len is the number of partitions in the stream.
func (s *Stream) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts)
}

// Close stops the stream: its goroutine ends, and no partition's log is
// changed on its behalf after it returns.
func (s *Stream) Close() {
	s.cancel()
	<-s.done
	s.mu.Lock()
	parts := s.parts
	s.parts = map[brokerapi.TopicPartition]*member{}
	s.mu.Unlock()
	for _, m := range parts {
		m.cancel()
		m.mu.Lock()
		m.left = true
		m.mu.Unlock()
	}
}

func (s *Stream) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the stream's loop: build the request from the partitions that
// fetch, long-poll the leader, apply the answer.
func (s *Stream) run() {
	bo := newBackoff()
	for s.ctx.Err() == nil {
		req, wake, ok := s.nextRequest(time.Now())
		if !ok {
			s.idle(wake)
			continue
		}
		addr, known := s.cfg.LeaderAddr()
		if !known {
			bo.wait(s.ctx)
			continue
		}
		fctx, cancel := context.WithTimeout(s.ctx, s.cfg.MaxWait+30*time.Second)
		var woke chan struct{}
		if req.SessionEpoch > 0 {
			woke = make(chan struct{})
			go s.wakeLeader(fctx, addr, req.SessionID, woke)
		}
		ans, err := s.cfg.Client.ReplicaFetch(fctx, addr, req, &s.buf)
		cancel()
		if woke != nil {
			<-woke
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.log.Debug("replication fetch failed; starting a new session", "err", err, "session", req.SessionID, "epoch", req.SessionEpoch)
			s.resetSession()
			bo.wait(s.ctx)
			continue
		}
		bo.reset()
		s.took(req, ans.SessionID)
		for i := range ans.Partitions {
			s.apply(&ans.Partitions[i])
		}
		if int64(cap(s.buf)) > s.cfg.MaxBytes {
			// An outsized batch (batches come whole) is not kept for
			// the life of the stream.
			s.buf = nil
		}
	}
}

// wakeLeader runs beside one fetch of session id (owned by run, which
// waits for done): when a partition joins or becomes fetchable before the
// fetch ends (ctx ends with it), it asks the leader to end the long poll,
// so the next request names the partition without waiting out MaxWait.
// One wake per fetch; an error costs nothing but that wait.
func (s *Stream) wakeLeader(ctx context.Context, addr string, id int32, done chan<- struct{}) {
	defer close(done)
	select {
	case <-s.kick:
	case <-ctx.Done():
		return
	}
	// The kick is spent here: the next request is built after this fetch
	// and sees whatever changed. The wake's own answer is waited for (not
	// cut off with the fetch), so its connection is kept.
	wctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	if err := s.cfg.Client.WakeReplicaFetch(wctx, addr, s.cfg.Self, id); err != nil && s.ctx.Err() == nil {
		s.log.Debug("could not end the leader's long poll", "err", err, "session", id)
	}
}

// idle waits for a partition to join or become fetchable, or until wake
// (zero: no partition waits on a time).
func (s *Stream) idle(wake time.Time) {
	var timer <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(time.Until(wake))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-s.kick:
	case <-timer:
	case <-s.ctx.Done():
	}
}

// resetSession forgets the session: the next request starts a new one,
// naming this one for the leader to drop.
func (s *Stream) resetSession() {
	s.sessionEpoch = 0
	clear(s.session)
}

// nextRequest is the request the partitions call for now: in a new session
// every fetching partition, else those whose offset or epoch the leader's
// session does not hold yet, and those that left it. ok is false when no
// partition fetches; wake is then the earliest time a waiting one may.
func (s *Stream) nextRequest(now time.Time) (req brokerapi.ReplicaFetchRequest, wake time.Time, ok bool) {
	type want struct {
		m   *member
		gen uint64
	}
	fetch := map[brokerapi.TopicPartition]want{}
	var truncate []*member
	s.mu.Lock()
	for tp, m := range s.parts {
		m.mu.Lock()
		if m.state == waiting {
			if now.Before(m.retryAt) {
				if wake.IsZero() || m.retryAt.Before(wake) {
					wake = m.retryAt
				}
			} else if m.after == truncating {
				m.state = truncating
				truncate = append(truncate, m)
			} else {
				m.state = fetching
				m.gen++
			}
		}
		if m.state == fetching {
			fetch[tp] = want{m, m.gen}
		}
		m.mu.Unlock()
	}
	s.mu.Unlock()
	for _, m := range truncate {
		s.truncate(m)
	}
	if len(fetch) == 0 {
		// Nothing to fetch: drop the session here; the next one names
		// it for the leader to drop.
		s.resetSession()
		return req, wake, false
	}
	req = brokerapi.ReplicaFetchRequest{ReplicaID: s.cfg.Self, SessionID: s.sessionID, SessionEpoch: s.sessionEpoch,
		MaxWait: s.cfg.MaxWait, MinBytes: 1, MaxBytes: int32(s.cfg.MaxBytes), PartitionMaxBytes: int32(s.cfg.PartitionMaxBytes)}
	if s.sessionEpoch > 0 {
		for tp := range s.session {
			if _, ok := fetch[tp]; !ok {
				req.Removed = append(req.Removed, tp)
			}
		}
	}
	for tp, w := range fetch {
		off := w.m.sp.Log.Offsets().LogEnd
		if e, ok := s.session[tp]; ok && s.sessionEpoch > 0 && e.m == w.m && e.gen == w.gen && e.offset == off {
			continue
		}
		req.Changed = append(req.Changed, brokerapi.ReplicaFetchPartition{TopicPartition: tp, FetchOffset: off, LeaderEpoch: w.m.sp.LeaderEpoch})
	}
	return req, wake, true
}

// took records what the leader's session holds after req was answered.
func (s *Stream) took(req brokerapi.ReplicaFetchRequest, sessionID int32) {
	if req.SessionEpoch == 0 {
		clear(s.session)
	}
	for _, tp := range req.Removed {
		delete(s.session, tp)
	}
	s.mu.Lock()
	for _, c := range req.Changed {
		// The leader's session holds every partition named. One that left
		// the stream, or was replaced (another leader epoch), since the
		// request was built is held with no member: the next request
		// removes it or names it again, so that its error cannot end
		// every long poll.
		e := sessionEntry{offset: c.FetchOffset}
		if m := s.parts[c.TopicPartition]; m != nil && m.sp.LeaderEpoch == c.LeaderEpoch {
			m.mu.Lock()
			e.m, e.gen = m, m.gen
			m.mu.Unlock()
		}
		s.session[c.TopicPartition] = e
	}
	s.mu.Unlock()
	s.sessionID = sessionID
	s.sessionEpoch++
	if s.sessionEpoch <= 0 {
		s.sessionEpoch = 1
	}
}

// apply takes one partition's answer: its data is appended when it
// continues the log where the session fetched it, and the follower HW is
// the leader's, never past the local log end.
func (s *Stream) apply(a *brokerapi.ReplicaFetchedPartition) {
	e, ok := s.session[a.TopicPartition]
	if !ok {
		return
	}
	m := e.m
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left || m.state != fetching || m.gen != e.gen {
		return
	}
	if a.Err != nil {
		s.failLocked(m, a.Err, "leader")
		return
	}
	l := m.sp.Log
	if len(a.Data) > 0 {
		if l.Offsets().LogEnd != e.offset {
			return // fetched for an older log end; the next request says where it is now
		}
		if _, err := l.AppendReplica(a.Data); err != nil {
			s.failLocked(m, err, "local")
			return
		}
	}
	m.leaderHW = a.HighWatermark
	if m.leaderHW >= 0 {
		l.SetHighWatermark(min(m.leaderHW, l.Offsets().LogEnd))
	}
	m.backoff.reset()
}

// failLocked takes a partition out of the session after an error, from the
// leader's answer or from its own log (where).
func (s *Stream) failLocked(m *member, err error, where string) {
	log := s.log.With("partition", m.sp.Topic, "p", m.sp.Partition, "epoch", m.sp.LeaderEpoch)
	m.state, m.after = waiting, fetching
	switch {
	case where == "local" && errors.Is(err, api.ErrStorage):
		log.Error("follower stops: local disk error", "err", err)
		m.state = stopped
		return
	case errors.Is(err, api.ErrOffsetOutOfRange):
		// Either our log end is past the leader's (agree on the lineage
		// again) or below its log start (start over where it starts).
		log.Debug("fetch offset out of range; agreeing on the lineage again", "err", err)
		m.after, m.needReset = truncating, true
	case errors.Is(err, api.ErrCorruptRecord):
		// The leader's batches do not continue our log: our lineage
		// diverged after all.
		log.Warn("leader's batches do not continue the local log; truncating again", "err", err)
		m.after = truncating
	default:
		log.Debug("partition fetch failed; retrying", "err", err, "where", where)
	}
	m.retryAt = time.Now().Add(m.backoff.next())
}

// truncate queues m's truncation on the Truncator; when it agreed with the
// leader's lineage, m fetches.
func (s *Stream) truncate(m *member) {
	s.cfg.Truncator.Submit(m.ctx, func(ctx context.Context) {
		err := s.agree(ctx, m)
		m.mu.Lock()
		if m.left {
			m.mu.Unlock()
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("epoch truncation failed; retrying", "partition", m.sp.Topic, "p", m.sp.Partition, "err", err)
			}
			m.state, m.after = waiting, truncating
			m.retryAt = time.Now().Add(m.backoff.next())
		} else {
			m.state, m.needReset = fetching, false
			m.gen++
		}
		m.mu.Unlock()
		s.wake()
	})
}

// errLeft refuses a change to the log of a partition that left its stream.
var errLeft = errors.New("the partition left the replication stream")

// agree runs m's truncation: resetIfBehind first when the leader said the
// offset was out of range, then truncateToLeader.
func (s *Stream) agree(ctx context.Context, m *member) error {
	addr, ok := s.cfg.LeaderAddr()
	if !ok {
		return errors.New("the leader is not registered")
	}
	m.mu.Lock()
	reset := m.needReset
	m.mu.Unlock()
	cfg := lineage{topic: m.sp.Topic, partition: m.sp.Partition, leaderEpoch: m.sp.LeaderEpoch, log: m.sp.Log,
		client: s.cfg.Client, addr: addr, guard: func(change func() error) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.left {
				return errLeft
			}
			return change()
		}}
	log := s.log.With("partition", m.sp.Topic, "p", m.sp.Partition, "epoch", m.sp.LeaderEpoch)
	if reset {
		if err := resetIfBehind(ctx, cfg, log); err != nil {
			return err
		}
	}
	return truncateToLeader(ctx, cfg, log)
}

// sleepCtx pauses for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
