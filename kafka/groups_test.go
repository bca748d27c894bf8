package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/offsets"
)

// fakeGroups is a Backend that serves groups from an in-memory coordinator
// state: each operation runs on the state and its records are applied at
// once (the broker appends them to __consumer_offsets first).
type fakeGroups struct {
	*fakeBackend
	mu  sync.Mutex
	st  *offsets.State
	now time.Time
	// joins counts JoinGroup calls that reached the coordinator.
	joins int
}

func newFakeGroups() *fakeGroups {
	return &fakeGroups{fakeBackend: &fakeBackend{md: testMetadata()}, st: offsets.NewState(), now: time.UnixMilli(1_700_000_000_000)}
}

func (f *fakeGroups) meta(topic string) (int32, bool) {
	t, ok := f.md.Topics[topic]
	if !ok {
		return 0, false
	}
	return int32(t.Partitions()), true
}

func (f *fakeGroups) apply(recs []offsets.Record, err error) error {
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := f.st.Apply(r, f.now); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeGroups) JoinGroup(_ context.Context, group string, j GroupJoin) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins++
	p, err := offsets.ValidateClassicJoin(offsets.ClassicJoinRequest{Topics: j.Topics, Owned: j.Owned, InstanceID: j.InstanceID,
		SessionTimeoutMs: j.SessionTimeoutMs, RebalanceTimeoutMs: j.RebalanceTimeoutMs, Protocol: j.Protocol, Version: j.Version,
		ClientID: j.ClientID, ClientHost: j.ClientHost})
	if err != nil {
		return 0, err
	}
	if err := f.apply(f.st.JoinClassic(group, j.MemberID, p, f.meta, f.now)); err != nil {
		return 0, err
	}
	m, err := f.st.Member(group, j.MemberID)
	if err != nil {
		return 0, err
	}
	return m.Epoch, nil
}

func (f *fakeGroups) SyncGroup(_ context.Context, group string, m GroupMember) (SyncResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tps, cm, err := f.st.SyncClassic(group, m.MemberID, m.InstanceID, m.Generation, f.now)
	return SyncResult{Assignment: tps, Protocol: cm.Protocol, Version: cm.Version}, err
}

func (f *fakeGroups) Heartbeat(_ context.Context, group string, m GroupMember) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	recs, rejoin, err := f.st.HeartbeatClassic(group, m.MemberID, m.InstanceID, m.Generation, f.meta, f.now)
	return rejoin, f.apply(recs, err)
}

func (f *fakeGroups) LeaveGroup(_ context.Context, group string, m GroupMember) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apply(f.st.LeaveClassic(group, m.MemberID, m.InstanceID, f.meta))
}

