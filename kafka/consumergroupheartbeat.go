package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// ConsumerGroups is the coordinator as Kafka's consumer group protocol
// (KIP-848, ConsumerGroupHeartbeat) reaches it, on the same groups as the
// classic protocol, HTTP and WebSocket members. A Backend that serves it
// implements it too; against one that does not, the heartbeat is answered
// UNSUPPORTED_VERSION, which makes franz-go fall back to the classic
// protocol.
type ConsumerGroups interface {
	// ConsumerHeartbeat runs one heartbeat (a join at epoch 0, a leave at
	// -1 or -2) and answers the member's epoch and assignment.
	ConsumerHeartbeat(ctx context.Context, group string, h ConsumerHeartbeat) (ConsumerHeartbeatResult, error)
}

// ConsumerHeartbeat is a decoded ConsumerGroupHeartbeat.
type ConsumerHeartbeat struct {
	MemberID   string
	InstanceID string
	Epoch      int32
	Topics     []string // nil: unchanged
	// TopicRegex is the subscription by regular expression, resolved by
	// the coordinator; nil: unchanged, "": none.
	TopicRegex *string
	Owned      []api.TopicPartition // nil: unchanged
	// RebalanceTimeoutMs is -1 when unchanged.
	RebalanceTimeoutMs int32
	ServerAssignor     string
	ClientID           string
	ClientHost         string
}

// ConsumerHeartbeatResult answers a heartbeat that did not leave.
type ConsumerHeartbeatResult struct {
	Epoch               int32
	HeartbeatIntervalMs int32
	Assignment          []api.TopicPartition
}

// handleConsumerGroupHeartbeat serves KIP-848 members. Owned partitions
// come by topic ID (one this broker's metadata does not know is left
// out: the member cannot own it), the assignment goes back by topic ID,
// and the answer always carries the whole assignment. A subscription by
// regular expression goes to the coordinator, which resolves it (one that
// does not compile, or is too long, is INVALID_REGULAR_EXPRESSION); a
// member may send names and an expression, and subscribes to both.
func (s *Server) handleConsumerGroupHeartbeat(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(code int16, err error) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = code, errorMessage(err)
		return resp, nil
	}
	cg, ok := s.opts.Backend.(ConsumerGroups)
	if !ok {
		return fail(kerr.UnsupportedVersion.Code, nil)
	}
	if err := api.ValidateGroupID(req.Group); err != nil {
		return fail(errorCode(err), err)
	}
	switch {
	case req.MemberEpoch < -2:
		return fail(kerr.InvalidRequest.Code, api.Errorf(api.CodeInvalidRequest, "member epoch %d", req.MemberEpoch))
	case len(req.MemberID) > maxMemberIDBytes:
		return fail(kerr.UnknownMemberID.Code, api.Errorf(api.CodeUnknownMemberID, "the member id is longer than %d bytes", maxMemberIDBytes))
	case req.MemberID == "" && req.MemberEpoch != 0:
		return fail(kerr.UnknownMemberID.Code, api.Errorf(api.CodeUnknownMemberID, "a member id is needed at epoch %d", req.MemberEpoch))
	case req.ServerAssignor != nil && *req.ServerAssignor != api.AssignorUniform && *req.ServerAssignor != api.AssignorRange:
		return fail(kerr.UnsupportedAssignor.Code, api.Errorf(api.CodeInvalidRequest, "assignor %q: uniform and range are served", *req.ServerAssignor))
	case req.MemberEpoch == 0 && len(req.Topics) > 0:
		return fail(kerr.InvalidRequest.Code, api.Errorf(api.CodeInvalidRequest, "a join owns no partitions"))
	}
	h := ConsumerHeartbeat{MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Epoch: req.MemberEpoch,
		Topics: req.SubscribedTopicNames, TopicRegex: req.SubscribedTopicRegex, RebalanceTimeoutMs: req.RebalanceTimeoutMillis, ServerAssignor: deref(req.ServerAssignor),
		ClientID: truncate(c.clientID, maxClientIDBytes), ClientHost: c.ip}
	if h.MemberID == "" {
		h.MemberID = newMemberID(c.clientID) // v0: the broker names the member
	}
	if h.Epoch == 0 && h.Topics == nil {
		h.Topics = []string{}
	}
	if req.Topics != nil {
		md := s.opts.Backend.Metadata()
		h.Owned = []api.TopicPartition{}
		for _, t := range req.Topics {
			name, ok := s.ids.name(md, t.TopicID)
			if !ok {
				continue
			}
			for _, p := range t.Partitions {
				h.Owned = append(h.Owned, api.TopicPartition{Topic: name, Partition: p})
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	res, err := cg.ConsumerHeartbeat(ctx, req.Group, h)
	if err != nil {
		return fail(errorCode(err), err)
	}
	resp.MemberID, resp.MemberEpoch = kmsg.StringPtr(h.MemberID), req.MemberEpoch
	if req.MemberEpoch < 0 {
		return resp, nil
	}
	resp.MemberEpoch, resp.HeartbeatIntervalMillis = res.Epoch, res.HeartbeatIntervalMs
	md := s.opts.Backend.Metadata()
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
	for _, tp := range res.Assignment {
		tm, ok := md.Topics[tp.Topic]
		if !ok {
			continue
		}
		id := topicID(tm.Record)
		if n := len(a.Topics); n == 0 || a.Topics[n-1].TopicID != id {
			t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			t.TopicID = id
			a.Topics = append(a.Topics, t)
		}
		last := &a.Topics[len(a.Topics)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	resp.Assignment = &a
	return resp, nil
}
