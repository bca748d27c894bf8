package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
)

// GroupConsumerOptions configure a GroupConsumer. Topics is required; other
// zero fields take the defaults stated.
type GroupConsumerOptions struct {
	// Topics are the topics the member consumes.
	Topics []string
	// InstanceID makes the member static: a later join with the same id
	// (this process restarted) takes the member and its partitions over
	// without a rebalance, and fences this one (FENCED_INSTANCE_ID).
	InstanceID string
	// SessionTimeout is how long the coordinator keeps the member without a
	// poll, commit or heartbeat (1 s to 5 min). Default: the server's 30 s.
	SessionTimeout time.Duration
	// AutoOffsetReset is where a partition without a committed offset
	// starts: api.ResetEarliest (the server's default), api.ResetLatest or
	// api.ResetNone (NO_OFFSET_FOR_PARTITION instead).
	AutoOffsetReset string
	// AutoCommit makes each poll commit the positions the previous poll
	// ended at, and Close commit the last poll's: records count as
	// processed once the next Poll (or Close) is called. Default off: call
	// Commit.
	AutoCommit bool
	// Assignor is api.AssignorUniform (the server's default) or api.AssignorRange.
	Assignor string
	// MaxRecords and MaxBytes bound a poll; zero takes the server's
	// defaults (500 records, 1 MiB).
	MaxRecords int
	MaxBytes   int64
	// MaxWait is how long a poll waits for records when there are none.
	// Default 5 s; negative: answer at once.
	MaxWait time.Duration
	// Rejoin makes Poll join again, as a new member, when the coordinator
	// no longer knows this one (UNKNOWN_MEMBER_ID: the session expired).
	// The new member starts from the committed offsets, so records polled
	// but not committed are delivered again. Default off: Poll returns the error.
	Rejoin bool
	// Raw makes Poll read the records as stored (PollGroupBatches): the
	// batch's Partitions hold each partition's batches and Records is
	// empty. The cheapest way to read a group, for a caller that wants
	// bytes; MaxRecords then bounds each partition's share, at whole
	// batches.
	Raw bool
}

// GroupBatch is what one poll returned: the records (from any of the
// member's partitions) and the cursor naming the positions after them,
// which Commit takes.
type GroupBatch struct {
	Records []api.GroupRecord
	Cursor  string
	// MemberEpoch is the member's epoch when the records were read: the
	// epoch to commit explicit offsets of these records at.
	MemberEpoch int32
	// Grants are the member's partitions as of this poll, each with its
	// fence (api.PartitionGrant): every record of the batch is from one of
	// them. A store written exactly once claims a partition with its fence
	// when the grant is new or its fence grew.
	Grants []api.PartitionGrant
	// Partitions are the raw batches of a Raw consumer's poll, one entry
	// per partition that returned bytes.
	Partitions []PartitionBatches
}

// GroupConsumer is a consumer-group member over HTTP: Join, then Poll and
// Commit in a loop, then Close.
//
// Polls renew the member's session; while the member is idle (no poll or
// commit for a heartbeat interval, which the coordinator chooses) a
// background goroutine sends heartbeats instead. That goroutine is started
// by Join and stopped, and waited for, by Close.
//
// Poll keeps the last cursor and passes it to the next poll: after a lost
// answer or a failed poll the same cursor is sent again, and the server
// returns the same records, so nothing is skipped. The methods are safe for
// concurrent use; polls are serialized.
type GroupConsumer struct {
	c     *Client
	group string
	opts  GroupConsumerOptions

	// pollMu serializes Join and Poll (a poll's cursor is the previous
	// poll's answer).
	pollMu sync.Mutex

	// mu guards the fields below; never held across a request.
	mu         sync.Mutex
	member     string // "" before Join and after the member was lost
	epoch      int32
	assignment []api.TopicPartition
	cursor     string        // the last poll's cursor, the next poll's
	interval   time.Duration // heartbeat interval from the last join
	lost       error         // why the member was lost (UNKNOWN_MEMBER_ID), if it was
	fatal      error         // FENCED_INSTANCE_ID: a newer instance took over
	closed     bool
	hbStarted  bool

	// lastContact is when a request renewed the session (unix ns): the
	// heartbeat loop sends only when it is an interval old.
	lastContact atomic.Int64
	// hbCancel ends the heartbeat loop's context; hbDone is closed when the
	// loop has returned.
	hbCancel context.CancelFunc
	hbDone   chan struct{}
}

