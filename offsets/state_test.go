package offsets

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// harness plays the coordinator's owner: every operation's records go to a
// log and are then applied, as the broker does after an acks=all append.
type harness struct {
	t    *testing.T
	s    *State
	log  []Record
	now  time.Time
	meta map[string]int32
	ids  int
}

func newHarness(t *testing.T, topics map[string]int32) *harness {
	return &harness{t: t, s: NewState(), now: time.Unix(1_700_000_000, 0), meta: topics}
}

func (h *harness) metadata(topic string) (int32, bool) {
	n, ok := h.meta[topic]
	return n, ok
}

func (h *harness) apply(recs []Record, err error) error {
	h.t.Helper()
	if err != nil {
		return err
	}
	for _, r := range recs {
		h.log = append(h.log, r)
		if err := h.s.Apply(r, h.now); err != nil {
			h.t.Fatal(err)
		}
	}
	h.checkOneOwner()
	return nil
}

func (h *harness) join(group string, req api.JoinGroupRequest) string {
	h.t.Helper()
	p, err := ValidateJoin(req, api.MemberKindHTTP, h.metadata)
	if err != nil {
		h.t.Fatal(err)
	}
	h.ids++
	id := fmt.Sprintf("m%d", h.ids)
	if err := h.apply(h.s.Join(group, id, p, h.metadata, h.now)); err != nil {
		h.t.Fatal(err)
	}
	return id
}

func (h *harness) heartbeat(group, id string) error {
	h.t.Helper()
	return h.apply(h.s.Heartbeat(group, id, h.metadata, h.now))
}

