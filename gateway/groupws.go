package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// A WebSocket group member: the connection is the member. The gateway joins
// for it, polls its assignment while it has credit, heartbeats while it has
// none, and leaves when the connection closes; a gateway that dies takes no
// state with it (the member's session expires at the coordinator, or the
// client reconnects anywhere with its instance_id and takes its member back).
//
// Server frames (text): {"assignment":[…],"member_epoch":N} at the start and
// whenever either changes; {"records":[…],"cursor":"…"} within the credit;
// {"committed":[…],"commit":"<cursor>"} answering a commit; an error frame
// {"error":{…},"commit":"<cursor>"} answering a commit that failed (the
// stream goes on); an error frame without "commit" ends the stream with
// close status 4000 + HTTP status. Client frames: {"credit":N}, {"commit":"<cursor>"};
// anything else (credit outside 0 < N <= 2^40, a binary frame, junk) closes
// with 1008, and gateway shutdown with 1001, after the member has left.

type wsAssignmentFrame struct {
	Assignment  []api.TopicPartition `json:"assignment"`
	MemberEpoch int32                `json:"member_epoch"`
	Grants      []api.PartitionGrant `json:"grants"`
}

type wsRecordsFrame struct {
	Records []api.GroupRecord `json:"records"`
	Cursor  string            `json:"cursor"`
}

// wsCommittedFrame answers a commit message, naming the cursor it committed.
type wsCommittedFrame struct {
	Committed []api.PartitionOffset `json:"committed"`
	Commit    string                `json:"commit"`
}

// wsCommitErrorFrame answers a commit message that failed; the stream goes
// on. An error frame without "commit" ends the stream.
type wsCommitErrorFrame struct {
	Error  api.ErrorDetail `json:"error"`
	Commit string          `json:"commit"`
}

// handleGroupWebSocket is GET /v1/groups/{group}/ws.
func (g *Gateway) handleGroupWebSocket(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	req, credit, err := parseGroupWSQuery(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	// Admitted before the join, so a refused client is not a member.
	release, err := g.wsConns.admit(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer release()
	joinCtx, cancel := groupCtx(r)
	joined, err := g.join(joinCtx, group, req, api.MemberKindWS)
	cancel()
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	conn, err := g.acceptWS(w, r)
	if err != nil {
		g.leaveDetached(r.Context(), group, joined.MemberID)
		return // Accept wrote the HTTP error
	}
	conn.SetReadLimit(api.MaxCursorLen + 256)
	m := &wsMember{g: g, conn: conn, group: group, id: joined.MemberID,
		heartbeat: time.Duration(joined.HeartbeatIntervalMs) * time.Millisecond, more: make(chan struct{}, 1)}
	m.credit.Store(credit)
	ctx, cancelRun, done := g.wsConns.open(r.Context(), conn)
	defer cancelRun()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		m.readFrames(ctx, cancelRun)
	}()
	err = m.run(ctx, joined.Assignment, joined.Grants, joined.MemberEpoch)
	done()
	// Leave first, so the partitions move at once and not after a session.
	g.leaveDetached(r.Context(), group, joined.MemberID)
	g.endStream(ctx, conn, err)
	<-readerDone // ends with the connection
}

// leaveDetached removes a member on a context of its own (the request's may
// be over) that acts for rctx's principal, bounded to 5 s; a failure leaves
// the session to expire.
func (g *Gateway) leaveDetached(rctx context.Context, group, member string) {
	ctx, cancel := context.WithTimeout(auth.WithPrincipal(g.ctx, auth.PrincipalFrom(rctx)), 5*time.Second)
	defer cancel()
	if err := g.leave(ctx, group, member); err != nil && !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		g.log.Debug("a WebSocket member did not leave cleanly; its session will expire", "group", group, "member", member, "err", err)
	}
}

// wsMember is one WebSocket group member. Two goroutines: the handler's
// (run: polls, heartbeats, writes records and assignment frames) and
// readFrames (the only reader: credit, and commits, which it answers itself;
// coder/websocket allows concurrent writes; it also takes the answers to
// the gateway's pings). readFrames ends with the connection and cancels
// run's context; the handler waits for it before it returns.
type wsMember struct {
	g         *Gateway
	conn      *websocket.Conn
	group, id string
	heartbeat time.Duration
	credit    atomic.Int64
	more      chan struct{} // cap 1: credit arrived
}

func (m *wsMember) readFrames(ctx context.Context, cancel context.CancelFunc) {
	defer cancel()
	for {
		// Without a deadline, as in wsStream.readCredits: the handler's
		// close ends it.
		typ, b, err := m.conn.Read(context.Background())
		if err != nil {
			return
		}
		f, err := parseGroupFrame(typ, b)
		if err != nil {
			m.conn.Close(websocket.StatusPolicyViolation, `send {"credit":N} with 0 < N <= 2^40, or {"commit":"<cursor>"}`)
			return
		}
		if f.Credit > 0 {
			if m.credit.Add(f.Credit) > maxCredit {
				m.credit.Store(maxCredit)
			}
			select {
			case m.more <- struct{}{}:
			default:
			}
		}
		if f.Commit != "" {
			m.commit(ctx, f.Commit)
		}
	}
}