// NewGroupConsumer returns a member of group that has not joined yet. It
// makes no request.
func (c *Client) NewGroupConsumer(group string, opts GroupConsumerOptions) *GroupConsumer {
	if opts.MaxWait == 0 {
		opts.MaxWait = 5 * time.Second
	}
	return &GroupConsumer{c: c, group: group, opts: opts, hbDone: make(chan struct{})}
}

// Join joins the group and starts the heartbeat goroutine. It blocks for
// the join request (retried as JoinGroup says). Errors: those of JoinGroup;
// ErrClosed after Close; an error when already joined.
func (g *GroupConsumer) Join(ctx context.Context) error {
	g.pollMu.Lock()
	defer g.pollMu.Unlock()
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		return ErrClosed
	case g.member != "":
		g.mu.Unlock()
		return fmt.Errorf("client: group %q: already joined as %q", g.group, g.member)
	}
	g.mu.Unlock()
	if len(g.opts.Topics) == 0 {
		return &Error{Code: api.CodeInvalidRequest, Message: "a group consumer needs topics"}
	}
	return g.joinLocked(ctx)
}

// joinLocked joins (or joins again) and, the first time, starts the
// heartbeat loop. Called with pollMu held.
func (g *GroupConsumer) joinLocked(ctx context.Context) error {
	res, err := g.c.JoinGroup(ctx, g.group, api.JoinGroupRequest{
		Topics: g.opts.Topics, InstanceID: g.opts.InstanceID, SessionTimeoutMs: g.opts.SessionTimeout.Milliseconds(),
		AutoOffsetReset: g.opts.AutoOffsetReset, AutoCommit: g.opts.AutoCommit, Assignor: g.opts.Assignor,
	})
	if err != nil {
		if errors.Is(err, &api.Error{Code: api.CodeFencedInstanceID}) {
			g.setFatal(err)
		}
		return err
	}
	g.touch()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		// Close ran meanwhile and found no member to remove: remove this
		// one, so it does not hold partitions until its session expires.
		g.mu.Unlock()
		_ = g.c.LeaveGroup(ctx, g.group, res.MemberID)
		g.mu.Lock()
		return ErrClosed
	}
	g.member, g.epoch, g.assignment, g.lost = res.MemberID, res.MemberEpoch, res.Assignment, nil
	g.interval = max(time.Duration(res.HeartbeatIntervalMs)*time.Millisecond, 100*time.Millisecond)
	// The first poll sends the join's cursor, which names no positions: it
	// reads from the committed offsets, and so does a retry of it. Without
	// a cursor, a retry after a lost answer would start where the
	// coordinator remembered that answer ending, skipping its records.
	g.cursor = res.Cursor
	if g.cursor == "" {
		g.cursor = api.Cursor{Epoch: res.MemberEpoch}.Encode()
	}
	if !g.hbStarted {
		g.hbStarted = true
		hctx, cancel := context.WithCancel(context.Background())
		g.hbCancel = cancel
		go g.heartbeatLoop(hctx)
	}
	return nil
}

// Poll returns the next records of the member's partitions, blocking up to
// MaxWait when there are none (then the batch is empty, not an error). The
// batch's cursor names the positions after its records: pass it to Commit
// once they are processed.
//
// A failed poll is retried with the same cursor (within the Client's
// RetryPolicy); when it still fails, the next Poll sends that cursor again.
// Errors: UNKNOWN_MEMBER_ID (unless Rejoin), FENCED_INSTANCE_ID (final),
// NO_OFFSET_FOR_PARTITION, ErrClosed, a failed rejoin's error.
func (g *GroupConsumer) Poll(ctx context.Context) (GroupBatch, error) {
	g.pollMu.Lock()
	defer g.pollMu.Unlock()
	for rejoined := false; ; rejoined = true {
		member, cursor, err := g.memberForPoll(ctx)
		if err != nil {
			return GroupBatch{}, err
		}
		g.touch()
		b, assignment, err := g.pollOnce(ctx, member, cursor)
		if err == nil {
			g.touch()
			g.mu.Lock()
			if g.member == member {
				g.cursor, g.epoch, g.assignment = b.Cursor, b.MemberEpoch, assignment
			}
			g.mu.Unlock()
			return b, nil
		}
		g.classify(member, err)
		if !rejoined && g.opts.Rejoin && errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
			continue
		}
		return GroupBatch{}, err
	}
}

