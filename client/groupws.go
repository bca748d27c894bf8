package client

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// GroupWSOptions configure a GroupWS. Topics is required; other zero fields
// take the defaults stated.
type GroupWSOptions struct {
	// Topics are the topics the member consumes.
	Topics []string
	// InstanceID makes the member static: connecting again with the same id
	// takes the member and its partitions back without a rebalance.
	InstanceID string
	// SessionTimeout (1 s to 5 min). Default: the server's 30 s.
	SessionTimeout time.Duration
	// AutoOffsetReset is api.ResetEarliest (the server's default),
	// api.ResetLatest or api.ResetNone.
	AutoOffsetReset string
	// Assignor is api.AssignorUniform (the server's default) or api.AssignorRange.
	Assignor string
	// Buffer is how many records the server may send ahead of Next (the
	// credit), as for a Stream. Default 1000.
	Buffer int
	// ReadLimit is the largest frame accepted. Default DefaultReadLimit.
	ReadLimit int64
}

// GroupWS is a consumer-group member over a WebSocket (GET
// /v1/groups/{group}/ws): the connection is the member. The gateway joins
// for it, polls its partitions while it has credit, heartbeats while it has
// none, and leaves when the connection closes. Next returns records with
// their cursor and grants credit as they are consumed; Commit commits a
// cursor and waits for the answer.
//
// One reader goroutine, owned by the GroupWS and ended by Close, routes the
// server's frames: records to Next, commit answers to the Commit waiting
// for them (in the order the commits were sent), assignments to
// Assignment. So a Commit is answered even while nobody calls Next.
//
// A GroupWS does not reconnect: when the stream ends, Next returns why, and
// a new JoinGroupWS (with the same InstanceID, to keep the partitions)
// continues from the committed offsets. Next is not safe for concurrent
// use; the other methods are.
type GroupWS struct {
	c      *Client
	group  string
	buffer int
	ws     *wsConn

	// commitMu orders commits: a commit's waiter is queued and its frame
	// written under it, so answers, which come in order, find their waiters.
	commitMu sync.Mutex

	// mu guards the fields below; the reader goroutine takes it per frame.
	mu         sync.Mutex
	queue      []GroupBatch // records received, not yet returned by Next
	assignment []api.TopicPartition
	epoch      int32
	assigned   bool                // an assignment frame arrived
	waiters    []chan commitAnswer // commits sent, not yet answered, oldest first
	held       *Error              // an error frame no commit was waiting for: the close follows
	err        error               // why the stream ended
	closed     bool
	notify     chan struct{} // cap 1: queue, assignment or err changed

	granted int // records returned since credit was last granted; Next's goroutine only
}

// commitAnswer is the server's answer to one commit frame.
type commitAnswer struct {
	committed []api.PartitionOffset
	err       error
}

// groupFrame is any server frame of a group WebSocket.
type groupFrame struct {
	Records     *[]api.GroupRecord     `json:"records"`
	Cursor      string                 `json:"cursor"`
	Assignment  *[]api.TopicPartition  `json:"assignment"`
	MemberEpoch int32                  `json:"member_epoch"`
	Committed   *[]api.PartitionOffset `json:"committed"`
	Error       *api.ErrorDetail       `json:"error"`
	// Commit names the commit message an answer is for; an error frame
	// without it ends the stream.
	Commit *string `json:"commit"`
}

// JoinGroupWS connects a WebSocket member to group and returns once the
// server sent its first assignment (which may be empty). ctx bounds only
// that. Errors: the server's refusal of the join or the handshake
// (INVALID_GROUP_ID, UNKNOWN_TOPIC, FENCED_INSTANCE_ID, ...), a
// *TransportError, or the stream's end before the first assignment.
func (c *Client) JoinGroupWS(ctx context.Context, group string, opts GroupWSOptions) (*GroupWS, error) {
	if len(opts.Topics) == 0 {
		return nil, &Error{Code: api.CodeInvalidRequest, Message: "a group member needs topics"}
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 1000
	}
	q := url.Values{"topics": {strings.Join(opts.Topics, ",")}, "credit": {strconv.Itoa(opts.Buffer)}}
	for k, v := range map[string]string{"instance_id": opts.InstanceID, "auto_offset_reset": opts.AutoOffsetReset, "assignor": opts.Assignor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.SessionTimeout > 0 {
		q.Set("session_timeout_ms", strconv.FormatInt(opts.SessionTimeout.Milliseconds(), 10))
	}
	ws, err := c.dialWS(ctx, groupPath(group)+"/ws", q, opts.ReadLimit)
	if err != nil {
		return nil, err
	}
	g := &GroupWS{c: c, group: group, buffer: opts.Buffer, ws: ws, notify: make(chan struct{}, 1)}
	ws.start(g.route, g.end)
	for {
		g.mu.Lock()
		assigned, err := g.assigned, g.err
		g.mu.Unlock()
		switch {
		case assigned:
			return g, nil
		case err != nil:
			_ = g.Close() // the join's error is the one to report
			return nil, err
		}
		select {
		case <-g.notify:
		case <-ctx.Done():
			_ = g.Close() // the join's error is the one to report
			return nil, ctx.Err()
		}
	}
}

// route handles one server frame on the reader goroutine.
func (g *GroupWS) route(b []byte) bool {
	var f groupFrame
	if err := decodeJSON(b, &f); err != nil {
		g.end(fmt.Errorf("client: group %q: undecodable frame: %w", g.group, err))
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case f.Error != nil:
		e := &Error{Code: f.Error.Code, Message: f.Error.Message, Retriable: f.Error.Retriable}
		if f.Commit == nil || !g.answerLocked(commitAnswer{err: e}) {
			g.held = e // the stream's end; the close that follows fails the waiters
		}
	case f.Committed != nil:
		g.answerLocked(commitAnswer{committed: *f.Committed})
	case f.Assignment != nil:
		g.assignment, g.epoch, g.assigned = *f.Assignment, f.MemberEpoch, true
		g.signalLocked()
	case f.Records != nil:
		// The server announces an epoch change before the records read in it.
		g.queue = append(g.queue, GroupBatch{Records: *f.Records, Cursor: f.Cursor, MemberEpoch: g.epoch})
		g.signalLocked()
	}
	return true
}

// answerLocked hands an answer to the oldest waiting commit; false when
// none is waiting.
func (g *GroupWS) answerLocked(a commitAnswer) bool {
	if len(g.waiters) == 0 {
		return false
	}
	g.waiters[0] <- a // buffered: a commit that gave up does not block the reader
	g.waiters = g.waiters[1:]
	return true
}

func (g *GroupWS) signalLocked() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// end records why the stream ended and fails the commits still waiting.
func (g *GroupWS) end(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = g.ws.closeError(err, g.held)
	}
	for _, w := range g.waiters {
		w <- commitAnswer{err: g.err}
	}
	g.waiters = nil
	g.signalLocked()
}