func (f *fakeGroups) CommitOffsets(_ context.Context, group string, m GroupMember, offs []CommitOffset) ([]error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	co := make([]offsets.ClassicOffset, len(offs))
	for i, o := range offs {
		co[i] = offsets.ClassicOffset{TopicPartition: o.TopicPartition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
	}
	recs, errs, err := f.st.CommitClassic(group, m.MemberID, m.InstanceID, m.Generation, co, f.meta, f.now)
	return errs, f.apply(recs, err)
}

func (f *fakeGroups) FetchOffsets(_ context.Context, group string) (map[api.TopicPartition]CommittedOffset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[api.TopicPartition]CommittedOffset{}
	for tp, ov := range f.st.Committed(group) {
		c := CommittedOffset{Offset: ov.Offset, LeaderEpoch: -1, Metadata: ov.Metadata}
		if ov.LeaderEpoch != nil {
			c.LeaderEpoch = *ov.LeaderEpoch
		}
		out[tp] = c
	}
	return out, nil
}

func (f *fakeGroups) DescribeGroup(_ context.Context, group string) (GroupDescription, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.st.Group(group)
	if g == nil {
		return GroupDescription{}, false, nil
	}
	desc, _ := f.st.Describe(group)
	d := GroupDescription{State: g.State(), Epoch: desc.GroupEpoch, Assignor: desc.Assignor}
	for _, dm := range desc.Members {
		m := g.Members[dm.MemberID]
		md := GroupMemberDescription{MemberID: m.ID, Kind: m.Kind, Topics: m.Topics, Assignment: dm.Assignment,
			Epoch: m.Epoch, Target: m.Target, Consumer: m.Consumer != nil}
		if m.Classic != nil {
			md.ClientID, md.Protocol, md.Version = m.Classic.ClientID, m.Classic.Protocol, m.Classic.Version
		}
		d.Members = append(d.Members, md)
	}
	return d, true, nil
}

// EnsureOffsetsTopic: the fake's metadata has the topic already.
func (f *fakeGroups) EnsureOffsetsTopic(context.Context) error { return nil }

func (f *fakeGroups) ListGroups(context.Context) ([]GroupListing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []GroupListing
	for _, g := range f.st.Groups() {
		out = append(out, GroupListing{Group: g, State: f.st.Group(g).State()})
	}
	return out, nil
}

// httpJoin adds an HTTP member to the fake's state.
func (f *fakeGroups) httpJoin(t *testing.T, group, id string, topics ...string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := offsets.ValidateJoin(api.JoinGroupRequest{Topics: topics}, api.MemberKindHTTP, f.meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.apply(f.st.Join(group, id, p, f.meta, f.now)); err != nil {
		t.Fatal(err)
	}
}

// httpHeartbeat is an HTTP member's request: it gives up what moved.
func (f *fakeGroups) httpHeartbeat(t *testing.T, group, id string) []api.TopicPartition {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.apply(f.st.Heartbeat(group, id, f.meta, f.now)); err != nil {
		t.Fatal(err)
	}
	m, err := f.st.Member(group, id)
	if err != nil {
		t.Fatal(err)
	}
	return m.Assignment()
}

// startGroupServer serves a fakeGroups on a loopback port.
func startGroupServer(t *testing.T, be Backend, opts ...Options) string {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Backend, o.Logger = be, slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return ln.Addr().String()
}

// subscription is a ConsumerMemberMetadata of version v.
func subscription(v int16, topics []string, owned map[string][]int32) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Version, m.Topics = v, topics
	for t, ps := range owned {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t, ps
		m.OwnedPartitions = append(m.OwnedPartitions, o)
	}
	return m.AppendTo(nil)
}

func joinReq(v int16, group, member string, meta []byte) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version, req.Group, req.MemberID, req.ProtocolType = v, group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "cooperative-sticky", meta
	req.Protocols = append(req.Protocols, p)
	return req
}

func syncReq(v int16, group, member string, gen int32) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version, req.Group, req.MemberID, req.Generation = v, group, member, gen
	if v >= 5 {
		req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("cooperative-sticky")
	}
	return req
}

func heartbeatReq(v int16, group, member string, gen int32) *kmsg.HeartbeatRequest {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.Generation = v, group, member, gen
	return req
}

// assignment decodes a SyncGroup answer's assignment into partitions of
// "orders".
func assignment(t *testing.T, resp *kmsg.SyncGroupResponse, wantVersion int16) []int32 {
	t.Helper()
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(resp.MemberAssignment); err != nil {
		t.Fatal(err)
	}
	if a.Version != wantVersion {
		t.Fatalf("assignment v%d, want v%d", a.Version, wantVersion)
	}
	var out []int32
	for _, at := range a.Topics {
		if at.Topic != "orders" {
			t.Fatalf("assignment of %q", at.Topic)
		}
		out = append(out, at.Partitions...)
	}
	return out
}

