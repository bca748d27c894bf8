package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/client"
)

// fakeGroups plays the consumer-group protocol of the gateway for one
// group over one partition ("t"/0) holding records 0..records-1, so client
// logic can be tested against exact requests and injected faults. Like the
// real coordinator, it remembers where each member's last poll ended and
// starts a poll without a cursor there.
type fakeGroups struct {
	t       *testing.T
	srv     *httptest.Server
	records int64
	hbMs    int64

	mu         sync.Mutex       // guards everything below
	members    map[string]int64 // member id -> position after its last poll
	epoch      int32
	assignment []api.TopicPartition
	nextID     int
	polls      []fakePoll // every poll received, in order
	heartbeats []string   // member ids
	leaves     []string
	commits    []api.CommitRequest
	joins      []api.JoinGroupRequest
	other      []string // "METHOD path" of the admin routes
	dropPolls  int      // answers of the next polls to lose after serving them
	failPolls  []api.Code
}

type fakePoll struct {
	member, cursor string
	position       int64 // where the poll read from
	maxRecords     int
	at             time.Time
}

func newFakeGroups(t *testing.T, records int64) *fakeGroups {
	f := &fakeGroups{t: t, records: records, hbMs: 50, members: map[string]int64{}, epoch: 1,
		assignment: []api.TopicPartition{{Topic: "t", Partition: 0}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/groups/g/members", f.join)
	mux.HandleFunc("GET /v1/groups/g/members/{member}/records", f.poll)
	mux.HandleFunc("POST /v1/groups/g/members/{member}/heartbeat", f.heartbeat)
	mux.HandleFunc("DELETE /v1/groups/g/members/{member}", f.leave)
	mux.HandleFunc("POST /v1/groups/g/offsets", f.commit)
	mux.HandleFunc("/", f.admin)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeGroups) join(w http.ResponseWriter, r *http.Request) {
	var req api.JoinGroupRequest
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "bad join"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, req)
	f.nextID++
	id := fmt.Sprintf("m%d", f.nextID)
	f.members[id] = 0
	writeJSON(w, http.StatusCreated, api.JoinGroupResponse{MemberID: id, MemberEpoch: f.epoch, Assignment: f.assignment, HeartbeatIntervalMs: f.hbMs})
}

func (f *fakeGroups) poll(w http.ResponseWriter, r *http.Request) {
	member := r.PathValue("member")
	q := r.URL.Query()
	maxRecords, _ := strconv.Atoi(q.Get("max_records"))
	if maxRecords == 0 {
		maxRecords = 500
	}
	f.mu.Lock()
	pos, ok := f.members[member]
	if !ok {
		f.mu.Unlock()
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownMemberID, "no member %q", member))
		return
	}
	cursor := q.Get("cursor")
	if cursor != "" {
		c, err := api.DecodeCursor(cursor)
		if err != nil {
			f.mu.Unlock()
			apihttp.WriteError(w, err)
			return
		}
		pos = 0 // no position in the cursor: the committed offset (none here)
		if off, ok := c.Position(api.TopicPartition{Topic: "t", Partition: 0}); ok {
			pos = off
		}
	}
	f.polls = append(f.polls, fakePoll{member: member, cursor: cursor, position: pos, maxRecords: maxRecords, at: time.Now()})
	if len(f.failPolls) > 0 {
		code := f.failPolls[0]
		f.failPolls = f.failPolls[1:]
		f.mu.Unlock()
		apihttp.WriteError(w, api.Errorf(code, "injected"))
		return
	}
	res := api.GroupPollResponse{Records: []api.GroupRecord{}, MemberEpoch: f.epoch, Assignment: f.assignment}
	end := min(pos+int64(maxRecords), f.records)
	for o := pos; o < end; o++ {
		res.Records = append(res.Records, api.GroupRecord{Topic: "t", Partition: 0, FetchedRecord: api.FetchedRecord{Offset: o, Value: json.RawMessage(strconv.FormatInt(o, 10))}})
	}
	res.Cursor = api.Cursor{Epoch: f.epoch, Positions: []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: end}}}.Encode()
	f.members[member] = end // as the coordinator's EndPoll remembers it
	drop := f.dropPolls > 0
	if drop {
		f.dropPolls--
	}
	f.mu.Unlock()
	if drop {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (f *fakeGroups) heartbeat(w http.ResponseWriter, r *http.Request) {
	member := r.PathValue("member")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.members[member]; !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownMemberID, "no member %q", member))
		return
	}
	f.heartbeats = append(f.heartbeats, member)
	writeJSON(w, http.StatusOK, api.HeartbeatResponse{MemberEpoch: f.epoch, Assignment: f.assignment})
}

