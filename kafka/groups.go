package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// Groups is the broker's consumer-group coordinator as Kafka's classic
// group protocol reaches it. A Backend that serves groups implements it
// too; against one that does not, every group request is answered
// COORDINATOR_NOT_AVAILABLE. Each method runs one operation on the
// coordinator of the group's __consumer_offsets partition on this broker
// (NOT_COORDINATOR when this broker does not lead it), and returns once
// what it wrote is on the ISR. Errors are *api.Error values. Every method
// may be called from many connections at once.
type Groups interface {
	// JoinGroup joins or rejoins a Kafka member and answers at once (no
	// other member is waited for): the member's id and its generation,
	// which is its member epoch.
	JoinGroup(ctx context.Context, group string, j GroupJoin) (generation int32, err error)
	// SyncGroup returns what the member owns now that is still its target,
	// with the protocol it joined with.
	SyncGroup(ctx context.Context, group string, m GroupMember) (SyncResult, error)
	// Heartbeat renews the member's session; rejoin is true when its
	// assignment would change if it joined again.
	Heartbeat(ctx context.Context, group string, m GroupMember) (rejoin bool, err error)
	// LeaveGroup removes the member named by id or, with an empty id, by
	// instance id.
	LeaveGroup(ctx context.Context, group string, m GroupMember) error
	// CommitOffsets commits offsets for the member (an empty id and
	// generation -1: for an empty group). errs has one entry per offset,
	// nil where it was committed; err fails every one.
	CommitOffsets(ctx context.Context, group string, m GroupMember, offs []CommitOffset) (errs []error, err error)
	// FetchOffsets returns the group's committed offsets (none for an
	// unknown group).
	FetchOffsets(ctx context.Context, group string) (map[api.TopicPartition]CommittedOffset, error)
	// DescribeGroup describes one group; ok is false when it does not exist.
	DescribeGroup(ctx context.Context, group string) (d GroupDescription, ok bool, err error)
	// ListGroups lists the groups of every coordinator this broker leads.
	ListGroups(ctx context.Context) ([]GroupListing, error)
	// EnsureOffsetsTopic creates __consumer_offsets when it does not
	// exist, as the gateway does on the first HTTP group request (one made
	// first by another is fine), so that a cluster only Kafka clients use
	// gets its group coordinators too.
	EnsureOffsetsTopic(ctx context.Context) error
}

// GroupJoin is a decoded JoinGroup.
type GroupJoin struct {
	MemberID   string // assigned by the listener for a first join
	InstanceID string
	Topics     []string
	// Owned are the partitions the subscription says the client still
	// owns (cooperative clients list them).
	Owned              []api.TopicPartition
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32 // -1: not given (v0)
	Protocol           string
	// Version is the version of the client's ConsumerMemberMetadata; its
	// assignments are encoded at that version.
	Version    int16
	ClientID   string
	ClientHost string
}

// GroupMember names a member in a request after its join.
type GroupMember struct {
	MemberID   string
	InstanceID string
	Generation int32 // -1: not given
}

// SyncResult answers SyncGroup.
type SyncResult struct {
	Assignment []api.TopicPartition
	Protocol   string
	Version    int16
}

// CommitOffset is one partition of an OffsetCommit.
type CommitOffset struct {
	api.TopicPartition
	Offset      int64
	LeaderEpoch int32 // -1: none
	Metadata    string
}

// CommittedOffset is one partition of an OffsetFetch answer.
type CommittedOffset struct {
	Offset      int64
	LeaderEpoch int32 // -1: none was committed
	Metadata    string
}

// GroupDescription is a group as DescribeGroups shows it.
type GroupDescription struct {
	State   string // api.GroupEmpty, GroupStable or GroupRebalancing
	Members []GroupMemberDescription
	// Epoch is the group epoch: it bumps when membership, subscriptions
	// or partition counts change, and the targets are computed at it.
	Epoch int32
	// Assignor is the server-side assignor that computes the targets.
	Assignor string
}

// GroupMemberDescription is one member of any kind (Kafka, HTTP,
// WebSocket).
type GroupMemberDescription struct {
	MemberID   string
	InstanceID string
	Kind       string
	ClientID   string
	ClientHost string
	Topics     []string // the subscription by name
	// TopicRegex is a consumer-protocol member's subscription by regular
	// expression; "" for none.
	TopicRegex string
	Assignment []api.TopicPartition
	Protocol   string // a Kafka member's; "" for the others
	Version    int16
	// Epoch is the member's epoch (the group epoch its target was last
	// given at).
	Epoch int32
	// Target is where the assignor wants the member to end up, sorted.
	Target []api.TopicPartition
	// Consumer is set for a member of the consumer group protocol
	// (KIP-848); a Kafka member without it runs the classic one.
	Consumer bool
}

// GroupListing is one group in ListGroups.
type GroupListing struct {
	Group string
	State string
}

// consumerProtocol is the one protocol type served: Kafka consumers'.
// Connect workers and other group users encode subscriptions of their own,
// which the coordinator cannot assign.
const consumerProtocol = "consumer"

// groupTimeout bounds one coordinator operation a group request waits for.
const groupTimeout = 30 * time.Second

// groupsBackend returns the Backend's coordinator, if it serves groups.
func (s *Server) groupsBackend() (Groups, bool) {
	g, ok := s.opts.Backend.(Groups)
	return g, ok
}

var errNoGroups = api.Errorf(api.CodeCoordinatorNotAvail, "this broker serves no consumer groups")