func (h *harness) owned(group, id string) []api.TopicPartition {
	m, err := h.s.Member(group, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Assignment()
}

// checkOneOwner: no partition ever has two owners in a group.
func (h *harness) checkOneOwner() {
	h.t.Helper()
	for _, gid := range h.s.Groups() {
		seen := map[api.TopicPartition]string{}
		for id, m := range h.s.Group(gid).Members {
			for _, tp := range m.Assignment() {
				if other, ok := seen[tp]; ok {
					h.t.Fatalf("group %s: %v owned by %s and %s", gid, tp, other, id)
				}
				seen[tp] = id
			}
		}
	}
}

// settle heartbeats every member until no assignment changes.
func (h *harness) settle(group string) {
	h.t.Helper()
	for range 10 {
		before := len(h.log)
		for _, id := range h.s.Group(group).memberIDs() {
			if err := h.heartbeat(group, id); err != nil {
				h.t.Fatal(err)
			}
		}
		if len(h.log) == before {
			return
		}
	}
	h.t.Fatal("assignment did not settle")
}

func counts(h *harness, group string) map[string]int {
	out := map[string]int{}
	total := 0
	for id, m := range h.s.Group(group).Members {
		out[id] = len(m.Owned)
		total += len(m.Owned)
	}
	out["total"] = total
	return out
}

func TestSplitJoinLeaveExpire(t *testing.T) {
	h := newHarness(t, map[string]int32{"orders": 6})
	req := api.JoinGroupRequest{Topics: []string{"orders"}, SessionTimeoutMs: 10_000}
	m1 := h.join("g", req)
	if got := len(h.owned("g", m1)); got != 6 {
		t.Fatalf("a lone member owns %d partitions, want 6", got)
	}
	m2 := h.join("g", req)
	m3 := h.join("g", req)
	// The newcomers own nothing until m1 gives partitions up.
	if n := len(h.owned("g", m2)) + len(h.owned("g", m3)); n != 0 {
		t.Fatalf("newcomers own %d partitions before m1 released any", n)
	}
	h.settle("g")
	if c := counts(h, "g"); c[m1] != 2 || c[m2] != 2 || c[m3] != 2 {
		t.Fatalf("three members: %v, want 2 each", c)
	}
	before := map[string][]api.TopicPartition{m1: h.owned("g", m1), m2: h.owned("g", m2), m3: h.owned("g", m3)}

	m4 := h.join("g", req)
	h.settle("g")
	c := counts(h, "g")
	if c["total"] != 6 || c[m4] < 1 || c[m4] > 2 {
		t.Fatalf("four members: %v", c)
	}
	// Sticky: the members that stay keep at least one of their partitions.
	for id, old := range before {
		kept := 0
		for _, tp := range h.owned("g", id) {
			for _, o := range old {
				if o == tp {
					kept++
				}
			}
		}
		if kept == 0 {
			t.Fatalf("%s kept none of %v", id, old)
		}
	}

	if err := h.apply(h.s.Leave("g", m2, h.metadata)); err != nil {
		t.Fatal(err)
	}
	h.settle("g")
	if c := counts(h, "g"); c["total"] != 6 || c[m1] != 2 || c[m3] != 2 || c[m4] != 2 {
		t.Fatalf("after m2 left: %v", c)
	}
	if err := h.heartbeat("g", m2); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		t.Fatalf("heartbeat of a member that left: %v, want UNKNOWN_MEMBER_ID", err)
	}

	// m3 goes silent past its session; the others keep beating.
	h.now = h.now.Add(6 * time.Second)
	if err := h.heartbeat("g", m1); err != nil {
		t.Fatal(err)
	}
	if err := h.heartbeat("g", m4); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(6 * time.Second)
	if err := h.apply(h.s.Expire(h.now, h.metadata), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Member("g", m3); err == nil {
		t.Fatal("m3 outlived its session")
	}
	h.settle("g")
	if c := counts(h, "g"); c["total"] != 6 || c[m1] != 3 || c[m4] != 3 {
		t.Fatalf("after m3 expired: %v", c)
	}
}

func TestCommitFencing(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	req := api.JoinGroupRequest{Topics: []string{"t"}}
	a := h.join("g", req)
	ma, _ := h.s.Member("g", a)
	epochA := ma.Epoch
	tp0 := api.PartitionOffset{Topic: "t", Partition: 0, Offset: 5}
	tp1 := api.PartitionOffset{Topic: "t", Partition: 1, Offset: 7}
	if err := h.apply(h.s.Commit("g", a, epochA, []api.PartitionOffset{tp0, tp1}, h.metadata, h.now)); err != nil {
		t.Fatal(err)
	}
	b := h.join("g", req)
	h.settle("g")
	ownedA := h.owned("g", a)
	if len(ownedA) != 1 {
		t.Fatalf("a owns %v", ownedA)
	}
	kept, lost := tp0, tp1
	if ownedA[0].Partition == 1 {
		kept, lost = tp1, tp0
	}
	// A commit of the partition a lost is refused and changes nothing,
	// while the one it kept (granted at an older epoch) still commits.
	lost.Offset, kept.Offset = 100, 50
	err := h.apply(h.s.Commit("g", a, epochA, []api.PartitionOffset{lost}, h.metadata, h.now))
	if !errors.Is(err, &api.Error{Code: api.CodeFencedMemberEpoch}) {
		t.Fatalf("commit of a lost partition: %v", err)
	}
	if err := h.apply(h.s.Commit("g", a, epochA, []api.PartitionOffset{kept}, h.metadata, h.now)); err != nil {
		t.Fatalf("commit of a kept partition at the old epoch: %v", err)
	}
	off := h.s.Group("g").Offsets[api.TopicPartition{Topic: lost.Topic, Partition: lost.Partition}].Offset
	if off == 100 {
		t.Fatal("a refused commit changed the offset")
	}
	// b's first poll starts at what a committed.
	plan, err := h.s.Plan("g", b, nil)
	if err != nil || len(plan.Starts) != 1 || plan.Starts[0].Offset != off {
		t.Fatalf("b's plan %+v %v, want start %d", plan, err, off)
	}
	// An epoch newer than the member's is refused too.
	if err := h.apply(h.s.Commit("g", a, epochA+10, []api.PartitionOffset{kept}, h.metadata, h.now)); !errors.Is(err, &api.Error{Code: api.CodeFencedMemberEpoch}) {
		t.Fatalf("commit at a future epoch: %v", err)
	}
}

func TestRegrantFencesOldEpoch(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	req := api.JoinGroupRequest{Topics: []string{"t"}}
	a := h.join("g", req)
	ma, _ := h.s.Member("g", a)
	old := ma.Epoch
	b := h.join("g", req) // a keeps t/0 (sticky), t/1 moves to b
	h.settle("g")
	if got := h.owned("g", b); len(got) != 1 || got[0].Partition != 1 {
		t.Fatalf("b owns %v, want t/1", got)
	}
	if err := h.apply(h.s.Leave("g", b, h.metadata)); err != nil {
		t.Fatal(err)
	}
	h.settle("g")
	if got := h.owned("g", a); len(got) != 2 {
		t.Fatalf("a owns %v after b left", got)
	}
	// t/1 came back to a at a newer epoch: a commit made at the epoch from
	// before it was taken away is refused; t/0, held throughout, is not.
	err := h.apply(h.s.Commit("g", a, old, []api.PartitionOffset{{Topic: "t", Partition: 1, Offset: 1}}, h.metadata, h.now))
	if !errors.Is(err, &api.Error{Code: api.CodeFencedMemberEpoch}) {
		t.Fatalf("commit at the epoch from before the partition was taken away and given back: %v", err)
	}
	if err := h.apply(h.s.Commit("g", a, old, []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 1}}, h.metadata, h.now)); err != nil {
		t.Fatalf("commit of the partition held throughout: %v", err)
	}
}