// pollOnce sends one poll, raw or JSON as the options say.
func (g *GroupConsumer) pollOnce(ctx context.Context, member, cursor string) (GroupBatch, []api.TopicPartition, error) {
	po := PollOptions{MaxRecords: g.opts.MaxRecords, MaxBytes: g.opts.MaxBytes, MaxWait: max(g.opts.MaxWait, 0), Cursor: cursor}
	if g.opts.Raw {
		res, err := g.c.PollGroupBatches(ctx, g.group, member, po)
		return GroupBatch{Cursor: res.Cursor, MemberEpoch: res.MemberEpoch, Grants: res.Grants, Partitions: res.Partitions}, res.Assignment, err
	}
	res, err := g.c.PollGroup(ctx, g.group, member, po)
	return GroupBatch{Records: res.Records, Cursor: res.Cursor, MemberEpoch: res.MemberEpoch, Grants: res.Grants}, res.Assignment, err
}

// memberForPoll returns the member and cursor to poll with, joining again
// first when the member was lost and Rejoin is set. Called with pollMu held.
func (g *GroupConsumer) memberForPoll(ctx context.Context) (string, string, error) {
	g.mu.Lock()
	member, cursor, lost, fatal, closed := g.member, g.cursor, g.lost, g.fatal, g.closed
	g.mu.Unlock()
	switch {
	case closed:
		return "", "", ErrClosed
	case fatal != nil:
		return "", "", fatal
	case member != "":
		return member, cursor, nil
	case lost == nil:
		return "", "", fmt.Errorf("client: group %q: Poll before Join", g.group)
	case !g.opts.Rejoin:
		return "", "", lost
	}
	if err := g.joinLocked(ctx); err != nil {
		return "", "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.member, g.cursor, nil
}

// Commit commits the positions a poll's cursor names (usually the batch's
// Cursor, once its records are processed) and returns them. A cursor
// without positions (a poll of a member with no partitions) commits
// nothing and makes no request. The cursor's own member epoch is checked
// against the partitions' ownership. Retried on every retriable failure.
// Errors: FENCED_MEMBER_EPOCH (a partition moved to another member; its
// records will be delivered there), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
// INVALID_REQUEST for a cursor this API did not issue, ErrClosed.
func (g *GroupConsumer) Commit(ctx context.Context, cursor string) ([]api.PartitionOffset, error) {
	c, err := api.DecodeCursor(cursor)
	if err != nil {
		return nil, &Error{Code: api.CodeInvalidRequest, Message: err.Error()}
	}
	if len(c.Positions) == 0 {
		return nil, nil
	}
	return g.commit(ctx, api.CommitRequest{Cursor: cursor})
}

// CommitOffsets commits explicit positions (for each partition, the offset
// of the next record to read) at memberEpoch, the MemberEpoch of the batch
// the records came from: the coordinator refuses it for a partition taken
// away since, even if it came back. Errors and retries as for Commit.
func (g *GroupConsumer) CommitOffsets(ctx context.Context, memberEpoch int32, offsets []api.PartitionOffset) ([]api.PartitionOffset, error) {
	if len(offsets) == 0 {
		return nil, nil
	}
	return g.commit(ctx, api.CommitRequest{MemberEpoch: memberEpoch, Offsets: offsets})
}

// commit sends req as the member; a cursor commit leaves MemberEpoch 0, so
// the coordinator checks the cursor's own epoch.
func (g *GroupConsumer) commit(ctx context.Context, req api.CommitRequest) ([]api.PartitionOffset, error) {
	g.mu.Lock()
	member, closed, fatal, lost := g.member, g.closed, g.fatal, g.lost
	g.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case fatal != nil:
		return nil, fatal
	case member == "" && lost != nil:
		return nil, lost
	case member == "":
		return nil, fmt.Errorf("client: group %q: Commit before Join", g.group)
	}
	req.MemberID = member
	g.touch()
	res, err := g.c.CommitOffsets(ctx, g.group, req)
	if err != nil {
		g.classify(member, err)
		return nil, err
	}
	g.touch()
	return res.Committed, nil
}

// classify records what a failed request says about the member: gone
// (UNKNOWN_MEMBER_ID) or taken over (FENCED_INSTANCE_ID).
func (g *GroupConsumer) classify(member string, err error) {
	switch {
	case errors.Is(err, &api.Error{Code: api.CodeFencedInstanceID}):
		g.setFatal(err)
	case errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}):
		g.mu.Lock()
		if g.member == member {
			g.member, g.lost = "", err
		}
		g.mu.Unlock()
	}
}