// handleJoinGroup joins a Kafka member to a group of the server-side
// coordinator. A first join without a member id (v4+, not static) is
// answered MEMBER_ID_REQUIRED with the id to join with, as Kafka does. The
// answer comes at once: the generation is the member's epoch, and no
// member is the leader (the coordinator assigns; the member list is
// empty), so the client goes straight to SyncGroup.
func (s *Server) handleJoinGroup(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	fail := func(err error) (kmsg.Response, error) {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	gb, ok := s.groupsBackend()
	if !ok {
		return fail(errNoGroups)
	}
	if err := api.ValidateGroupID(req.Group); err != nil {
		return fail(err)
	}
	if req.ProtocolType != consumerProtocol || len(req.Protocols) == 0 {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	// Every protocol carries the same subscription; the first one is the
	// client's preferred assignor, and the one answered.
	first := req.Protocols[0]
	if len(req.MemberID) > maxMemberIDBytes {
		// Longer than any id this listener hands out.
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil
	}
	if len(first.Name) > maxProtocolNameBytes {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	var meta kmsg.ConsumerMemberMetadata
	if err := readSubscription(&meta, first.Metadata); err != nil {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	j := GroupJoin{MemberID: req.MemberID, Topics: meta.Topics, SessionTimeoutMs: req.SessionTimeoutMillis,
		RebalanceTimeoutMs: -1, Protocol: first.Name, Version: min(meta.Version, maxAssignmentVersion),
		ClientID: truncate(c.clientID, maxClientIDBytes), ClientHost: c.ip}
	if req.Version >= 1 {
		j.RebalanceTimeoutMs = req.RebalanceTimeoutMillis
	}
	if req.InstanceID != nil {
		j.InstanceID = *req.InstanceID
	}
	for _, t := range meta.OwnedPartitions {
		for _, p := range t.Partitions {
			j.Owned = append(j.Owned, api.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	if j.MemberID == "" {
		j.MemberID = newMemberID(c.clientID)
		if req.Version >= 4 && j.InstanceID == "" {
			resp.ErrorCode, resp.MemberID = kerr.MemberIDRequired.Code, j.MemberID
			return resp, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	gen, err := gb.JoinGroup(ctx, req.Group, j)
	if err != nil {
		return fail(err)
	}
	resp.Generation, resp.MemberID = gen, j.MemberID
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(consumerProtocol), kmsg.StringPtr(first.Name)
	return resp, nil
}

// Bounds on what a member's record keeps of a JoinGroup: every change to
// the group rewrites the record of all its members.
const (
	maxMemberIDBytes     = 255
	maxProtocolNameBytes = 255
	maxClientIDBytes     = 255
)

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// maxAssignmentVersion is the newest ConsumerMemberAssignment version
// encoded; a client announcing a newer subscription gets this one.
const maxAssignmentVersion = 3

// handleSyncGroup hands a member its assignment, encoded as the consumer
// protocol's ConsumerMemberAssignment at the version it subscribed with.
// What a leader sends is ignored: there is no client-side leader.
func (s *Server) handleSyncGroup(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	gb, ok := s.groupsBackend()
	if !ok {
		resp.ErrorCode = errorCode(errNoGroups)
		return resp, nil
	}
	if req.ProtocolType != nil && *req.ProtocolType != consumerProtocol {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	res, err := gb.SyncGroup(ctx, req.Group, GroupMember{MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Generation: req.Generation})
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	if req.Protocol != nil && *req.Protocol != res.Protocol {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(consumerProtocol), kmsg.StringPtr(res.Protocol)
	resp.MemberAssignment = encodeAssignment(res.Assignment, res.Version)
	return resp, nil
}

// encodeAssignment is a ConsumerMemberAssignment of tps (sorted by topic,
// then partition).
func encodeAssignment(tps []api.TopicPartition, version int16) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	a.Version = version
	for _, tp := range tps {
		if n := len(a.Topics); n == 0 || a.Topics[n-1].Topic != tp.Topic {
			t := kmsg.NewConsumerMemberAssignmentTopic()
			t.Topic = tp.Topic
			a.Topics = append(a.Topics, t)
		}
		last := &a.Topics[len(a.Topics)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return a.AppendTo(nil)
}

// handleHeartbeat renews a member's session; REBALANCE_IN_PROGRESS tells it
// to rejoin: to let go of partitions that move, or to take free ones.
func (s *Server) handleHeartbeat(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	gb, ok := s.groupsBackend()
	if !ok {
		resp.ErrorCode = errorCode(errNoGroups)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	rejoin, err := gb.Heartbeat(ctx, req.Group, GroupMember{MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Generation: req.Generation})
	switch {
	case err != nil:
		resp.ErrorCode = errorCode(err)
	case rejoin:
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
	return resp, nil
}

// handleLeaveGroup removes members: one by id (v0-v2), or a batch by id or
// instance id (v3+), each with its own answer.
func (s *Server) handleLeaveGroup(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	gb, ok := s.groupsBackend()
	if !ok {
		resp.ErrorCode = errorCode(errNoGroups)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	if req.Version < 3 {
		resp.ErrorCode = errorCode(gb.LeaveGroup(ctx, req.Group, GroupMember{MemberID: req.MemberID, Generation: -1}))
		return resp, nil
	}
	if len(req.Members) > maxLeaveMembers {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	for _, m := range req.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
		err := gb.LeaveGroup(ctx, req.Group, GroupMember{MemberID: m.MemberID, InstanceID: deref(m.InstanceID), Generation: -1})
		rm.ErrorCode = errorCode(err)
		if err != nil && api.Classify(err).Code != api.CodeUnknownMemberID && api.Classify(err).Code != api.CodeFencedInstanceID {
			resp.ErrorCode = rm.ErrorCode // the group failed, not the member
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}

// maxLeaveMembers bounds a LeaveGroup batch: each member is one coordinator
// write.
const maxLeaveMembers = 1000

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
