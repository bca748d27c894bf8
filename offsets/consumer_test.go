package offsets

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// consumerBeat sends a consumer-protocol heartbeat and returns the answer.
func (h *harness) consumerBeat(group, id string, epoch int32, owned []int32) (int32, []int32, error) {
	h.t.Helper()
	hb := ConsumerHeartbeat{MemberID: id, Epoch: epoch, Topics: []string{"t"}, RebalanceTimeoutMs: 60000, ServerAssignor: api.AssignorUniform}
	if owned != nil {
		hb.Owned = tps("t", owned...)
		if hb.Owned == nil {
			hb.Owned = []api.TopicPartition{}
		}
	}
	if err := h.apply(h.s.HeartbeatConsumer(group, hb, h.metadata, TopicSet{}, h.now)); err != nil {
		return 0, nil, err
	}
	if epoch < 0 {
		return epoch, nil, nil
	}
	e, got, err := h.s.ConsumerAssignment(group, id)
	var out []int32
	for _, tp := range got {
		out = append(out, tp.Partition)
	}
	return e, out, err
}

func (h *harness) mustBeat(group, id string, epoch int32, owned []int32) (int32, []int32) {
	h.t.Helper()
	e, got, err := h.consumerBeat(group, id, epoch, owned)
	if err != nil {
		h.t.Fatal(err)
	}
	return e, got
}

// Two consumer-protocol members split a topic: the second gets a
// partition only after the first's heartbeat left it out, so no partition
// has two owners; a leave hands its partitions to the other.
func TestConsumerProtocolSplitsAndMoves(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 4})
	ea, a := h.mustBeat("g", "a", 0, []int32{})
	if len(a) != 4 || ea < 1 {
		t.Fatalf("a alone: epoch %d, %v", ea, a)
	}
	eb, b := h.mustBeat("g", "b", 0, []int32{})
	if len(b) != 0 {
		t.Fatalf("b took %v while a owns them", b)
	}
	ea, a = h.mustBeat("g", "a", ea, nil) // a keepalive: told to let two go
	if len(a) != 2 {
		t.Fatalf("a after b joined: %v", a)
	}
	if _, b = h.mustBeat("g", "b", eb, []int32{}); len(b) != 0 {
		t.Fatalf("b took %v before a let them go", b)
	}
	ea, _ = h.mustBeat("g", "a", ea, a) // a let go
	eb, b = h.mustBeat("g", "b", eb, []int32{})
	if len(b) != 2 || slices.ContainsFunc(b, func(p int32) bool { return slices.Contains(a, p) }) {
		t.Fatalf("a %v, b %v", a, b)
	}
	// An epoch it is not at is fenced.
	if _, _, err := h.consumerBeat("g", "a", ea+5, nil); api.Classify(err).Code != api.CodeFencedMemberEpoch {
		t.Fatalf("a wrong epoch: %v", err)
	}
	// b leaves: a gets everything at its next heartbeat.
	if _, _, err := h.consumerBeat("g", "b", -1, nil); err != nil {
		t.Fatal(err)
	}
	if _, a = h.mustBeat("g", "a", ea, a); len(a) != 4 {
		t.Fatalf("a after b left: %v", a)
	}
	if _, _, err := h.consumerBeat("g", "b", eb, nil); api.Classify(err).Code != api.CodeUnknownMemberID {
		t.Fatalf("b after leaving: %v", err)
	}
}

// One group holds a consumer-protocol member, a classic Kafka member and
// an HTTP member, and the kinds do not answer for one another.
func TestConsumerProtocolMixedGroup(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 6})
	ec, c := h.mustBeat("g", "c", 0, []int32{})
	gen := h.kafkaJoin("g", "k")
	h.join("g", api.JoinGroupRequest{Topics: []string{"t"}})
	ec, c = h.mustBeat("g", "c", ec, c)
	_, _ = h.mustBeat("g", "c", ec, c)
	if len(c) != 2 {
		t.Fatalf("consumer member's share of 6 among 3: %v", c)
	}
	if _, err := h.kafkaHeartbeat("g", "c", ec); api.Classify(err).Code != api.CodeUnknownMemberID {
		t.Fatalf("a classic heartbeat for a consumer member: %v", err)
	}
	if _, _, err := h.consumerBeat("g", "k", gen, nil); api.Classify(err).Code != api.CodeUnknownMemberID {
		t.Fatalf("a consumer heartbeat for a classic member: %v", err)
	}
	// The consumer member commits what it owns at its epoch.
	_, errs, err := h.s.CommitClassic("g", "c", "", ec, []ClassicOffset{{TopicPartition: api.TopicPartition{Topic: "t", Partition: c[0]}, Offset: 5, LeaderEpoch: -1}}, h.metadata, h.now)
	if err != nil || errs[0] != nil {
		t.Fatal(errors.Join(err, errs[0]))
	}
}