// Next returns the next records with the cursor naming the positions after
// them, blocking until some arrive, the stream ends, or ctx ends (which does
// not end the stream). Credit is granted as records are returned, in chunks
// of half the buffer. Errors: ctx's error; ErrClosed after Close; the
// error that ended the stream (an *Error from the server such as
// UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID, or a *TransportError), after the
// records received before it.
func (g *GroupWS) Next(ctx context.Context) (GroupBatch, error) {
	for {
		g.mu.Lock()
		switch {
		case g.closed:
			g.mu.Unlock()
			return GroupBatch{}, ErrClosed
		case len(g.queue) > 0:
			b := g.queue[0]
			g.queue[0] = GroupBatch{}
			g.queue = g.queue[1:]
			g.mu.Unlock()
			g.grant(len(b.Records))
			return b, nil
		case g.err != nil:
			err := g.err
			g.mu.Unlock()
			return GroupBatch{}, err
		}
		g.mu.Unlock()
		select {
		case <-g.notify:
		case <-ctx.Done():
			return GroupBatch{}, ctx.Err()
		}
	}
}

// grant gives credit back for n records returned by Next. A failed write
// is not reported here: the connection is broken, and the reader reports it.
func (g *GroupWS) grant(n int) {
	g.granted += n
	if g.granted < max(1, g.buffer/2) {
		return
	}
	_ = g.ws.write(api.Credit{Credit: int64(g.granted)})
	g.granted = 0
}

// Commit commits the positions a cursor names (a batch's Cursor, once its
// records are processed) and waits for the server's answer, returning what
// was committed. A cursor without positions commits nothing and sends
// nothing. If ctx ends first, the commit may still happen; its answer is
// then dropped. Errors: the server's (FENCED_MEMBER_EPOCH when a partition
// moved to another member, ...), which do not end the stream; the stream's
// end; ErrClosed.
func (g *GroupWS) Commit(ctx context.Context, cursor string) ([]api.PartitionOffset, error) {
	c, err := api.DecodeCursor(cursor)
	if err != nil {
		return nil, &Error{Code: api.CodeInvalidRequest, Message: err.Error()}
	}
	if len(c.Positions) == 0 {
		return nil, nil
	}
	ch := make(chan commitAnswer, 1)
	g.commitMu.Lock()
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		g.commitMu.Unlock()
		return nil, ErrClosed
	case g.err != nil:
		err := g.err
		g.mu.Unlock()
		g.commitMu.Unlock()
		return nil, err
	}
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	err = g.ws.write(struct {
		Commit string `json:"commit"`
	}{cursor})
	g.commitMu.Unlock()
	if err != nil {
		// The frame may be half written: the connection cannot be trusted
		// to answer in order any more. Ending it fails every waiter.
		g.ws.conn.CloseNow()
	}
	select {
	case a := <-ch:
		return a.committed, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Assignment is the member's partitions and epoch as of the server's last
// assignment frame (a copy).
func (g *GroupWS) Assignment() ([]api.TopicPartition, int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.assignment), g.epoch
}

// Close ends the membership: a normal closure of the connection, after
// which the gateway removes the member from the group, then the end of the
// reader goroutine, which Close waits for. Commits still waiting fail with
// ErrClosed. It may be called from any goroutine, more than once.
func (g *GroupWS) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	if g.err == nil {
		g.err = ErrClosed
	}
	for _, w := range g.waiters {
		w <- commitAnswer{err: ErrClosed}
	}
	g.waiters = nil
	g.signalLocked()
	g.mu.Unlock()
	g.ws.close()
	return nil
}
