package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Consumer groups of the public API under faults. A GroupMember is one HTTP
// member driven by the test: it joins through a gateway of its own, then
// loops poll (passing its last cursor, at first the join's) → process (the
// records go into the GroupHistory) → commit that cursor → poll again, and
// joins again when the group no longer knows it. A test can hold a member
// before a chosen step (the member is a client: holding its loop is what
// SIGSTOP does to a consumer process), make it leave, and stop it; a
// MemberClient makes a member's calls one at a time, through any gateway. A
// KeyedLoad (keyedload.go) writes keyed records acks=all.
// GroupHistory.Check (groupcheck.go) holds every call against the final
// logs: the topic's partitions and the group's records in __consumer_offsets.

// Kinds of GroupCall.
const (
	CallJoin   = "join"
	CallPoll   = "poll"
	CallCommit = "commit"
	CallLeave  = "leave"
)

// GroupCall is one request of a member and what came of it. A call that was
// not answered 2xx may still have taken effect: the gateway retries group
// calls whose attempts went unanswered, and any of them may have landed.
type GroupCall struct {
	Member     string // the member's name in the test ("m1"); it keeps it across rejoins
	MemberID   string // the member id the call was made as (a join: the one answered)
	Kind       string
	Gateway    string
	Start, End time.Time
	OK         bool     // answered 2xx
	Status     int      // 0: no answer
	Code       api.Code // the error code, "" for OK and transport failures
	Err        string
	// Epoch and Assignment as a join or a poll answered them.
	Epoch      int32
	Assignment []api.TopicPartition
	// Cursor is the cursor a poll passed or a commit named; Next is the one
	// a poll answered.
	Cursor, Next string
	// Records a poll answered.
	Records []Delivery
	// Offsets a commit named (its cursor's positions).
	Offsets []api.PartitionOffset
	// Conn is the client's end of the connection ("127.0.0.1:port"), to ask
	// a GatewayProxy what it dropped.
	Conn string
}

func (gc *GroupCall) String() string {
	s := fmt.Sprintf("%s(%s) %s via %s", gc.Member, short(gc.MemberID), gc.Kind, gc.Gateway)
	if gc.OK {
		s += " ok"
	} else {
		s += fmt.Sprintf(" %d %s %s", gc.Status, gc.Code, gc.Err)
	}
	switch gc.Kind {
	case CallJoin, CallPoll:
		if gc.OK {
			s += fmt.Sprintf(" epoch %d %s", gc.Epoch, tpsString(gc.Assignment))
		}
		if gc.Kind == CallPoll {
			s += fmt.Sprintf(" %d records", len(gc.Records))
		}
	case CallCommit:
		s += " " + offsetsString(gc.Offsets)
	}
	return s + fmt.Sprintf(" [%s..%s]", gc.Start.Format("15:04:05.000"), gc.End.Format("15:04:05.000"))
}

func short(id string) string { return id[:min(len(id), 6)] }