func TestStaticMemberTakeover(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 4})
	req := api.JoinGroupRequest{Topics: []string{"t"}, InstanceID: "worker-1"}
	a := h.join("g", req)
	other := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}})
	h.settle("g")
	before := h.owned("g", a)
	epochBefore := h.s.Group("g").Epoch
	a2 := h.join("g", req)
	if got := h.owned("g", a2); !reflect.DeepEqual(got, before) {
		t.Fatalf("takeover owns %v, want %v", got, before)
	}
	if h.s.Group("g").Epoch != epochBefore {
		t.Fatal("a static rejoin rebalanced the group")
	}
	if err := h.heartbeat("g", a); !errors.Is(err, &api.Error{Code: api.CodeFencedInstanceID}) {
		t.Fatalf("old incarnation: %v, want FENCED_INSTANCE_ID", err)
	}
	_ = other
}

func TestReplayRebuildsState(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 3, "b": 2})
	m1 := h.join("g1", api.JoinGroupRequest{Topics: []string{"a", "b"}})
	m2 := h.join("g1", api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: "i"})
	h.join("g2", api.JoinGroupRequest{Topics: []string{"b"}, Assignor: "range"})
	h.settle("g1")
	h.settle("g2")
	m1v, _ := h.s.Member("g1", m1)
	for _, tp := range m1v.Assignment() {
		if err := h.apply(h.s.Commit("g1", m1, m1v.Epoch, []api.PartitionOffset{{Topic: tp.Topic, Partition: tp.Partition, Offset: 42}}, h.metadata, h.now)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.apply(h.s.Leave("g1", m2, h.metadata)); err != nil {
		t.Fatal(err)
	}

	replayed := NewState()
	for _, r := range h.log {
		if err := replayed.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"g1", "g2"} {
		want, _ := h.s.Describe(g)
		got, _ := replayed.Describe(g)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s replayed:\n%+v\nwant\n%+v", g, got, want)
		}
	}
	// Compaction keeps the last record per key: replaying only those gives
	// the same state.
	last := map[string]Record{}
	var order []string
	for _, r := range h.log {
		if _, ok := last[string(r.Key)]; !ok {
			order = append(order, string(r.Key))
		}
		last[string(r.Key)] = r
	}
	compacted := NewState()
	for _, k := range order {
		if err := compacted.Apply(last[k], h.now); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"g1", "g2"} {
		want, _ := h.s.Describe(g)
		got, _ := compacted.Describe(g)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s from compacted records:\n%+v\nwant\n%+v", g, got, want)
		}
	}
}

func TestPollPositionsAndAutoCommit(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 1})
	m := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}, AutoCommit: true, AutoOffsetReset: "latest"})
	tp := api.TopicPartition{Topic: "t", Partition: 0}
	plan, _ := h.s.Plan("g", m, nil)
	if plan.Starts[0].Offset != -1 || plan.Starts[0].Reset != "latest" {
		t.Fatalf("first plan %+v, want a reset to latest", plan)
	}
	h.s.EndPoll("g", m, []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 10}}, h.now)
	// The next poll without a cursor reads on at 10 and auto-commits 10.
	if err := h.apply(h.s.StartPoll("g", m, nil, h.metadata, h.now)); err != nil {
		t.Fatal(err)
	}
	if plan, _ := h.s.Plan("g", m, nil); plan.Starts[0].Offset != 10 {
		t.Fatalf("second plan %+v, want 10", plan)
	}
	if got := h.s.Group("g").Offsets[tp].Offset; got != 10 {
		t.Fatalf("auto-committed %d, want 10", got)
	}
	// A cursor names the positions: an older cursor is read again from its positions.
	c := &api.Cursor{Epoch: plan.MemberEpoch, Positions: []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 4}}}
	dc, err := api.DecodeCursor(c.Encode())
	if err != nil || !reflect.DeepEqual(dc, *c) {
		t.Fatalf("cursor round trip: %+v %v", dc, err)
	}
	if plan, _ := h.s.Plan("g", m, &dc); plan.Starts[0].Offset != 4 {
		t.Fatalf("plan with cursor %+v, want 4", plan)
	}
	for _, bad := range []string{"!!", "e30", "eyJlIjoxLCJwIjp7InQiOltbLTEsMl1dfX0"} {
		if _, err := api.DecodeCursor(bad); err == nil && bad != "e30" {
			t.Fatalf("cursor %q accepted", bad)
		}
	}
}