// A v4+ first join is told its member id (MEMBER_ID_REQUIRED) and joins
// with it; the answer comes at once, with no leader and no member list,
// the generation the member epoch; SyncGroup hands it the coordinator's
// assignment encoded at the subscription's version.
func TestJoinGroupMemberIDRequiredThenSync(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	for _, v := range []int16{4, 5, 7, 9} {
		group := "g" + string(rune('a'+v))
		resp := c.roundTrip(joinReq(v, group, "", subscription(1, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
			t.Fatalf("v%d first join: %v member %q", v, kerr.ErrorForCode(resp.ErrorCode), resp.MemberID)
		}
		id := resp.MemberID
		resp = c.roundTrip(joinReq(v, group, id, subscription(1, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != 0 || resp.MemberID != id || resp.Generation < 1 || resp.LeaderID != "" || len(resp.Members) != 0 {
			t.Fatalf("v%d join: %+v", v, resp)
		}
		if v >= 7 && (resp.ProtocolType == nil || *resp.ProtocolType != "consumer") || resp.Protocol == nil || *resp.Protocol != "cooperative-sticky" {
			t.Fatalf("v%d protocol %v %v", v, resp.ProtocolType, resp.Protocol)
		}
		sv := min(v, 5)
		sresp := c.roundTrip(syncReq(sv, group, id, resp.Generation)).(*kmsg.SyncGroupResponse)
		if sresp.ErrorCode != 0 {
			t.Fatalf("v%d sync: %v", sv, kerr.ErrorForCode(sresp.ErrorCode))
		}
		if got := assignment(t, sresp, 1); !slices.Equal(got, []int32{0, 1}) {
			t.Fatalf("v%d assigned %v", v, got)
		}
		// The same generation heartbeats; another is ILLEGAL_GENERATION.
		if hb := c.roundTrip(heartbeatReq(min(v, 4), group, id, resp.Generation)).(*kmsg.HeartbeatResponse); hb.ErrorCode != 0 {
			t.Fatalf("v%d heartbeat: %v", v, kerr.ErrorForCode(hb.ErrorCode))
		}
		if hb := c.roundTrip(heartbeatReq(min(v, 4), group, id, resp.Generation+1)).(*kmsg.HeartbeatResponse); hb.ErrorCode != kerr.IllegalGeneration.Code {
			t.Fatalf("v%d heartbeat at another generation: %v", v, kerr.ErrorForCode(hb.ErrorCode))
		}
	}
	// Before v4 (librdkafka's v0) the member joins at once with the id it
	// is given, and a v0 subscription gets a v0 assignment.
	resp := c.roundTrip(joinReq(0, "old", "", subscription(0, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 || resp.MemberID == "" || resp.Generation < 1 {
		t.Fatalf("v0 join: %+v", resp)
	}
	sresp := c.roundTrip(syncReq(0, "old", resp.MemberID, resp.Generation)).(*kmsg.SyncGroupResponse)
	if got := assignment(t, sresp, 0); sresp.ErrorCode != 0 || !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("v0 sync: %v %v", kerr.ErrorForCode(sresp.ErrorCode), got)
	}
}

// Requests the coordinator cannot serve get the Kafka codes a client acts
// on, and none of them reach its state.
func TestJoinGroupRefusals(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	sub := subscription(1, []string{"orders"}, nil)
	cases := []struct {
		name string
		req  func() *kmsg.JoinGroupRequest
		want *kerr.Error
	}{
		{"connect protocol", func() *kmsg.JoinGroupRequest {
			r := joinReq(5, "g", "m", sub)
			r.ProtocolType = "connect"
			return r
		}, kerr.InconsistentGroupProtocol},
		{"bad subscription", func() *kmsg.JoinGroupRequest { return joinReq(5, "g", "m", []byte{0xff}) }, kerr.InconsistentGroupProtocol},
		{"push group", func() *kmsg.JoinGroupRequest { return joinReq(5, "push.s", "m", sub) }, kerr.GroupAuthorizationFailed},
		{"bad group id", func() *kmsg.JoinGroupRequest { return joinReq(5, "a/b", "m", sub) }, kerr.InvalidGroupID},
		{"member id too long", func() *kmsg.JoinGroupRequest {
			return joinReq(5, "g", strings.Repeat("m", 256), sub)
		}, kerr.UnknownMemberID},
		{"protocol name too long", func() *kmsg.JoinGroupRequest {
			r := joinReq(5, "g", "m", sub)
			r.Protocols[0].Name = strings.Repeat("p", 256)
			return r
		}, kerr.InconsistentGroupProtocol},
		{"session too short", func() *kmsg.JoinGroupRequest {
			r := joinReq(5, "g", "m", sub)
			r.SessionTimeoutMillis = 10
			return r
		}, kerr.InvalidSessionTimeout},
	}
	for _, tc := range cases {
		resp := c.roundTrip(tc.req()).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != tc.want.Code {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(resp.ErrorCode), tc.want)
		}
	}
	f.mu.Lock()
	if g := f.st.Group("g"); g != nil && len(g.Members) > 0 {
		t.Errorf("a refused join joined: %+v", g.Members)
	}
	f.mu.Unlock()
	// Unknown members.
	if r := c.roundTrip(syncReq(3, "g", "nobody", 1)).(*kmsg.SyncGroupResponse); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("sync of nobody: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := c.roundTrip(heartbeatReq(3, "g", "nobody", 1)).(*kmsg.HeartbeatResponse); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("heartbeat of nobody: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// A partition moves from a Kafka member to another only once the first
// rejoined without it: until then the newcomer waits, heartbeats ask the
// owner to rejoin, and SyncGroup no longer hands the owner what moves.
func TestGroupPendingRevocation(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	join := func(id string, owned []int32) int32 {
		t.Helper()
		var o map[string][]int32
		if owned != nil {
			o = map[string][]int32{"orders": owned}
		}
		resp := c.roundTrip(joinReq(5, "g", id, subscription(1, []string{"orders"}, o))).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("join %s: %v", id, kerr.ErrorForCode(resp.ErrorCode))
		}
		return resp.Generation
	}
	sync := func(id string, gen int32) []int32 {
		t.Helper()
		r := c.roundTrip(syncReq(3, "g", id, gen)).(*kmsg.SyncGroupResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("sync %s: %v", id, kerr.ErrorForCode(r.ErrorCode))
		}
		return assignment(t, r, 1)
	}
	heartbeat := func(id string, gen int32) error {
		t.Helper()
		return kerr.ErrorForCode(c.roundTrip(heartbeatReq(3, "g", id, gen)).(*kmsg.HeartbeatResponse).ErrorCode)
	}

	genA := join("a", nil)
	if got := sync("a", genA); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("a alone: %v", got)
	}
	genB := join("b", nil)
	if got := sync("b", genB); len(got) != 0 {
		t.Fatalf("b got %v while a holds everything", got)
	}
	if err := heartbeat("b", genB); err != nil {
		t.Fatalf("b heartbeats while nothing is free: %v", err)
	}
	if err := heartbeat("a", genA); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("a must give a partition up: %v", err)
	}
	// a (cooperative) rejoins still owning both: it keeps them, and its
	// assignment leaves out the one that moves.
	genA = join("a", []int32{0, 1})
	kept := sync("a", genA)
	if len(kept) != 1 {
		t.Fatalf("a keeps %v", kept)
	}
	if err := heartbeat("b", genB); err != nil {
		t.Fatalf("b before a let go: %v", err)
	}
	if err := heartbeat("a", genA); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("a has not let go yet: %v", err)
	}
	// a lets go and rejoins owning what it kept: the partition is free.
	genA = join("a", kept)
	if got := sync("a", genA); !slices.Equal(got, kept) {
		t.Fatalf("a after letting go: %v", got)
	}
	if err := heartbeat("b", genB); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("b should rejoin for the free partition: %v", err)
	}
	genB = join("b", nil)
	gotB := sync("b", genB)
	if len(gotB) != 1 || gotB[0] == kept[0] {
		t.Fatalf("b got %v, a keeps %v", gotB, kept)
	}
	if heartbeat("a", genA) != nil || heartbeat("b", genB) != nil {
		t.Fatal("a stable group still rebalances")
	}
	// An HTTP member joins: it waits for the Kafka members to let go too.
	f.httpJoin(t, "g", "h", "orders")
	if got := f.httpHeartbeat(t, "g", "h"); len(got) != 0 {
		t.Fatalf("the HTTP member took %v from Kafka members that have not rejoined", got)
	}
}

// Commits keep the metadata string and leader epoch OffsetFetch answers
// with, at every version; what fails fails per partition.
func TestOffsetCommitFetch(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	jr := c.roundTrip(joinReq(3, "g", "", subscription(0, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(jr.ErrorCode))
	}
	commit := func(v int16, member string, gen int32, parts map[int32]string) map[int32]int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.MemberID, req.Generation = v, "g", member, gen
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "orders"
		for p, md := range parts {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, 100+int64(p), 7, kmsg.StringPtr(md)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := c.roundTrip(req).(*kmsg.OffsetCommitResponse)
		out := map[int32]int16{}
		for _, rp := range resp.Topics[0].Partitions {
			out[rp.Partition] = rp.ErrorCode
		}
		return out
	}
	big := string(make([]byte, api.MaxCommitMetadataBytes+1))
	got := commit(7, jr.MemberID, jr.Generation, map[int32]string{0: "m0", 1: big, 5: "x"})
	if got[0] != 0 || got[1] != kerr.OffsetMetadataTooLarge.Code || got[5] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("commit: %v", got)
	}
	if got := commit(7, jr.MemberID, jr.Generation+1, map[int32]string{0: "m0"}); got[0] != kerr.IllegalGeneration.Code {
		t.Fatalf("commit at another generation: %v", kerr.ErrorForCode(got[0]))
	}
	// No member id and generation -1 (an admin client) needs an empty group.
	if got := commit(7, "", -1, map[int32]string{1: "admin"}); got[1] != kerr.UnknownMemberID.Code {
		t.Fatalf("admin commit to a group with members: %v", kerr.ErrorForCode(got[1]))
	}
	if got := commit(2, jr.MemberID, jr.Generation, map[int32]string{1: "v2"}); got[1] != 0 {
		t.Fatalf("v2 commit: %v", kerr.ErrorForCode(got[1]))
	}

	// v1 (librdkafka's oldest) and v5+ with leader epochs; v8+ by group.
	for _, v := range []int16{1, 5, 7} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = v, "g"
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "orders", []int32{0, 1}
		req.Topics = append(req.Topics, rt)
		resp := c.roundTrip(req).(*kmsg.OffsetFetchResponse)
		ps := resp.Topics[0].Partitions
		if resp.ErrorCode != 0 || len(ps) != 2 || ps[0].Offset != 100 || *ps[0].Metadata != "m0" || ps[1].Offset != 101 || *ps[1].Metadata != "v2" {
			t.Fatalf("v%d fetch: %+v", v, resp)
		}
		if v >= 5 && (ps[0].LeaderEpoch != 7 || ps[1].LeaderEpoch != -1) {
			t.Fatalf("v%d leader epochs %d %d", v, ps[0].LeaderEpoch, ps[1].LeaderEpoch)
		}
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	for _, g := range []string{"g", "none"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g // no topics: every committed partition
		req.Groups = append(req.Groups, rg)
	}
	resp := c.roundTrip(req).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 2 || len(resp.Groups[0].Topics) != 1 || len(resp.Groups[0].Topics[0].Partitions) != 2 || len(resp.Groups[1].Topics) != 0 {
		t.Fatalf("v8 fetch: %+v", resp.Groups)
	}
	if p := resp.Groups[0].Topics[0].Partitions[0]; p.Offset != 100 || p.LeaderEpoch != 7 || *p.Metadata != "m0" {
		t.Fatalf("v8 partition 0: %+v", p)
	}

	// The member leaves (v3+: by id); now an admin commit is taken.
	lr := kmsg.NewPtrLeaveGroupRequest()
	lr.Version, lr.Group = 3, "g"
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = jr.MemberID
	lr.Members = append(lr.Members, lm, kmsg.LeaveGroupRequestMember{MemberID: "nobody"})
	lresp := c.roundTrip(lr).(*kmsg.LeaveGroupResponse)
	if lresp.ErrorCode != 0 || lresp.Members[0].ErrorCode != 0 || lresp.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %+v", lresp)
	}
	if got := commit(7, "", -1, map[int32]string{1: "admin"}); got[1] != 0 {
		t.Fatalf("admin commit to an empty group: %v", kerr.ErrorForCode(got[1]))
	}
}

// FindCoordinator names the leader of the group's __consumer_offsets
// partition at its Kafka address, one key (v0-v3) or many (v4+);
// transactions are not served.
func TestFindCoordinator(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	for _, v := range []int16{0, 1, 3} {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version, req.CoordinatorKey = v, "g"
		resp := c.roundTrip(req).(*kmsg.FindCoordinatorResponse)
		if resp.ErrorCode != 0 || resp.NodeID != 2 || resp.Host != "kafka-2.example" || resp.Port != 19092 {
			t.Fatalf("v%d: %+v", v, resp)
		}
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorKeys = 4, []string{"g", "h", "bad/id"}
	resp := c.roundTrip(req).(*kmsg.FindCoordinatorResponse)
	if len(resp.Coordinators) != 3 || resp.Coordinators[0].NodeID != 2 || resp.Coordinators[1].Key != "h" || resp.Coordinators[1].NodeID != 2 ||
		resp.Coordinators[2].ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("v4: %+v", resp.Coordinators)
	}
	req = kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorType, req.CoordinatorKeys = 4, 1, []string{"tx"}
	if resp := c.roundTrip(req).(*kmsg.FindCoordinatorResponse); resp.Coordinators[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transaction: %+v", resp.Coordinators)
	}
	// Without __consumer_offsets there is no coordinator yet.
	bare := newFakeGroups()
	delete(bare.md.Topics, api.OffsetsTopic)
	c = dial(t, startGroupServer(t, bare))
	req = kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorKey = 2, "g"
	if resp := c.roundTrip(req).(*kmsg.FindCoordinatorResponse); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code || resp.NodeID != -1 {
		t.Fatalf("no offsets topic: %+v", resp)
	}
}

// DescribeGroups shows every member, HTTP ones too, and ListGroups filters
// by state.
func TestDescribeListGroups(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	f.httpJoin(t, "g", "h", "orders")
	jr := c.roundTrip(joinReq(5, "g", "k", subscription(1, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(jr.ErrorCode))
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version, req.Groups = 5, []string{"g", "none"}
	resp := c.roundTrip(req).(*kmsg.DescribeGroupsResponse)
	g := resp.Groups[0]
	if g.ErrorCode != 0 || g.ProtocolType != "consumer" || g.Protocol != "cooperative-sticky" || len(g.Members) != 2 || g.State != "PreparingRebalance" {
		t.Fatalf("describe: %+v", g)
	}
	if resp.Groups[1].State != "Dead" {
		t.Fatalf("unknown group: %+v", resp.Groups[1])
	}
	byID := map[string]kmsg.DescribeGroupsResponseGroupMember{}
	for _, m := range g.Members {
		byID[m.MemberID] = m
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(byID["h"].MemberAssignment); err != nil || byID["h"].ClientID != "http" || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != 2 {
		t.Fatalf("HTTP member: %+v %+v %v", byID["h"], a, err)
	}
	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.Version = 4
	if resp := c.roundTrip(lreq).(*kmsg.ListGroupsResponse); len(resp.Groups) != 1 || resp.Groups[0].Group != "g" || resp.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list: %+v", resp.Groups)
	}
	lreq.StatesFilter = []string{"Stable"}
	if resp := c.roundTrip(lreq).(*kmsg.ListGroupsResponse); len(resp.Groups) != 0 {
		t.Fatalf("list stable: %+v", resp.Groups)
	}
}

// Against a Backend that serves no groups, every group API answers
// COORDINATOR_NOT_AVAILABLE.
func TestGroupsNotServed(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorKey = 2, "g"
	if resp := c.roundTrip(req).(*kmsg.FindCoordinatorResponse); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("find: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := c.roundTrip(joinReq(5, "g", "m", subscription(1, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("join: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// A static member (group.instance.id) joins without MEMBER_ID_REQUIRED; a
// new incarnation with the same instance id takes its place and
// partitions, and the old one is fenced.
func TestJoinGroupStatic(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	static := func() *kmsg.JoinGroupResponse {
		req := joinReq(5, "g", "", subscription(1, []string{"orders"}, nil))
		req.InstanceID = kmsg.StringPtr("host-1")
		return c.roundTrip(req).(*kmsg.JoinGroupResponse)
	}
	first := static()
	if first.ErrorCode != 0 || first.MemberID == "" {
		t.Fatalf("first incarnation: %v %q", kerr.ErrorForCode(first.ErrorCode), first.MemberID)
	}
	second := static()
	if second.ErrorCode != 0 || second.MemberID == first.MemberID || second.Generation <= first.Generation {
		t.Fatalf("second incarnation: %+v after %+v", second, first)
	}
	sync := syncReq(3, "g", second.MemberID, second.Generation)
	sync.InstanceID = kmsg.StringPtr("host-1")
	if r := c.roundTrip(sync).(*kmsg.SyncGroupResponse); r.ErrorCode != 0 || len(assignment(t, r, 1)) != 2 {
		t.Fatalf("second incarnation's sync: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	hb := heartbeatReq(3, "g", first.MemberID, first.Generation)
	hb.InstanceID = kmsg.StringPtr("host-1")
	if r := c.roundTrip(hb).(*kmsg.HeartbeatResponse); r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("first incarnation's heartbeat: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// With authentication required, a group request before SASL closes the
// connection: groups cannot be joined, committed to or described
// anonymously.
func TestGroupsNeedAuth(t *testing.T) {
	addr := startGroupServer(t, newFakeGroups(), Options{RequireAuth: true, Mechanisms: Mechanisms, Authenticator: &fakeAuth{}})
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.Version, find.CoordinatorKey = 2, "g"
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 7, "g"
	for _, req := range []kmsg.Request{find, joinReq(5, "g", "m", subscription(1, []string{"orders"}, nil)), fetch} {
		c := dial(t, addr)
		c.send(req)
		c.closed()
	}
}
