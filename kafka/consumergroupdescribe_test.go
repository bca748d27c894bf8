package kafka

import (
	"testing"

	"github.com/sluice-io/sluice/auth"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupDescribe shows a group's epoch and assignor and every
// member whatever its kind: an HTTP member as member type -1 with its kind
// as client id, a classic Kafka member as type 0, each with its current
// and target assignment by topic ID and name. A group that does not exist
// is GROUP_ID_NOT_FOUND, an invalid id INVALID_GROUP_ID.
func TestConsumerGroupDescribe(t *testing.T) {
	f := newFakeGroups()
	c := dial(t, startGroupServer(t, f))
	f.httpJoin(t, "g", "h", "orders")
	jr := c.roundTrip(joinReq(5, "g", "k", subscription(1, []string{"orders"}, nil))).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(jr.ErrorCode))
	}
	f.mu.Lock()
	desc, _ := f.st.Describe("g")
	kEpoch := f.st.Group("g").Members["k"].Epoch
	f.mu.Unlock()
	ordersID := topicID(testMetadata().Topics["orders"].Record)

	for _, v := range []int16{0, 1} {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version, req.Groups = v, []string{"g", "none", ""}
		resp := c.roundTrip(req).(*kmsg.ConsumerGroupDescribeResponse)
		if len(resp.Groups) != 3 {
			t.Fatalf("v%d: %d groups", v, len(resp.Groups))
		}
		g := resp.Groups[0]
		// The HTTP member holds what it held; the Kafka member has not
		// synced yet, so the group is reconciling.
		if g.ErrorCode != 0 || g.Group != "g" || g.State != "Reconciling" || g.Epoch != desc.GroupEpoch || g.Epoch <= 0 ||
			g.AssignmentEpoch != g.Epoch || g.AssignorName != desc.Assignor || len(g.Members) != 2 {
			t.Fatalf("v%d: group %+v (want epoch %d, assignor %q)", v, g, desc.GroupEpoch, desc.Assignor)
		}
		byID := map[string]kmsg.ConsumerGroupDescribeResponseGroupMember{}
		for _, m := range g.Members {
			byID[m.MemberID] = m
		}
		h, k := byID["h"], byID["k"]
		wantType := func(want int8) int8 {
			if v == 0 {
				return -1 // not in v0: the default
			}
			return want
		}
		if h.ClientID != "http" || h.MemberType != wantType(memberTypeUnknown) || len(h.SubscribedTopics) != 1 || h.SubscribedTopics[0] != "orders" {
			t.Fatalf("v%d: HTTP member %+v", v, h)
		}
		if k.MemberType != wantType(memberTypeClassic) || k.MemberEpoch != kEpoch || k.ClientID != "test" {
			t.Fatalf("v%d: Kafka member %+v", v, k)
		}
		// Between them the targets cover both partitions of orders, by ID
		// and name.
		var targets []int32
		for _, m := range g.Members {
			for _, tp := range m.TargetAssignment.TopicPartitions {
				if tp.Topic != "orders" || tp.TopicID != ordersID {
					t.Fatalf("v%d: member %s: target %+v", v, m.MemberID, tp)
				}
				targets = append(targets, tp.Partitions...)
			}
		}
		if len(targets) != 2 {
			t.Fatalf("v%d: targets %v", v, targets)
		}
		if a := h.Assignment.TopicPartitions; len(a) != 1 || a[0].Topic != "orders" || a[0].TopicID != ordersID || len(a[0].Partitions) == 0 {
			t.Fatalf("v%d: the HTTP member's assignment %+v", v, a)
		}
		if g := resp.Groups[1]; g.ErrorCode != kerr.GroupIDNotFound.Code || g.Group != "none" {
			t.Fatalf("v%d: unknown group %+v", v, g)
		}
		if g := resp.Groups[2]; g.ErrorCode != kerr.InvalidGroupID.Code {
			t.Fatalf("v%d: empty group id %+v", v, g)
		}
	}
}

// ConsumerGroupDescribe needs DESCRIBE on each group: one the principal
// may not describe is GROUP_AUTHORIZATION_FAILED with nothing of it shown,
// whether it exists or not; the others are described.
func TestAuthzConsumerGroupDescribe(t *testing.T) {
	f := newFakeGroups()
	fa := newFakeAuth(t)
	fa.allow = func(_ string, op auth.Operation, rt auth.ResourceType, name string) bool {
		return rt == auth.ResourceGroup && op == auth.OpDescribe && name == "open"
	}
	c := dial(t, startGroupServer(t, f, saslOptions(fa)))
	c.authenticate()
	f.httpJoin(t, "open", "h1", "orders")
	f.httpJoin(t, "closed", "h2", "orders")
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Version, req.Groups = 1, []string{"open", "closed", "absent"}
	resp := c.roundTrip(req).(*kmsg.ConsumerGroupDescribeResponse)
	if len(resp.Groups) != 3 {
		t.Fatalf("%d groups", len(resp.Groups))
	}
	if g := resp.Groups[0]; g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != "h1" {
		t.Fatalf("allowed group: %+v", g)
	}
	for _, g := range resp.Groups[1:] {
		if g.ErrorCode != kerr.GroupAuthorizationFailed.Code || len(g.Members) != 0 || g.Epoch != 0 || g.State != "" {
			t.Fatalf("refused group %s: %v %+v", g.Group, kerr.ErrorForCode(g.ErrorCode), g)
		}
	}
}