func TestRangeAssignor(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 5})
	req := api.JoinGroupRequest{Topics: []string{"a"}, Assignor: "range"}
	m1 := h.join("g", req)
	m2 := h.join("g", req)
	h.settle("g")
	want1 := []api.TopicPartition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}, {Topic: "a", Partition: 2}}
	if got := h.owned("g", m1); !reflect.DeepEqual(got, want1) {
		t.Fatalf("m1 owns %v, want %v", got, want1)
	}
	if got := len(h.owned("g", m2)); got != 2 {
		t.Fatalf("m2 owns %d, want 2", got)
	}
}

func TestPartitionsAdded(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 2})
	m1 := h.join("g", api.JoinGroupRequest{Topics: []string{"a"}})
	h.meta["a"] = 4
	h.settle("g")
	if got := len(h.owned("g", m1)); got != 4 {
		t.Fatalf("after the topic grew the member owns %d, want 4", got)
	}
}

func TestResetAndDeleteNeedEmptyGroup(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 1})
	m := h.join("g", api.JoinGroupRequest{Topics: []string{"a"}})
	offs := []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 3}}
	if err := h.apply(h.s.SetOffsets("g", offs, h.now)); !errors.Is(err, &api.Error{Code: api.CodeGroupNotEmpty}) {
		t.Fatalf("reset with a member: %v", err)
	}
	if err := h.apply(h.s.Delete("g", false)); !errors.Is(err, &api.Error{Code: api.CodeGroupNotEmpty}) {
		t.Fatalf("delete with a member: %v", err)
	}
	if err := h.apply(h.s.Leave("g", m, h.metadata)); err != nil {
		t.Fatal(err)
	}
	if err := h.apply(h.s.SetOffsets("g", offs, h.now)); err != nil {
		t.Fatal(err)
	}
	if got := h.s.Group("g").Offsets[api.TopicPartition{Topic: "a"}].Offset; got != 3 {
		t.Fatalf("reset to %d, want 3", got)
	}
	if err := h.apply(h.s.Delete("g", false)); err != nil {
		t.Fatal(err)
	}
	if h.s.Group("g") != nil {
		t.Fatal("group survived its delete")
	}
	if _, err := h.s.Delete("g", false); !errors.Is(err, &api.Error{Code: api.CodeUnknownGroup}) {
		t.Fatalf("delete of a missing group: %v", err)
	}
}