func tpsString(tps []api.TopicPartition) string {
	parts := make([]string, len(tps))
	for i, tp := range tps {
		parts[i] = fmt.Sprintf("p%d", tp.Partition)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func offsetsString(offs []api.PartitionOffset) string {
	parts := make([]string, len(offs))
	for i, o := range offs {
		parts[i] = fmt.Sprintf("p%d=%d", o.Partition, o.Offset)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Delivery is one record a poll answered.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

// GroupHistory records every call of a group's members.
type GroupHistory struct {
	c     *Cluster
	Group string

	mu       sync.Mutex // guards the fields below
	calls    []*GroupCall
	sessions map[string]time.Duration // session timeout by member name
	inFlight map[string]int           // calls sent and not yet ended, by kind
}

// NewGroupHistory starts an empty history of group.
func NewGroupHistory(c *Cluster, group string) *GroupHistory {
	return &GroupHistory{c: c, Group: group, sessions: map[string]time.Duration{}, inFlight: map[string]int{}}
}

// begin counts a call sent.
func (h *GroupHistory) begin(gc *GroupCall) {
	h.mu.Lock()
	h.inFlight[gc.Kind]++
	h.mu.Unlock()
}

// end records a call that ended.
func (h *GroupHistory) end(gc *GroupCall) {
	h.mu.Lock()
	h.inFlight[gc.Kind]--
	h.calls = append(h.calls, gc)
	h.mu.Unlock()
}

// InFlight counts the calls of kind sent and not yet ended.
func (h *GroupHistory) InFlight(kind string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight[kind]
}

// WaitInFlight waits, checking every millisecond, until at least n calls of
// kind are in flight at once, so that a fault can land in the middle of
// them. It fails the test after timeout.
func (h *GroupHistory) WaitInFlight(kind string, n int, timeout time.Duration) {
	h.c.T.Helper()
	deadline := time.Now().Add(timeout)
	for h.InFlight(kind) < n {
		if time.Now().After(deadline) {
			h.c.T.Fatalf("never %d %s calls in flight at once within %v", n, kind, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Calls returns the calls so far, in the order they ended.
func (h *GroupHistory) Calls() []*GroupCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// FirstOKPoll returns the first answered poll of member that started at or
// after t, or nil.
func (h *GroupHistory) FirstOKPoll(member string, t time.Time) *GroupCall {
	for _, gc := range h.Calls() {
		if gc.Member == member && gc.Kind == CallPoll && gc.OK && !gc.Start.Before(t) {
			return gc
		}
	}
	return nil
}

// Delivered counts the records member ("" any) was served.
func (h *GroupHistory) Delivered(member string) int {
	n := 0
	for _, gc := range h.Calls() {
		if (member == "" || gc.Member == member) && gc.Kind == CallPoll && gc.OK {
			n += len(gc.Records)
		}
	}
	return n
}

// Count counts calls of kind ("" any) by member ("" any) that were answered
// 2xx (ok) or not.
func (h *GroupHistory) Count(member, kind string, ok bool) int {
	n := 0
	for _, gc := range h.Calls() {
		if (member == "" || gc.Member == member) && (kind == "" || gc.Kind == kind) && gc.OK == ok {
			n++
		}
	}
	return n
}

// Describe is GET /v1/groups/{group} through the cluster's gateway.
func (h *GroupHistory) Describe() (api.GroupDescription, error) {
	var d api.GroupDescription
	err := h.c.getJSON(h.c.URL+"/v1/groups/"+h.Group, &d, 35*time.Second)
	return d, err
}

// DescribeGroup renders a description on one line.
func DescribeGroup(d api.GroupDescription) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s epoch %d, members:", d.State, d.GroupEpoch)
	for _, m := range d.Members {
		fmt.Fprintf(&sb, " %s@%d%s", short(m.MemberID), m.MemberEpoch, tpsString(m.Assignment))
	}
	sb.WriteString("; committed:")
	for _, p := range d.Partitions {
		fmt.Fprintf(&sb, " p%d=%d/%d", p.Partition, p.CommittedOffset, p.HighWatermark)
	}
	return sb.String()
}

// WaitMembers waits until the group is stable with exactly the given
// member ids, each holding at least one partition, and returns the
// description.
func (h *GroupHistory) WaitMembers(ids []string, timeout time.Duration) api.GroupDescription {
	h.c.T.Helper()
	var last api.GroupDescription
	h.c.WaitFor(fmt.Sprintf("group %s stable with members %v", h.Group, ids), timeout, func() (bool, string) {
		d, err := h.Describe()
		if err != nil {
			return false, err.Error()
		}
		last = d
		if d.State != api.GroupStable || len(d.Members) != len(ids) {
			return false, DescribeGroup(d)
		}
		for _, m := range d.Members {
			if !slices.Contains(ids, m.MemberID) || len(m.Assignment) == 0 {
				return false, DescribeGroup(d)
			}
		}
		return true, ""
	})
	return last
}

// WaitCaughtUp waits until the group's committed offset is the high
// watermark in each of partitions partitions of topic (the describe's rows).
func (h *GroupHistory) WaitCaughtUp(topic string, partitions int, timeout time.Duration) api.GroupDescription {
	h.c.T.Helper()
	var last api.GroupDescription
	h.c.WaitFor(fmt.Sprintf("group %s to commit every partition of %s to its HW", h.Group, topic), timeout, func() (bool, string) {
		d, err := h.Describe()
		if err != nil {
			return false, err.Error()
		}
		last = d
		n := 0
		for _, p := range d.Partitions {
			if p.Topic == topic && p.HighWatermark >= 0 && p.CommittedOffset == p.HighWatermark {
				n++
			}
		}
		return n == partitions, DescribeGroup(d)
	})
	return last
}

// ---------------------------------------------------------------- members

// MemberOptions shape a GroupMember.
type MemberOptions struct {
	// Name is the member's name in the history ("m1"). Required.
	Name string
	// URL is the gateway the member talks to. Default the cluster's.
	URL string
	// Topics it subscribes to. Required.
	Topics []string
	// SessionTimeout is its session_timeout_ms. Default 6 s.
	SessionTimeout time.Duration
	// MaxRecords and MaxWait bound each poll (max_records, max_wait_ms).
	// Defaults 50 and 300 ms.
	MaxRecords int
	MaxWait    time.Duration
	// CommitEmpty commits after polls that returned nothing too (a commit
	// storm); default: only after polls with records.
	CommitEmpty bool
}

// GroupMember is one member's loop; see the top of this file.
type GroupMember struct {
	h    *GroupHistory
	o    MemberOptions
	mc   *MemberClient
	done chan struct{}

	// Only the loop touches these.
	id     string
	epoch  int32
	cursor string

	mu       sync.Mutex // guards the fields below
	next     *PausePoint
	held     *PausePoint // the pause the loop is in, nil when running
	stopping bool
	leave    bool   // leave the group when stopping
	current  string // the loop's member id, for ID
}

// PausePoint is a pause armed by GroupMember.PauseBefore.
type PausePoint struct {
	// At is the call the member stops before (CallPoll or CallCommit).
	At string
	// Paused is closed once the member stopped there.
	Paused <-chan struct{}
	paused chan struct{}
	resume chan struct{}
	once   sync.Once
}

// Resume lets the member go on.
func (pp *PausePoint) Resume() { pp.once.Do(func() { close(pp.resume) }) }

// StartMember starts a member's loop (it joins first). It is stopped, without
// leaving, at cleanup.
func (h *GroupHistory) StartMember(o MemberOptions) *GroupMember {
	if o.URL == "" {
		o.URL = h.c.URL
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 6 * time.Second
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 50
	}
	if o.MaxWait == 0 {
		o.MaxWait = 300 * time.Millisecond
	}
	if o.Name == "" || len(o.Topics) == 0 {
		h.c.T.Fatal("MemberOptions: Name and Topics are required")
	}
	// A client timeout past the gateway's 30 s budget for a group call, so
	// that the gateway, not the client, ends a call it cannot complete.
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	m := &GroupMember{h: h, o: o, mc: h.NewMemberClient(o.Name, &http.Client{Transport: tr, Timeout: 45*time.Second + o.MaxWait}), done: make(chan struct{})}
	h.c.T.Cleanup(tr.CloseIdleConnections)
	h.c.T.Cleanup(func() { m.Stop(false) })
	go m.run()
	h.c.Logf("member %s started on %s (session %v, max_records %d, max_wait %v)", o.Name, o.URL, o.SessionTimeout, o.MaxRecords, o.MaxWait)
	return m
}

// Name is the member's name in the history.
func (m *GroupMember) Name() string { return m.o.Name }

// ID is the member id of its current incarnation ("" before it joined).
func (m *GroupMember) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

// PauseBefore arms a pause: the member stops before its next call of kind
// at (CallPoll: between two iterations, nothing uncommitted in hand;
// CallCommit: records polled and not yet committed). One pause is armed at
// a time; arming one while the member is held in another is how a test
// lets it take exactly one step.
func (m *GroupMember) PauseBefore(at string) *PausePoint {
	p := make(chan struct{})
	pp := &PausePoint{At: at, Paused: p, paused: p, resume: make(chan struct{})}
	m.mu.Lock()
	m.next = pp
	m.mu.Unlock()
	return pp
}

// Stop ends the loop at its next poll (leaving the group first when leave
// is set), releasing any pause, and waits for it. Calls in flight finish
// (bounded by the client's timeout).
func (m *GroupMember) Stop(leave bool) {
	m.mu.Lock()
	if !m.stopping {
		m.stopping, m.leave = true, leave
	}
	held, next := m.held, m.next
	m.mu.Unlock()
	if held != nil {
		held.Resume()
	}
	if next != nil {
		next.Resume()
	}
	<-m.done
}

// Leave is Stop(true): the member commits what it polled, leaves the group
// (DELETE) and stops.
func (m *GroupMember) Leave() { m.Stop(true) }

func (m *GroupMember) run() {
	defer close(m.done)
	for {
		if !m.checkpoint(CallPoll) {
			return
		}
		if m.id == "" {
			m.join()
			continue
		}
		p := m.poll()
		if !p.OK {
			if !m.forgotten(p) {
				m.backoff()
			}
			continue
		}
		m.cursor, m.epoch = p.Next, p.Epoch
		if len(p.Records) == 0 && !m.o.CommitEmpty {
			continue
		}
		if !m.checkpoint(CallCommit) {
			return
		}
		if c := m.commit(); !c.OK {
			m.forgotten(c)
		}
	}
}

// checkpoint runs before each call: it holds the loop in an armed pause,
// and ends it (leaving first if asked) before a poll once Stop was called.
func (m *GroupMember) checkpoint(at string) bool {
	for {
		m.mu.Lock()
		if at == CallPoll && m.stopping {
			leave := m.leave
			m.mu.Unlock()
			if leave && m.id != "" {
				m.leaveGroup()
			}
			return false
		}
		pp := m.next
		if pp == nil || pp.At != at {
			m.mu.Unlock()
			return true
		}
		m.next, m.held = nil, pp
		stopping := m.stopping
		m.mu.Unlock()
		m.h.c.Logf("member %s (%s) holds before its %s", m.o.Name, short(m.id), at)
		close(pp.paused)
		if !stopping {
			<-pp.resume
		}
		m.mu.Lock()
		m.held = nil
		m.mu.Unlock()
		m.h.c.Logf("member %s (%s) goes on", m.o.Name, short(m.id))
	}
}

// forgotten handles an answer that says the group no longer knows this
// member: the loop joins again, from the group's committed offsets.
func (m *GroupMember) forgotten(gc *GroupCall) bool {
	if gc.Code != api.CodeUnknownMemberID && gc.Code != api.CodeFencedInstanceID {
		return false
	}
	m.h.c.Logf("member %s (%s): %s; joining again", m.o.Name, short(m.id), gc.Code)
	m.id, m.cursor, m.epoch = "", "", 0
	return true
}

func (m *GroupMember) backoff() { time.Sleep(100 * time.Millisecond) }

func (m *GroupMember) join() {
	gc, res := m.mc.Join(m.o.URL, api.JoinGroupRequest{Topics: m.o.Topics, SessionTimeoutMs: m.o.SessionTimeout.Milliseconds()})
	if !gc.OK {
		m.backoff()
		return
	}
	// The join's cursor names no positions: the first poll reads from the
	// committed offsets, and reads the same again if its answer is lost.
	m.id, m.epoch, m.cursor = res.MemberID, res.MemberEpoch, res.Cursor
	m.mu.Lock()
	m.current = res.MemberID
	m.mu.Unlock()
	m.h.c.Logf("member %s joined as %s: epoch %d %s", m.o.Name, short(res.MemberID), res.MemberEpoch, tpsString(res.Assignment))
}

func (m *GroupMember) poll() *GroupCall {
	return m.mc.Poll(m.o.URL, m.id, m.cursor, m.o.MaxRecords, m.o.MaxWait)
}

func (m *GroupMember) commit() *GroupCall {
	return m.mc.Commit(m.o.URL, m.id, m.epoch, m.cursor)
}

// leaveGroup sends DELETE until it is answered 204 or the group says it
// does not know the member (a retry after a lost answer), three tries at most.
func (m *GroupMember) leaveGroup() {
	for range 3 {
		gc := m.mc.Leave(m.o.URL, m.id)
		if gc.OK || gc.Code == api.CodeUnknownMemberID {
			m.h.c.Logf("member %s (%s) left the group", m.o.Name, short(m.id))
			return
		}
		m.backoff()
	}
}

// ---------------------------------------------------------------- calls

// MemberClient makes one member's calls, each through the gateway the
// caller names, and records them in the history. GroupMember's loop is
// built on it; a test can drive a member step by step with it.
type MemberClient struct {
	h    *GroupHistory
	Name string
	http *http.Client
}

// NewMemberClient returns the calls of member name, sent with client.
func (h *GroupHistory) NewMemberClient(name string, client *http.Client) *MemberClient {
	return &MemberClient{h: h, Name: name, http: client}
}

// Join is POST /v1/groups/{group}/members.
func (mc *MemberClient) Join(base string, req api.JoinGroupRequest) (*GroupCall, api.JoinGroupResponse) {
	mc.h.mu.Lock()
	mc.h.sessions[mc.Name] = time.Duration(req.SessionTimeoutMs) * time.Millisecond
	mc.h.mu.Unlock()
	gc := &GroupCall{Member: mc.Name, Kind: CallJoin, Gateway: base}
	defer mc.h.end(gc)
	var res api.JoinGroupResponse
	mc.call(gc, http.MethodPost, "/members", req, &res)
	if gc.OK {
		gc.MemberID, gc.Epoch, gc.Assignment = res.MemberID, res.MemberEpoch, res.Assignment
	}
	return gc, res
}

// Poll is GET .../members/{id}/records with the cursor ("": none).
func (mc *MemberClient) Poll(base, id, cursor string, maxRecords int, maxWait time.Duration) *GroupCall {
	gc := &GroupCall{Member: mc.Name, MemberID: id, Kind: CallPoll, Gateway: base, Cursor: cursor}
	defer mc.h.end(gc)
	q := fmt.Sprintf("?max_records=%d&max_wait_ms=%d", maxRecords, maxWait.Milliseconds())
	if cursor != "" {
		q += "&cursor=" + url.QueryEscape(cursor)
	}
	var res api.GroupPollResponse
	mc.call(gc, http.MethodGet, "/members/"+id+"/records"+q, nil, &res)
	if gc.OK {
		gc.Epoch, gc.Assignment, gc.Next = res.MemberEpoch, res.Assignment, res.Cursor
		gc.Records = deliveries(res.Records)
	}
	return gc
}

// Commit is POST /v1/groups/{group}/offsets with a poll's cursor and epoch.
func (mc *MemberClient) Commit(base, id string, epoch int32, cursor string) *GroupCall {
	gc := &GroupCall{Member: mc.Name, MemberID: id, Kind: CallCommit, Gateway: base, Cursor: cursor, Epoch: epoch}
	defer mc.h.end(gc)
	if cur, err := api.DecodeCursor(cursor); err == nil {
		gc.Offsets = cur.Positions
		sortOffsets(gc.Offsets)
	}
	mc.call(gc, http.MethodPost, "/offsets", api.CommitRequest{MemberID: id, MemberEpoch: epoch, Cursor: cursor}, &api.CommitResponse{})
	return gc
}

// Leave is DELETE .../members/{id}.
func (mc *MemberClient) Leave(base, id string) *GroupCall {
	gc := &GroupCall{Member: mc.Name, MemberID: id, Kind: CallLeave, Gateway: base}
	defer mc.h.end(gc)
	mc.call(gc, http.MethodDelete, "/members/"+id, nil, nil)
	return gc
}

// call sends one request under /v1/groups/{group}. The caller fills in
// the answer and then records the call (GroupHistory.end), so that readers
// of the history never see a call half filled.
func (mc *MemberClient) call(gc *GroupCall, method, path string, body, out any) {
	mc.h.begin(gc)
	gc.Start = time.Now()
	defer func() { gc.End = time.Now() }()
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { gc.Conn = ci.Conn.LocalAddr().String() }}
	gc.Status, gc.Code, gc.Err = doJSON(httptrace.WithClientTrace(context.Background(), trace), mc.http, method, gc.Gateway+"/v1/groups/"+mc.h.Group+path, body, out)
	gc.OK = gc.Status/100 == 2
}

// doJSON sends a request with a JSON body (nil: none) and decodes a 2xx
// answer into out (nil: ignored). status is 0 when no answer came.
func doJSON(ctx context.Context, client *http.Client, method, u string, body, out any) (status int, code api.Code, errText string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, "", err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "transport: " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Sprintf("%d, body cut short: %v", resp.StatusCode, err)
	}
	if resp.StatusCode/100 == 2 {
		if out != nil && len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, out); err != nil {
				return 0, "", fmt.Sprintf("%d with a body that does not decode: %v", resp.StatusCode, err)
			}
		}
		return resp.StatusCode, "", ""
	}
	var eb api.ErrorBody
	_ = json.Unmarshal(b, &eb)
	code = api.Code(resp.Header.Get(api.HeaderErrorCode))
	if code == "" {
		code = eb.Error.Code
	}
	return resp.StatusCode, code, eb.Error.Message
}

func deliveries(recs []api.GroupRecord) []Delivery {
	out := make([]Delivery, len(recs))
	for i, r := range recs {
		d := Delivery{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
		if r.Key != nil {
			d.Key = *r.Key
		}
		if json.Unmarshal(r.Value, &d.Value) != nil {
			d.Value = "<not a JSON string: " + string(r.Value) + ">"
		}
		out[i] = d
	}
	return out
}

func sortOffsets(offs []api.PartitionOffset) {
	slices.SortFunc(offs, func(a, b api.PartitionOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
}
