package offsets

import (
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Kafka's consumer group protocol (KIP-848: ConsumerGroupHeartbeat) mapped
// onto the same groups. A member of it is a Kafka member (Kind "kafka":
// it reads its partitions itself, so it keeps one until it says it let
// go) whose assignment comes in its heartbeat's answer: the partitions it
// owns that are still its target, and the target partitions no one owns.
// Each heartbeat may list what the client owns; a partition it owns that
// is no longer its target stays its own (pending revocation) until a
// heartbeat leaves it out, it leaves, or its rebalance timeout runs out.

// Consumer protocol timeouts: the broker's (Kafka's
// group.consumer.session.timeout.ms and heartbeat interval), not the
// client's.
const (
	ConsumerSessionTimeout = 45 * time.Second
	ConsumerHeartbeatMs    = 3000
)

// ConsumerMember is what a member of the consumer protocol persists
// beyond other members.
type ConsumerMember struct {
	RebalanceTimeoutMs int64  `json:"rebalance_timeout_ms"`
	ServerAssignor     string `json:"server_assignor,omitempty"`
	ClientID           string `json:"client_id,omitempty"`
	ClientHost         string `json:"client_host,omitempty"`
	// PrevEpoch is the member's epoch before its last change: a heartbeat
	// at it whose answer was lost is still served.
	PrevEpoch int32 `json:"prev_epoch"`
	// TopicRegex is the member's subscription by regular expression (its
	// resolution is the group's: GroupValue.Regexes); "" for none.
	TopicRegex string `json:"topic_regex,omitempty"`
}

// ConsumerHeartbeat is a decoded ConsumerGroupHeartbeat.
type ConsumerHeartbeat struct {
	MemberID   string
	InstanceID string
	Epoch      int32 // 0 joins; -1 leaves; -2 a static member leaves
	// Topics is the subscription by name; nil: unchanged.
	Topics []string
	// TopicRegex is the subscription by regular expression (RE2 syntax,
	// matching whole names; see regex.go); nil: unchanged, "": none.
	TopicRegex *string
	// Owned are the partitions the client owns; nil: unchanged.
	Owned              []api.TopicPartition
	RebalanceTimeoutMs int32 // -1: unchanged
	ServerAssignor     string
	ClientID           string
	ClientHost         string
}

// HeartbeatConsumer runs one consumer-protocol heartbeat: a join at epoch
// 0 (a new member, or one whose answer was lost, again), a leave at -1 or
// -2, else a heartbeat at the member's epoch (FENCED_MEMBER_EPOCH at any
// other, UNKNOWN_MEMBER_ID for a member not in the group). The answer is
// read with ConsumerAssignment once the records are applied. topics is the
// cluster's topic names, against which the group's regular expressions are
// resolved when they are new or topics.Version moved.
func (s *State) HeartbeatConsumer(group string, h ConsumerHeartbeat, meta Metadata, topics TopicSet, now time.Time) ([]Record, error) {
	if err := checkKind(group, api.MemberKindKafka); err != nil {
		return nil, err
	}
	if len(h.Topics) > MaxTopicsPerMember {
		return nil, api.Errorf(api.CodeInvalidRequest, "the subscription names %d topics, more than %d", len(h.Topics), MaxTopicsPerMember)
	}
	for _, t := range h.Topics {
		if err := api.ValidateTopicName(t); err != nil {
			return nil, err
		}
	}
	if len(h.Owned) > maxOwnedPartitions || len(h.InstanceID) > 249 {
		return nil, api.Errorf(api.CodeInvalidRequest, "the heartbeat owns %d partitions or its instance id is longer than 249 bytes", len(h.Owned))
	}
	if h.Epoch < 0 {
		if _, _, err := s.consumerMember(group, h.MemberID); err != nil {
			return nil, err
		}
		return s.Leave(group, h.MemberID, meta)
	}
	g := s.groups[group]
	if h.Epoch == 0 {
		if err := s.checkNewGroup(group); err != nil {
			return nil, err
		}
		if g == nil {
			g = newGroup(group)
		}
	} else if _, _, err := s.consumerMember(group, h.MemberID); err != nil {
		return nil, err
	}
	if h.TopicRegex != nil && *h.TopicRegex != "" {
		if _, err := g.regex(*h.TopicRegex); err != nil {
			return nil, err
		}
	}
	next := g.clone()
	m := next.Members[h.MemberID]
	changed := false
	switch {
	case m != nil && m.Consumer == nil:
		return nil, api.Errorf(api.CodeUnknownMemberID, "member %q of group %q is a %s member of another protocol", h.MemberID, group, m.Kind)
	case m != nil && h.Epoch != 0 && h.Epoch != m.Epoch && (h.Epoch != m.Consumer.PrevEpoch || h.Owned == nil):
		return nil, api.Errorf(api.CodeFencedMemberEpoch, "member %q of group %q is at epoch %d, not %d", h.MemberID, group, m.Epoch, h.Epoch)
	case m != nil:
	case next.byInstance(h.InstanceID) != nil:
		// A static member's new incarnation takes the old one's place.
		old := next.byInstance(h.InstanceID)
		if old.Kind != api.MemberKindKafka {
			return nil, api.Errorf(api.CodeFencedInstanceID, "instance id %q of group %q is held by a %s member", h.InstanceID, group, old.Kind)
		}
		delete(next.Members, old.ID)
		m = old
		m.Replaced = append(m.Replaced, m.ID)
		if len(m.Replaced) > maxReplaced {
			m.Replaced = m.Replaced[len(m.Replaced)-maxReplaced:]
		}
		m.ID = h.MemberID
		m.Epoch++
		for i := range m.Owned {
			next.Fences++
			m.Owned[i].Epoch, m.Owned[i].Fence = m.Epoch, next.Fences
		}
		m.Classic = nil
		next.Members[m.ID] = m
		changed = true
	default:
		if h.Topics == nil && h.TopicRegex == nil || h.RebalanceTimeoutMs < 0 {
			return nil, api.Errorf(api.CodeInvalidRequest, "a join names its subscribed topics (or a regular expression) and its rebalance timeout")
		}
		if len(next.Members) >= s.maxMembers {
			return nil, api.Errorf(api.CodeGroupMaxSize, "group %q has %d members, the most it may hold", group, len(next.Members))
		}
		if len(next.Members) == 0 {
			next.Assignor = h.ServerAssignor
		}
		m = &Member{MemberValue: MemberValue{ID: h.MemberID, InstanceID: h.InstanceID, Kind: api.MemberKindKafka, Topics: []string{}, Owned: []Grant{},
			SessionTimeoutMs: ConsumerSessionTimeout.Milliseconds(), Consumer: &ConsumerMember{}}}
		next.Members[m.ID] = m
		changed = true
	}
	if live := g.Members[h.MemberID]; live != nil {
		live.LastSeen = now
	}
	m.Consumer.ClientID, m.Consumer.ClientHost = h.ClientID, h.ClientHost
	if h.ServerAssignor != "" {
		m.Consumer.ServerAssignor = h.ServerAssignor
	}
	if h.RebalanceTimeoutMs >= 0 {
		rt := min(max(time.Duration(h.RebalanceTimeoutMs)*time.Millisecond, ConsumerSessionTimeout), MaxRebalanceTimeout)
		if rt.Milliseconds() != m.Consumer.RebalanceTimeoutMs {
			m.Consumer.RebalanceTimeoutMs = rt.Milliseconds()
			changed = true
		}
	}
	retargetNeeded := changed
	if h.Topics != nil {
		topics := slices.Clone(h.Topics)
		slices.Sort(topics)
		topics = slices.Compact(topics)
		if !slices.Equal(m.Topics, topics) {
			m.Topics = topics
			retargetNeeded = true
		}
	}
	if h.TopicRegex != nil && *h.TopicRegex != m.Consumer.TopicRegex {
		m.Consumer.TopicRegex = *h.TopicRegex
		retargetNeeded = true
	}
	if resolveRegexes(g, next, topics) {
		retargetNeeded = true
	}
	if retargetNeeded || partitionCountsChanged(next, meta) {
		next.Epoch++
		retarget(next, meta)
		changed = true
	}
	before := m.Epoch
	owned := h.Owned
	if owned == nil {
		owned = m.Assignment() // unchanged: the client still owns all it had
	}
	reconcileClassic(next, m, owned)
	if m.Epoch == 0 {
		m.Epoch = 1
	}
	if m.Epoch != before {
		m.Consumer.PrevEpoch = before
		changed = true
	}
	if live := g.Members[h.MemberID]; live != nil {
		// Letting go of a partition is due within the rebalance timeout.
		if pendingRevocation(m) {
			if live.rejoinBy.IsZero() {
				live.rejoinBy = now.Add(time.Duration(m.Consumer.RebalanceTimeoutMs) * time.Millisecond)
			}
		} else {
			live.rejoinBy = time.Time{}
		}
	}
	if !changed {
		return nil, nil
	}
	return []Record{groupRecord(next)}, nil
}

// pendingRevocation reports whether the member owns a partition that is no
// longer its target.
func pendingRevocation(m *Member) bool {
	for _, o := range m.Owned {
		if !slices.Contains(m.Target, o.tp()) {
			return true
		}
	}
	return false
}

// consumerMember finds a member of the consumer protocol.
func (s *State) consumerMember(group, id string) (*Group, *Member, error) {
	g, m, err := s.member(group, id)
	if err != nil {
		return nil, nil, err
	}
	if m.Consumer == nil {
		return nil, nil, api.Errorf(api.CodeUnknownMemberID, "member %q of group %q is a %s member of another protocol", id, group, m.Kind)
	}
	return g, m, nil
}

// ConsumerAssignment is a consumer-protocol member's answer: its epoch and
// the partitions it owns that are still its target, sorted (those pending
// revocation are left out, so the client lets them go).
func (s *State) ConsumerAssignment(group, id string) (int32, []api.TopicPartition, error) {
	_, m, err := s.consumerMember(group, id)
	if err != nil {
		return 0, nil, err
	}
	out := []api.TopicPartition{}
	for _, o := range m.Owned {
		if slices.Contains(m.Target, o.tp()) {
			out = append(out, o.tp())
		}
	}
	sortTPs(out)
	return m.Epoch, out, nil
}