func (f *fakeGroups) leave(w http.ResponseWriter, r *http.Request) {
	member := r.PathValue("member")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.members[member]; !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownMemberID, "no member %q", member))
		return
	}
	delete(f.members, member)
	f.leaves = append(f.leaves, member)
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeGroups) commit(w http.ResponseWriter, r *http.Request) {
	var req api.CommitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "bad commit"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, req)
	offs := req.Offsets
	if req.Cursor != "" {
		c, _ := api.DecodeCursor(req.Cursor)
		offs = append(offs, c.Positions...)
	}
	writeJSON(w, http.StatusOK, api.CommitResponse{Committed: offs})
}

// admin records the admin routes and answers each with a fitting shape.
func (f *fakeGroups) admin(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.other = append(f.other, r.Method+" "+r.URL.Path+" "+string(body))
	f.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/groups":
		writeJSON(w, 200, api.GroupList{Groups: []api.GroupSummary{{Group: "g", State: api.GroupStable, Members: 1}}})
	case "GET /v1/groups/g":
		writeJSON(w, 200, api.GroupDescription{Group: "g", State: api.GroupStable, GroupEpoch: 3,
			Partitions: []api.GroupPartitionLag{{Topic: "t", Partition: 0, CommittedOffset: 5, HighWatermark: 9, Lag: 4}}})
	case "POST /v1/groups/g/offsets/reset":
		writeJSON(w, 200, api.CommitResponse{Committed: []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 0}}})
	case "DELETE /v1/groups/g":
		w.WriteHeader(http.StatusNoContent)
	case "DELETE /v1/groups/gone":
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownGroup, "no group"))
	default:
		apihttp.WriteError(w, api.Errorf(api.CodeNotFound, "no route"))
	}
}