func (g *GroupConsumer) setFatal(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fatal == nil {
		g.fatal = err
	}
	g.member = ""
}

func (g *GroupConsumer) touch() { g.lastContact.Store(time.Now().UnixNano()) }

// heartbeatLoop runs from the first Join until Close: whenever the member
// has gone a heartbeat interval without a request, it sends a heartbeat,
// which also brings news of a changed assignment. A failed heartbeat is
// tried again at the next interval; a member the coordinator no longer
// knows is marked lost for Poll to deal with.
func (g *GroupConsumer) heartbeatLoop(ctx context.Context) {
	defer close(g.hbDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		member, interval := g.member, g.interval
		g.mu.Unlock()
		idle := time.Since(time.Unix(0, g.lastContact.Load()))
		if member == "" || idle < interval {
			t.Reset(max(interval-idle, 10*time.Millisecond))
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		res, err := g.c.Heartbeat(hctx, g.group, member)
		cancel()
		switch {
		case err == nil:
			g.touch()
			g.mu.Lock()
			if g.member == member {
				g.epoch, g.assignment = res.MemberEpoch, res.Assignment
			}
			g.mu.Unlock()
		case ctx.Err() == nil:
			g.classify(member, err)
		}
		t.Reset(interval)
	}
}

// MemberID is the member's id, "" before Join and after the member was lost.
func (g *GroupConsumer) MemberID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.member
}

// MemberEpoch is the member's epoch as of the last join, poll or heartbeat.
func (g *GroupConsumer) MemberEpoch() int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// Assignment is the member's partitions as of the last join, poll or
// heartbeat (a copy).
func (g *GroupConsumer) Assignment() []api.TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.assignment)
}

// Cursor is the last poll's cursor: the positions after the records
// returned so far, and where the next poll reads from.
func (g *GroupConsumer) Cursor() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cursor
}

// Seek makes the next poll read the named partitions from the given
// offsets: it rewrites the positions of the last poll's cursor, keeping the
// cursor's member epoch. The coordinator trusts a position only for a
// partition the member has held since that epoch, so Seek is for
// partitions in the last batch's Grants; for one that moved meanwhile the
// next poll starts at the committed offset instead. Call it between polls:
// a poll in flight keeps the cursor it was sent with.
func (g *GroupConsumer) Seek(positions []api.PartitionOffset) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := api.DecodeCursor(g.cursor)
	if err != nil {
		return &Error{Code: api.CodeInvalidRequest, Message: err.Error()}
	}
	for _, p := range positions {
		if p.Offset < 0 {
			return &Error{Code: api.CodeInvalidOffset, Message: fmt.Sprintf("seek %s/%d to %d", p.Topic, p.Partition, p.Offset)}
		}
		i := slices.IndexFunc(c.Positions, func(q api.PartitionOffset) bool {
			return q.Topic == p.Topic && q.Partition == p.Partition
		})
		if i < 0 {
			c.Positions = append(c.Positions, p)
		} else {
			c.Positions[i].Offset = p.Offset
		}
	}
	g.cursor = c.Encode()
	return nil
}

// Close ends the membership. Order: no new polls or commits; with
// AutoCommit, commit the last poll's positions (the records returned are
// taken as processed); stop the heartbeat goroutine and wait for it, so no
// heartbeat follows the leave; leave the group, so the partitions move at
// once rather than when the session expires. It blocks for those requests,
// within ctx. A second Close returns nil. Errors: the commit's or the
// leave's (UNKNOWN_MEMBER_ID is not one: the member is gone either way).
func (g *GroupConsumer) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	member, cursor, started := g.member, g.cursor, g.hbStarted
	g.mu.Unlock()

	var errs []error
	if g.opts.AutoCommit && member != "" {
		if c, err := api.DecodeCursor(cursor); err == nil && len(c.Positions) > 0 {
			if _, err := g.c.CommitOffsets(ctx, g.group, api.CommitRequest{MemberID: member, Cursor: cursor}); err != nil {
				errs = append(errs, fmt.Errorf("committing the last poll: %w", err))
			}
		}
	}
	if started {
		g.hbCancel()
		<-g.hbDone
	}
	if member != "" {
		if err := g.c.LeaveGroup(ctx, g.group, member); err != nil && !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
			errs = append(errs, fmt.Errorf("leaving: %w", err))
		}
	}
	return errors.Join(errs...)
}