// commit commits a cursor and answers with {"committed"} or an error frame.
func (m *wsMember) commit(ctx context.Context, cursor string) {
	cctx, cancel := context.WithTimeout(ctx, groupBudget)
	defer cancel()
	res, err := m.g.commit(cctx, m.group, api.CommitRequest{MemberID: m.id, Cursor: cursor})
	var b []byte
	if err != nil {
		e := api.Classify(err)
		b, _ = json.Marshal(wsCommitErrorFrame{Error: api.ErrorDetail{Code: e.Code, Message: e.Message, Retriable: e.Retriable()}, Commit: cursor})
	} else {
		b, _ = json.Marshal(wsCommittedFrame{Committed: res.Committed, Commit: cursor})
	}
	_ = m.write(ctx, b)
}

// run polls while there is credit and heartbeats while there is none,
// sending an assignment frame whenever the assignment or epoch changes.
func (m *wsMember) run(ctx context.Context, assignment []api.TopicPartition, grants []api.PartitionGrant, epoch int32) error {
	if err := m.sendAssignment(ctx, assignment, grants, epoch); err != nil {
		return err
	}
	var cursor string
	hb := time.NewTicker(max(m.heartbeat, 100*time.Millisecond))
	defer hb.Stop()
	heartbeat := func() error {
		hctx, cancel := context.WithTimeout(ctx, groupBudget)
		res, err := onCoordinator(m.g, hctx, m.group, true, func(addr string) (api.HeartbeatResponse, error) {
			return m.g.brokers.Heartbeat(hctx, addr, m.group, m.id)
		})
		cancel()
		if m.g.waitThrottledUpTo(ctx, err, m.heartbeat) {
			return nil // over the request rate: slowed down; the next tick tries again
		}
		if err != nil {
			return err
		}
		if res.MemberEpoch != epoch || !slices.Equal(res.Assignment, assignment) {
			assignment, epoch = res.Assignment, res.MemberEpoch
			if err := m.sendAssignment(ctx, assignment, res.Grants, epoch); err != nil {
				return err
			}
		}
		return nil
	}
	idle := false // the last poll found nothing: wait at the partitions' ends
	for {
		if m.credit.Load() <= 0 {
			select {
			case <-m.more:
				continue
			case <-hb.C:
				if err := heartbeat(); err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if len(assignment) == 0 {
			// Nothing to read: heartbeats keep the session and bring the
			// next assignment.
			select {
			case <-hb.C:
				if err := heartbeat(); err != nil {
					return err
				}
			case <-ctx.Done():
				return nil
			}
			continue
		}
		if at, ok := m.positions(cursor, assignment, epoch); idle && ok {
			// Wait on the partitions' shared polls (one per partition for
			// every stream and member of this gateway) instead of a long
			// poll of our own; a heartbeat after each wait keeps the
			// session (at least three heartbeat intervals long) and learns
			// of a new assignment as often as a long poll would.
			wctx, cancel := context.WithTimeout(ctx, max(min(wsPollWait, 3*m.heartbeat/2), 100*time.Millisecond))
			woke := m.g.tails.waitAny(wctx, at)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if !woke {
				if err := heartbeat(); err != nil {
					return err
				}
				continue
			}
		}
		pctx, cancel := context.WithTimeout(ctx, wsPollWait+groupBudget)
		res, err := m.g.groupPoll(pctx, m.group, m.id, pollParams{
			maxRecords: int(min(m.credit.Load(), wsMaxFrameRecs)), maxBytes: defaultMaxBytes, wait: wsPollWait, cursor: cursor,
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if m.g.waitThrottledUpTo(ctx, err, max(m.heartbeat, 100*time.Millisecond)) {
				continue // slowed down, not closed; the next poll heartbeats
			}
			return err
		}
		if res.MemberEpoch != epoch || !slices.Equal(res.Assignment, assignment) {
			assignment, epoch = res.Assignment, res.MemberEpoch
			if err := m.sendAssignment(ctx, assignment, res.Grants, epoch); err != nil {
				return err
			}
		}
		cursor = res.Cursor
		idle = len(res.Records) == 0
		if idle {
			continue
		}
		bp := getBuf(0)
		*bp = renderGroupRecordsFrame(*bp, res.Records, res.Cursor)
		err = m.write(ctx, *bp)
		putBuf(bp)
		if err != nil {
			return err
		}
		m.credit.Add(-int64(len(res.Records)))
	}
}

// positions are where the member reads next in each assigned partition, from
// the cursor of its last poll; ok false when the cursor does not name every
// one (a first poll, a partition just given) or is from another epoch.
func (m *wsMember) positions(cursor string, assignment []api.TopicPartition, epoch int32) ([]api.PartitionOffset, bool) {
	if cursor == "" || len(assignment) == 0 {
		return nil, false
	}
	c, err := api.DecodeCursor(cursor)
	if err != nil || c.Epoch != epoch {
		return nil, false
	}
	at := make([]api.PartitionOffset, 0, len(assignment))
	for _, tp := range assignment {
		off, ok := c.Position(tp)
		if !ok || off < 0 {
			return nil, false
		}
		at = append(at, api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	return at, true
}

func (m *wsMember) sendAssignment(ctx context.Context, a []api.TopicPartition, grants []api.PartitionGrant, epoch int32) error {
	if a == nil {
		a = []api.TopicPartition{}
	}
	if grants == nil {
		grants = []api.PartitionGrant{}
	}
	b, _ := json.Marshal(wsAssignmentFrame{Assignment: a, MemberEpoch: epoch, Grants: grants})
	return m.write(ctx, b)
}

func (m *wsMember) write(ctx context.Context, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, m.g.wsConns.lim.WriteTimeout)
	defer cancel()
	return m.conn.Write(ctx, websocket.MessageText, b)
}