func (f *fakeGroups) client(t *testing.T) *client.Client {
	cl, err := client.New(f.srv.URL, client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (f *fakeGroups) snapshot() (polls []fakePoll, heartbeats, leaves []string, commits []api.CommitRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakePoll(nil), f.polls...), append([]string(nil), f.heartbeats...), append([]string(nil), f.leaves...), append([]api.CommitRequest(nil), f.commits...)
}

// offsetsOf lists the offsets of a poll's records.
func offsetsOf(recs []api.GroupRecord) []int64 {
	out := []int64{}
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

func span(from, to int64) []int64 {
	out := []int64{}
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func sameOffsets(a, b []int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestGroupConsumerRetriesPollWithSameCursor loses the answers of polls,
// the first one included: the consumer retries each with the cursor it sent,
// and gets the records the lost answer held, although the coordinator
// remembered that answer's end.
func TestGroupConsumerRetriesPollWithSameCursor(t *testing.T) {
	f := newFakeGroups(t, 100)
	cl := f.client(t)
	ctx := testCtx(t)
	g := cl.NewGroupConsumer("g", client.GroupConsumerOptions{Topics: []string{"t"}, MaxRecords: 10, MaxWait: -1, InstanceID: "i-1", AutoOffsetReset: api.ResetEarliest})
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	f.mu.Lock()
	join := f.joins[0]
	f.mu.Unlock()
	if join.InstanceID != "i-1" || join.Topics[0] != "t" || join.AutoOffsetReset != "earliest" {
		t.Fatalf("join request %+v", join)
	}
	if g.MemberID() != "m1" || g.MemberEpoch() != 1 || len(g.Assignment()) != 1 {
		t.Fatalf("member %s epoch %d assignment %v", g.MemberID(), g.MemberEpoch(), g.Assignment())
	}

	f.mu.Lock()
	f.dropPolls = 1 // the very first poll's answer
	f.mu.Unlock()
	b, err := g.Poll(ctx)
	if err != nil || !sameOffsets(offsetsOf(b.Records), span(0, 10)) || b.Cursor != g.Cursor() {
		t.Fatalf("first poll after a lost answer: %v, %v", offsetsOf(b.Records), err)
	}

	// A retriable failure and a lost answer in a row, in the middle.
	f.mu.Lock()
	f.dropPolls, f.failPolls = 1, []api.Code{api.CodeCoordinatorNotAvail}
	f.mu.Unlock()
	c1 := b.Cursor
	b, err = g.Poll(ctx)
	if err != nil || !sameOffsets(offsetsOf(b.Records), span(10, 20)) {
		t.Fatalf("poll after a failure and a lost answer: %v, %v", offsetsOf(b.Records), err)
	}
	polls, _, _, _ := f.snapshot()
	if len(polls) != 5 {
		t.Fatalf("%d polls, want 5", len(polls))
	}
	for i := 2; i < 5; i++ {
		if polls[i].cursor != c1 || polls[i].position != 10 {
			t.Fatalf("poll %d sent cursor %q (position %d), want the previous answer's %q", i, polls[i].cursor, polls[i].position, c1)
		}
	}
	if polls[0].cursor == "" || polls[0].cursor != polls[1].cursor || polls[1].position != 0 {
		t.Fatalf("the first poll and its retry sent %q and %q (position %d): want one cursor without positions", polls[0].cursor, polls[1].cursor, polls[1].position)
	}

	// Out of retries: the error comes back, and the next Poll sends the same cursor again.
	f.mu.Lock()
	f.failPolls = []api.Code{api.CodeInternal, api.CodeInternal, api.CodeInternal, api.CodeInternal, api.CodeInternal}
	f.mu.Unlock()
	c2 := b.Cursor
	if _, err := g.Poll(ctx); !client.IsRetriable(err) {
		t.Fatalf("poll with every attempt failing: %v", err)
	}
	b, err = g.Poll(ctx)
	polls, _, _, _ = f.snapshot()
	if err != nil || !sameOffsets(offsetsOf(b.Records), span(20, 30)) || polls[len(polls)-1].cursor != c2 {
		t.Fatalf("poll after a failed one: %v, %v", offsetsOf(b.Records), err)
	}
}

func TestGroupConsumerCommit(t *testing.T) {
	f := newFakeGroups(t, 20)
	cl := f.client(t)
	ctx := testCtx(t)
	g := cl.NewGroupConsumer("g", client.GroupConsumerOptions{Topics: []string{"t"}, MaxWait: -1})
	if _, err := g.Commit(ctx, "x"); err == nil {
		t.Fatal("commit before join")
	}
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	// The cursor before any poll names no position: nothing to commit.
	if offs, err := g.Commit(ctx, g.Cursor()); err != nil || offs != nil {
		t.Fatalf("commit of the initial cursor: %v, %v", offs, err)
	}
	b, err := g.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := g.Commit(ctx, b.Cursor)
	if err != nil || len(offs) != 1 || offs[0].Offset != 20 {
		t.Fatalf("commit: %v, %v", offs, err)
	}
	if b.MemberEpoch != 1 {
		t.Fatalf("batch epoch %d", b.MemberEpoch)
	}
	if _, err := g.CommitOffsets(ctx, b.MemberEpoch, []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 7}}); err != nil {
		t.Fatal(err)
	}
	_, _, _, commits := f.snapshot()
	if len(commits) != 2 {
		t.Fatalf("%d commits, want 2", len(commits))
	}
	// A cursor commit leaves the epoch to the cursor; explicit offsets carry the batch's.
	if c := commits[0]; c.MemberID != "m1" || c.MemberEpoch != 0 || c.Cursor != b.Cursor || len(c.Offsets) != 0 {
		t.Fatalf("cursor commit %+v", c)
	}
	if c := commits[1]; c.MemberID != "m1" || c.MemberEpoch != 1 || c.Cursor != "" || len(c.Offsets) != 1 {
		t.Fatalf("offsets commit %+v", c)
	}
	if _, err := g.Commit(ctx, "not a cursor!"); !errors.Is(err, &api.Error{Code: api.CodeInvalidRequest}) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// TestGroupConsumerHeartbeats: an idle member heartbeats every interval; a
// polling one does not need to; Close stops the heartbeats and leaves.
func TestGroupConsumerHeartbeats(t *testing.T) {
	f := newFakeGroups(t, 1<<40)
	cl := f.client(t)
	ctx := testCtx(t)
	g := cl.NewGroupConsumer("g", client.GroupConsumerOptions{Topics: []string{"t"}, MaxWait: -1, MaxRecords: 1})
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "three heartbeats of an idle member", func() bool {
		_, hb, _, _ := f.snapshot()
		return len(hb) >= 3
	})

	// A heartbeat brings a changed assignment.
	f.mu.Lock()
	f.epoch, f.assignment = 2, []api.TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	f.mu.Unlock()
	waitFor(t, 5*time.Second, "the new assignment", func() bool { return len(g.Assignment()) == 2 && g.MemberEpoch() == 2 })

	// Busy: polls renew the session; no heartbeat is needed (one may be in
	// flight as polling starts).
	// A poll that itself takes a whole interval (a loaded machine) leaves
	// room for one heartbeat; those are allowed for.
	_, before, _, _ := f.snapshot()
	end := time.Now().Add(400 * time.Millisecond)
	slow := 0
	for time.Now().Before(end) {
		start := time.Now()
		if _, err := g.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) >= 50*time.Millisecond {
			slow++
		}
	}
	if _, after, _, _ := f.snapshot(); len(after)-len(before) > 1+slow {
		t.Fatalf("%d heartbeats while polling for 400 ms with a 50 ms interval (%d polls took an interval or more)", len(after)-len(before), slow)
	}

	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, hb, leaves, _ := f.snapshot()
	if len(leaves) != 1 || leaves[0] != "m1" {
		t.Fatalf("leaves %v", leaves)
	}
	time.Sleep(200 * time.Millisecond)
	if _, hb2, _, _ := f.snapshot(); len(hb2) != len(hb) {
		t.Fatalf("%d heartbeats after Close", len(hb2)-len(hb))
	}
	if _, err := g.Poll(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("poll after Close: %v", err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGroupConsumerRejoins: a member whose session expired is joined again
// by Poll when Rejoin is set, and reported otherwise.
func TestGroupConsumerRejoins(t *testing.T) {
	for _, rejoin := range []bool{true, false} {
		t.Run(fmt.Sprintf("rejoin=%v", rejoin), func(t *testing.T) {
			f := newFakeGroups(t, 30)
			f.hbMs = 60_000 // no heartbeat gets in the way
			cl := f.client(t)
			ctx := testCtx(t)
			g := cl.NewGroupConsumer("g", client.GroupConsumerOptions{Topics: []string{"t"}, MaxWait: -1, MaxRecords: 10, Rejoin: rejoin})
			if err := g.Join(ctx); err != nil {
				t.Fatal(err)
			}
			defer g.Close(ctx)
			if _, err := g.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			delete(f.members, "m1") // the session expired
			f.mu.Unlock()
			b, err := g.Poll(ctx)
			if !rejoin {
				if !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) || g.MemberID() != "" {
					t.Fatalf("poll of an expired member: %v (member %q)", err, g.MemberID())
				}
				if _, err := g.Poll(ctx); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
					t.Fatalf("second poll: %v", err)
				}
				return
			}
			// The new member reads from the committed offsets (none here):
			// uncommitted records come again.
			if err != nil || g.MemberID() != "m2" || !sameOffsets(offsetsOf(b.Records), span(0, 10)) {
				t.Fatalf("poll after expiry: %v, %v (member %q)", offsetsOf(b.Records), err, g.MemberID())
			}
		})
	}
}

func TestGroupConsumerFencedInstance(t *testing.T) {
	f := newFakeGroups(t, 30)
	cl := f.client(t)
	ctx := testCtx(t)
	g := cl.NewGroupConsumer("g", client.GroupConsumerOptions{Topics: []string{"t"}, MaxWait: -1, InstanceID: "i", Rejoin: true})
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	f.mu.Lock()
	f.failPolls = []api.Code{api.CodeFencedInstanceID}
	f.mu.Unlock()
	for i := range 2 {
		if _, err := g.Poll(ctx); !errors.Is(err, &api.Error{Code: api.CodeFencedInstanceID}) {
			t.Fatalf("poll %d of a fenced member: %v", i, err)
		}
	}
	if polls, _, _, _ := f.snapshot(); len(polls) != 1 {
		t.Fatalf("%d polls: a fenced member should stop asking", len(polls))
	}
}

// TestGroupAdminCalls checks the admin routes' requests and answers.
func TestGroupAdminCalls(t *testing.T) {
	f := newFakeGroups(t, 0)
	cl := f.client(t)
	ctx := testCtx(t)
	if l, err := cl.ListGroups(ctx); err != nil || len(l) != 1 || l[0].Group != "g" {
		t.Fatalf("list %+v, %v", l, err)
	}
	if d, err := cl.DescribeGroup(ctx, "g"); err != nil || d.GroupEpoch != 3 || d.Partitions[0].Lag != 4 {
		t.Fatalf("describe %+v, %v", d, err)
	}
	if r, err := cl.ResetOffsets(ctx, "g", api.ResetOffsetsRequest{Topics: []string{"t"}, To: "offset:0"}); err != nil || len(r.Committed) != 1 {
		t.Fatalf("reset %+v, %v", r, err)
	}
	if err := cl.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteGroup(ctx, "gone"); !errors.Is(err, &api.Error{Code: api.CodeUnknownGroup}) {
		t.Fatalf("delete of a missing group: %v", err)
	}
	if err := cl.LeaveGroup(ctx, "g", "nobody"); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		t.Fatalf("leave of a missing member: %v", err)
	}
	f.mu.Lock()
	other := f.other
	f.mu.Unlock()
	want := []string{"GET /v1/groups ", "GET /v1/groups/g ", `POST /v1/groups/g/offsets/reset {"topics":["t"],"to":"offset:0"}`, "DELETE /v1/groups/g ", "DELETE /v1/groups/gone "}
	if fmt.Sprint(other) != fmt.Sprint(want) {
		t.Fatalf("requests\n%q\nwant\n%q", other, want)
	}
}
