package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// consumerState is a group's state under the consumer group protocol's
// names (KIP-848): a group whose members have not all reached their
// targets is reconciling.
func consumerState(state string) string {
	switch state {
	case api.GroupEmpty:
		return "Empty"
	case api.GroupStable:
		return "Stable"
	case api.GroupRebalancing:
		return "Reconciling"
	}
	return "Dead"
}

// Member types of ConsumerGroupDescribe v1.
const (
	memberTypeUnknown  int8 = -1 // HTTP and WebSocket members
	memberTypeClassic  int8 = 0
	memberTypeConsumer int8 = 1
)

// handleConsumerGroupDescribe describes groups as KIP-848 shows them:
// group epoch, assignor, and each member's epoch, subscription (names, and
// a regular expression), current
// assignment (what it holds now, partitions pending revocation included)
// and target, by topic ID and name. Every group is described, whatever
// protocol its members run: HTTP and WebSocket members show their kind as
// client id and member type -1, classic Kafka members type 0. The targets
// are computed when the group epoch bumps, so the assignment epoch is the
// group epoch. A group that does not exist is GROUP_ID_NOT_FOUND.
// Authorized operations are not computed (the field keeps its default).
func (s *Server) handleConsumerGroupDescribe(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	if len(req.Groups) > maxDescribeGroups {
		return nil, api.Errorf(api.CodeInvalidRequest, "ConsumerGroupDescribe asks for %d groups, more than %d", len(req.Groups), maxDescribeGroups)
	}
	gb, ok := s.groupsBackend()
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	md := s.opts.Backend.Metadata()
	assignment := func(tps []api.TopicPartition) kmsg.Assignment {
		tps = slices.Clone(tps)
		sortTopicPartitions(tps)
		var a kmsg.Assignment
		a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
		for _, tp := range tps {
			if n := len(a.TopicPartitions); n == 0 || a.TopicPartitions[n-1].Topic != tp.Topic {
				t := kmsg.NewAssignmentTopicPartition()
				t.Topic = tp.Topic
				if tm, ok := md.Topics[tp.Topic]; ok {
					t.TopicID = topicID(tm.Record)
				}
				a.TopicPartitions = append(a.TopicPartitions, t)
			}
			last := &a.TopicPartitions[len(a.TopicPartitions)-1]
			last.Partitions = append(last.Partitions, tp.Partition)
		}
		return a
	}
	for _, group := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group, rg.State = group, "Dead"
		var d GroupDescription
		found := false
		err := api.ValidateGroupID(group)
		switch {
		case !ok:
			err = errNoGroups
		case err == nil:
			d, found, err = gb.DescribeGroup(ctx, group)
		}
		switch {
		case err != nil:
			rg.ErrorCode, rg.ErrorMessage = errorCode(err), errorMessage(err)
		case !found:
			rg.ErrorCode, rg.ErrorMessage = kerr.GroupIDNotFound.Code, kmsg.StringPtr("group "+group+" does not exist")
		default:
			rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = consumerState(d.State), d.Epoch, d.Epoch, d.Assignor
			rg.Members = []kmsg.ConsumerGroupDescribeResponseGroupMember{}
			for _, m := range d.Members {
				rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.MemberID, m.Epoch, m.ClientID, m.ClientHost
				rm.SubscribedTopics = slices.Clone(m.Topics)
				if rm.SubscribedTopics == nil {
					rm.SubscribedTopics = []string{}
				}
				if m.TopicRegex != "" {
					rm.SubscribedTopicRegex = kmsg.StringPtr(m.TopicRegex)
				}
				if m.InstanceID != "" {
					rm.InstanceID = kmsg.StringPtr(m.InstanceID)
				}
				switch {
				case m.Kind != api.MemberKindKafka:
					rm.ClientID, rm.MemberType = m.Kind, memberTypeUnknown
				case m.Consumer:
					rm.MemberType = memberTypeConsumer
				default:
					rm.MemberType = memberTypeClassic
				}
				rm.Assignment, rm.TargetAssignment = assignment(m.Assignment), assignment(m.Target)
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
