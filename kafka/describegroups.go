package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// maxDescribeGroups bounds the groups of one DescribeGroups.
const maxDescribeGroups = 1000

// classicState is a group's state under the classic protocol's names.
func classicState(state string) string {
	switch state {
	case api.GroupEmpty:
		return "Empty"
	case api.GroupStable:
		return "Stable"
	case api.GroupRebalancing:
		return "PreparingRebalance"
	}
	return "Dead"
}

// handleDescribeGroups describes groups with every member, whatever its
// kind: HTTP and WebSocket members show their kind as client id. Each
// member's metadata and assignment are encoded in the consumer protocol
// (its subscribed topics; the partitions it owns).
func (s *Server) handleDescribeGroups(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	if len(req.Groups) > maxDescribeGroups {
		return nil, api.Errorf(api.CodeInvalidRequest, "DescribeGroups asks for %d groups, more than %d", len(req.Groups), maxDescribeGroups)
	}
	gb, ok := s.groupsBackend()
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	for _, group := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
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
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		if found {
			rg.State, rg.ProtocolType = classicState(d.State), consumerProtocol
			for _, m := range d.Members {
				if rg.Protocol == "" {
					rg.Protocol = m.Protocol
				}
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.ClientID, rm.ClientHost = m.MemberID, m.ClientID, m.ClientHost
				if m.Kind != api.MemberKindKafka {
					rm.ClientID = m.Kind
				}
				if m.InstanceID != "" {
					rm.InstanceID = kmsg.StringPtr(m.InstanceID)
				}
				meta := kmsg.NewConsumerMemberMetadata()
				meta.Version, meta.Topics = m.Version, m.Topics
				rm.ProtocolMetadata = meta.AppendTo(nil)
				rm.MemberAssignment = encodeAssignment(m.Assignment, m.Version)
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// handleListGroups lists the groups this broker coordinates, as Kafka
// brokers do (a client asks every broker), filtered by state (v4+) and
// type (v5+: every group is "classic" to a classic client).
func (s *Server) handleListGroups(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	gb, ok := s.groupsBackend()
	if !ok {
		resp.ErrorCode = errorCode(errNoGroups)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	groups, err := gb.ListGroups(ctx)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	match := func(filter []string, v string) bool {
		return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
	}
	for _, g := range groups {
		state := classicState(g.State)
		if !match(req.StatesFilter, state) || !match(req.TypesFilter, "classic") {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = g.Group, consumerProtocol, state, "classic"
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func sortTopicPartitions(tps []api.TopicPartition) {
	slices.SortFunc(tps, func(a, b api.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
}
