package kafka

import (
	"context"

	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A heartbeat the listener cannot serve gets the code a client acts on:
// UNSUPPORTED_VERSION against a backend without the consumer protocol
// (franz-go then falls back to the classic one), INVALID_REQUEST for a
// join that owns partitions or an epoch below -2,
// UNKNOWN_MEMBER_ID for a heartbeat without a member id, and
// UNSUPPORTED_ASSIGNOR for an assignor not served.
func TestConsumerGroupHeartbeatRefusals(t *testing.T) {
	c := dial(t, startGroupServer(t, newFakeGroups()))
	beat := func(mod func(*kmsg.ConsumerGroupHeartbeatRequest)) int16 {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.RebalanceTimeoutMillis = 1, "g", "m", 60000
		req.SubscribedTopicNames = []string{"orders"}
		mod(req)
		return c.roundTrip(req).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode
	}
	if code := beat(func(*kmsg.ConsumerGroupHeartbeatRequest) {}); code != kerr.UnsupportedVersion.Code {
		t.Fatalf("without the consumer protocol: %v", kerr.ErrorForCode(code))
	}
	c = dial(t, startGroupServer(t, consumerGroupsBackend{newFakeGroups()}))
	for name, tc := range map[string]struct {
		mod  func(*kmsg.ConsumerGroupHeartbeatRequest)
		want *kerr.Error
	}{
		"epoch -3": {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, kerr.InvalidRequest},
		"owned join": {func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = make([]kmsg.ConsumerGroupHeartbeatRequestTopic, 1)
		}, kerr.InvalidRequest},
		"no member id": {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID, r.MemberEpoch = "", 3 }, kerr.UnknownMemberID},
		"assignor":     {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") }, kerr.UnsupportedAssignor},
	} {
		if code := beat(tc.mod); code != tc.want.Code {
			t.Errorf("%s: %v, want %v", name, kerr.ErrorForCode(code), tc.want)
		}
	}
}

// consumerGroupsBackend serves the consumer protocol with nothing behind
// it: the refusals above are the listener's own.
type consumerGroupsBackend struct{ *fakeGroups }

func (consumerGroupsBackend) ConsumerHeartbeat(context.Context, string, ConsumerHeartbeat) (ConsumerHeartbeatResult, error) {
	return ConsumerHeartbeatResult{Epoch: 1}, nil
}
