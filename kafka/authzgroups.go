package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// authorizeGroups is authorize for the group APIs (the table in authz.go).
func (c *conn) authorizeGroups(kreq kmsg.Request) (kmsg.Response, func(kmsg.Response) kmsg.Response) {
	switch req := kreq.(type) {
	case *kmsg.JoinGroupRequest:
		if !c.allowedGroup(auth.OpRead, req.Group) {
			resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode, resp.Generation = groupRefused, -1
			return resp, nil
		}
	case *kmsg.SyncGroupRequest:
		if !c.allowedGroup(auth.OpRead, req.Group) {
			resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
			resp.ErrorCode = groupRefused
			return resp, nil
		}
	case *kmsg.HeartbeatRequest:
		if !c.allowedGroup(auth.OpRead, req.Group) {
			resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = groupRefused
			return resp, nil
		}
	case *kmsg.LeaveGroupRequest:
		if !c.allowedGroup(auth.OpRead, req.Group) {
			resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
			resp.ErrorCode = groupRefused
			return resp, nil
		}
	case *kmsg.ConsumerGroupHeartbeatRequest:
		if !c.allowedGroup(auth.OpRead, req.Group) {
			resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
			resp.ErrorCode, resp.MemberEpoch = groupRefused, -1
			resp.ErrorMessage = kmsg.StringPtr("not authorized to read the group")
			return resp, nil
		}
	case *kmsg.OffsetCommitRequest:
		return c.authorizeCommit(req)
	case *kmsg.OffsetFetchRequest:
		return c.authorizeOffsetFetch(req)
	case *kmsg.FindCoordinatorRequest:
		return c.authorizeFindCoordinator(req)
	case *kmsg.DescribeGroupsRequest:
		return nil, c.filterDescribeGroups
	case *kmsg.ConsumerGroupDescribeRequest:
		return nil, c.filterConsumerGroupDescribe
	case *kmsg.ListGroupsRequest:
		return nil, c.filterListGroups
	}
	return nil, nil
}

func (c *conn) authorizeCommit(req *kmsg.OffsetCommitRequest) (kmsg.Response, func(kmsg.Response) kmsg.Response) {
	refuseTopic := func(t kmsg.OffsetCommitRequestTopic, code int16) kmsg.OffsetCommitResponseTopic {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		return rt
	}
	if !c.allowedGroup(auth.OpRead, req.Group) {
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			resp.Topics = append(resp.Topics, refuseTopic(t, groupRefused))
		}
		return resp, nil
	}
	var refused []kmsg.OffsetCommitResponseTopic
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		if c.allowedTopic(auth.OpRead, t.Topic) {
			kept = append(kept, t)
		} else {
			refused = append(refused, refuseTopic(t, topicRefused))
		}
	}
	req.Topics = kept
	if refused == nil {
		return nil, nil
	}
	return nil, func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.OffsetCommitResponse)
		resp.Topics = append(resp.Topics, refused...)
		return resp
	}
}

// authorizeOffsetFetch checks DESCRIBE on the group (v0-v7: one group; v8+
// many) and filters the answer's topics by DESCRIBE: one asked for by name
// is refused per partition, one in an answer for every topic is left out.
func (c *conn) authorizeOffsetFetch(req *kmsg.OffsetFetchRequest) (kmsg.Response, func(kmsg.Response) kmsg.Response) {
	if req.Version < 8 {
		if !c.allowedGroup(auth.OpDescribe, req.Group) {
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = groupRefused
			for _, t := range req.Topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, groupRefused
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil
		}
		all := req.Topics == nil
		return nil, func(r kmsg.Response) kmsg.Response {
			resp := r.(*kmsg.OffsetFetchResponse)
			kept := resp.Topics[:0]
			for _, t := range resp.Topics {
				if !c.allowedTopic(auth.OpDescribe, t.Topic) {
					if all {
						continue
					}
					for j := range t.Partitions {
						t.Partitions[j].Offset, t.Partitions[j].Metadata, t.Partitions[j].ErrorCode = -1, nil, topicRefused
					}
				}
				kept = append(kept, t)
			}
			resp.Topics = kept
			return resp
		}
	}
	allOf := map[string]bool{}
	for _, g := range req.Groups {
		allOf[g.Group] = g.Topics == nil
	}
	return nil, func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.OffsetFetchResponse)
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if !c.allowedGroup(auth.OpDescribe, g.Group) {
				g.ErrorCode, g.Topics = groupRefused, nil
				continue
			}
			kept := g.Topics[:0]
			for _, t := range g.Topics {
				if !c.allowedTopic(auth.OpDescribe, t.Topic) {
					if allOf[g.Group] {
						continue
					}
					for j := range t.Partitions {
						t.Partitions[j].Offset, t.Partitions[j].Metadata, t.Partitions[j].ErrorCode = -1, nil, topicRefused
					}
				}
				kept = append(kept, t)
			}
			g.Topics = kept
		}
		return resp
	}
}

func (c *conn) authorizeFindCoordinator(req *kmsg.FindCoordinatorRequest) (kmsg.Response, func(kmsg.Response) kmsg.Response) {
	if req.CoordinatorType != 0 { // transactions: the handler refuses them
		return nil, nil
	}
	if req.Version < 4 {
		if !c.allowedGroup(auth.OpDescribe, req.CoordinatorKey) {
			resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
			resp.ErrorCode, resp.NodeID, resp.Port = groupRefused, -1, -1
			return resp, nil
		}
		return nil, nil
	}
	return nil, func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.FindCoordinatorResponse)
		for i := range resp.Coordinators {
			co := &resp.Coordinators[i]
			if !c.allowedGroup(auth.OpDescribe, co.Key) {
				co.ErrorCode, co.NodeID, co.Host, co.Port, co.ErrorMessage = groupRefused, -1, "", -1, nil
			}
		}
		return resp
	}
}

func (c *conn) filterDescribeGroups(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.DescribeGroupsResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if !c.allowedGroup(auth.OpDescribe, g.Group) {
			name := g.Group
			*g = kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.ErrorCode = name, groupRefused
		}
	}
	return resp
}

// filterConsumerGroupDescribe: a group the principal may not DESCRIBE is
// answered GROUP_AUTHORIZATION_FAILED with nothing else of it.
func (c *conn) filterConsumerGroupDescribe(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.ConsumerGroupDescribeResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if !c.allowedGroup(auth.OpDescribe, g.Group) {
			name := g.Group
			*g = kmsg.NewConsumerGroupDescribeResponseGroup()
			g.Group, g.ErrorCode = name, groupRefused
			g.ErrorMessage = kmsg.StringPtr("not authorized to describe the group")
		}
	}
	return resp
}

func (c *conn) filterListGroups(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.ListGroupsResponse)
	kept := resp.Groups[:0]
	for _, g := range resp.Groups {
		if c.allowedGroup(auth.OpDescribe, g.Group) {
			kept = append(kept, g)
		}
	}
	resp.Groups = kept
	return resp
}