func TestValidateJoin(t *testing.T) {
	meta := func(t string) (int32, bool) { return 3, t == "ok" }
	for _, tc := range []struct {
		name string
		req  api.JoinGroupRequest
		code api.Code
	}{
		{"no topics", api.JoinGroupRequest{}, api.CodeInvalidRequest},
		{"unknown topic", api.JoinGroupRequest{Topics: []string{"nope"}}, api.CodeUnknownTopic},
		{"bad topic name", api.JoinGroupRequest{Topics: []string{"a/b"}}, api.CodeInvalidTopicName},
		{"session too short", api.JoinGroupRequest{Topics: []string{"ok"}, SessionTimeoutMs: 10}, api.CodeInvalidRequest},
		{"bad reset", api.JoinGroupRequest{Topics: []string{"ok"}, AutoOffsetReset: "oldest"}, api.CodeInvalidRequest},
		{"bad assignor", api.JoinGroupRequest{Topics: []string{"ok"}, Assignor: "magic"}, api.CodeInvalidRequest},
		{"fine", api.JoinGroupRequest{Topics: []string{"ok", "ok"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ValidateJoin(tc.req, api.MemberKindHTTP, meta)
			if tc.code == "" {
				if err != nil || len(p.Topics) != 1 || p.Reset != "earliest" || p.SessionTimeout != DefaultSessionTimeout {
					t.Fatalf("%+v %v", p, err)
				}
				return
			}
			if api.Classify(err).Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
}

func TestGroupMaxSize(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 1})
	h.s.SetMaxGroupMembers(20)
	for range 20 {
		h.join("g", api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: ""})
	}
	p, _ := ValidateJoin(api.JoinGroupRequest{Topics: []string{"a"}}, api.MemberKindHTTP, h.metadata)
	if _, err := h.s.Join("g", "one-too-many", p, h.metadata, h.now); !errors.Is(err, &api.Error{Code: api.CodeGroupMaxSize}) {
		t.Fatalf("join past the limit: %v", err)
	}
}

// A coordinator holds at most max.groups.per.coordinator groups: a join or
// offset reset that would create one more is TOO_MANY_GROUPS, while the
// existing groups take joins and resets; deleting a group makes room.
func TestMaxGroups(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 1})
	h.s.SetMaxGroups(3)
	h.join("g1", api.JoinGroupRequest{Topics: []string{"a"}})
	h.join("g2", api.JoinGroupRequest{Topics: []string{"a"}})
	if err := h.apply(h.s.SetOffsets("g3", []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 1}}, h.now)); err != nil {
		t.Fatal(err)
	}
	p, _ := ValidateJoin(api.JoinGroupRequest{Topics: []string{"a"}}, api.MemberKindHTTP, h.metadata)
	if _, err := h.s.Join("g4", "m", p, h.metadata, h.now); !errors.Is(err, &api.Error{Code: api.CodeTooManyGroups}) {
		t.Fatalf("a join creating a fourth group: %v", err)
	}
	if _, err := h.s.SetOffsets("g4", []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 1}}, h.now); !errors.Is(err, &api.Error{Code: api.CodeTooManyGroups}) {
		t.Fatalf("an offset reset creating a fourth group: %v", err)
	}
	h.join("g1", api.JoinGroupRequest{Topics: []string{"a"}})
	h.join("g3", api.JoinGroupRequest{Topics: []string{"a"}})
	if err := h.apply(h.s.Delete("g2", false)); err == nil {
		t.Fatal("deleted a group with a member")
	}
	if err := h.apply(h.s.Leave("g2", h.s.Group("g2").memberIDs()[0], h.metadata)); err != nil {
		t.Fatal(err)
	}
	if err := h.apply(h.s.Delete("g2", false)); err != nil {
		t.Fatal(err)
	}
	h.join("g4", api.JoinGroupRequest{Topics: []string{"a"}})
	if got := len(h.s.Groups()); got != 3 {
		t.Fatalf("%d groups, want 3", got)
	}
}

// A poll that sends a cursor tells the coordinator where the previous poll
// ended: a later poll without one starts there.
func TestCursorPollRemembersPositions(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 1})
	m := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}})
	plan, _ := h.s.Plan("g", m, nil)
	c := &api.Cursor{Epoch: plan.MemberEpoch, Positions: []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: 7}}}
	if err := h.apply(h.s.StartPoll("g", m, c, h.metadata, h.now)); err != nil {
		t.Fatal(err)
	}
	if plan, _ := h.s.Plan("g", m, nil); plan.Starts[0].Offset != 7 {
		t.Fatalf("a poll without a cursor after one with a cursor at 7 starts at %d", plan.Starts[0].Offset)
	}
}

// Fences grow from grant to grant of a partition, whichever member gets it,
// a static takeover included, and survive a replay.
func TestFencesOnlyGrow(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	fence := func(id string, p int32) int64 {
		m, err := h.s.Member("g", id)
		if err != nil {
			t.Fatal(err)
		}
		for _, gr := range m.Grants() {
			if gr.Partition == p {
				return gr.Fence
			}
		}
		return -1
	}
	a := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}, InstanceID: "a"})
	f1 := fence(a, 1)
	b := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}})
	h.settle("g")
	f2 := fence(b, 1)
	if f1 <= 0 || f2 <= f1 {
		t.Fatalf("t/1 granted to a with fence %d, then to b with %d: want growth", f1, f2)
	}
	if err := h.apply(h.s.Leave("g", b, h.metadata)); err != nil {
		t.Fatal(err)
	}
	h.settle("g")
	f3 := fence(a, 1)
	a2 := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}, InstanceID: "a"})
	f4 := fence(a2, 1)
	if f3 <= f2 || f4 <= f3 {
		t.Fatalf("fences %d, %d, %d, %d: want growth", f1, f2, f3, f4)
	}
	replayed := NewState()
	for _, r := range h.log {
		if err := replayed.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := replayed.Member("g", a2)
	if g := m.Grants(); g[1].Fence != f4 || replayed.Group("g").Fences < f4 {
		t.Fatalf("replayed grants %+v (fences %d), want t/1 at %d", g, replayed.Group("g").Fences, f4)
	}
}
