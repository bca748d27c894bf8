package offsets

import (
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) mapped onto the same groups, as Kafka's own coordinator maps
// classic members onto KIP-848 groups: the assignment is the coordinator's,
// so a JoinGroup is answered at once with the member's epoch as its
// generation, SyncGroup hands the member what it owns, and a heartbeat
// asks the member to rejoin when its assignment must change. Nothing waits
// for other members.
//
// A Kafka member reads its partitions itself, so it keeps a partition
// until it says it stopped: it rejoins without it (a cooperative client
// lists what it still owns; an eager one owns nothing when it rejoins),
// leaves, or expires. Only then can the partition be granted to another
// member, of whatever kind.

// MaxRebalanceTimeout bounds the time a Kafka member may take to rejoin
// once asked (its rebalance timeout, Java's max.poll.interval.ms).
const MaxRebalanceTimeout = 30 * time.Minute

// maxOwnedPartitions bounds the owned partitions a subscription may list.
const maxOwnedPartitions = 100_000

// ClassicJoinParams is a validated Kafka JoinGroup.
type ClassicJoinParams struct {
	Topics []string
	// Owned are the partitions the client says it still holds (the
	// subscription's owned partitions: cooperative clients list them).
	Owned            []api.TopicPartition
	InstanceID       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	Protocol         string
	Version          int16
	ClientID         string
	ClientHost       string
}

// ClassicJoinRequest is a Kafka JoinGroup as the listener decoded it.
type ClassicJoinRequest struct {
	Topics             []string
	Owned              []api.TopicPartition
	InstanceID         string
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32 // -1 or 0: none given (v0), the session timeout
	Protocol           string
	Version            int16
	ClientID           string
	ClientHost         string
}

// ValidateClassicJoin checks a Kafka JoinGroup and fills its defaults. Topics
// need not exist (a client may subscribe before they are created); their
// names must be valid, and a member names at most MaxTopicsPerMember.
func ValidateClassicJoin(req ClassicJoinRequest) (ClassicJoinParams, error) {
	p := ClassicJoinParams{Owned: req.Owned, InstanceID: req.InstanceID, Protocol: req.Protocol, Version: req.Version,
		ClientID: req.ClientID, ClientHost: req.ClientHost}
	if len(req.Topics) > MaxTopicsPerMember {
		return p, api.Errorf(api.CodeInvalidRequest, "the subscription names %d topics, more than %d", len(req.Topics), MaxTopicsPerMember)
	}
	for _, t := range req.Topics {
		if err := api.ValidateTopicName(t); err != nil {
			return p, err
		}
		if !slices.Contains(p.Topics, t) {
			p.Topics = append(p.Topics, t)
		}
	}
	slices.Sort(p.Topics)
	if len(req.InstanceID) > 249 {
		return p, api.Errorf(api.CodeInvalidRequest, "group.instance.id is longer than 249 bytes")
	}
	if len(req.Owned) > maxOwnedPartitions {
		return p, api.Errorf(api.CodeInvalidRequest, "the subscription owns %d partitions", len(req.Owned))
	}
	p.SessionTimeout = time.Duration(req.SessionTimeoutMs) * time.Millisecond
	if p.SessionTimeout < MinSessionTimeout || p.SessionTimeout > MaxSessionTimeout {
		return p, api.Errorf(api.CodeInvalidSession, "session.timeout.ms=%d: want %d to %d", req.SessionTimeoutMs, MinSessionTimeout.Milliseconds(), MaxSessionTimeout.Milliseconds())
	}
	p.RebalanceTimeout = time.Duration(req.RebalanceTimeoutMs) * time.Millisecond
	p.RebalanceTimeout = min(max(p.RebalanceTimeout, p.SessionTimeout), MaxRebalanceTimeout)
	return p, nil
}

// JoinClassic joins (or rejoins) a Kafka member with member id id: a new
// member, the member id names (a rejoin), or, for a known instance id, the
// static member it replaces. The member first gives up the partitions it
// owned that are no longer its target and that the client no longer lists
// as owned, then gets those of its target no other member owns. Its epoch
// (the generation answered) bumps when its partitions change.
func (s *State) JoinClassic(group, id string, p ClassicJoinParams, meta Metadata, now time.Time) ([]Record, error) {
	if err := checkKind(group, api.MemberKindKafka); err != nil {
		return nil, err
	}
	if err := s.checkNewGroup(group); err != nil {
		return nil, err
	}
	g := s.groups[group]
	if g == nil {
		g = newGroup(group)
	}
	next := g.clone()
	m := next.Members[id]
	retargetNeeded := false
	switch {
	case m != nil && (m.Kind != api.MemberKindKafka || m.Consumer != nil):
		return nil, api.Errorf(api.CodeUnknownMemberID, "member %q of group %q is a %s member, not a classic Kafka one", id, group, m.Kind)
	case m != nil && p.InstanceID != "" && m.InstanceID != p.InstanceID:
		return nil, api.Errorf(api.CodeFencedInstanceID, "member %q of group %q has instance id %q, not %q", id, group, m.InstanceID, p.InstanceID)
	case m != nil:
		if live := g.Members[id]; live != nil {
			live.LastSeen, live.rejoinBy = now, time.Time{}
		}
	case next.replacedBy(id) != nil:
		r := next.replacedBy(id)
		return nil, api.Errorf(api.CodeFencedInstanceID, "member %q of group %q was replaced by %q (instance %q)", id, group, r.ID, r.InstanceID)
	case next.byInstance(p.InstanceID) != nil:
		// A static member's new incarnation (KIP-345) takes the old one's
		// place, partitions and all, at a new epoch that fences the old.
		old := next.byInstance(p.InstanceID)
		if old.Kind != api.MemberKindKafka {
			return nil, api.Errorf(api.CodeFencedInstanceID, "instance id %q of group %q is held by a %s member", p.InstanceID, group, old.Kind)
		}
		delete(next.Members, old.ID)
		m = old
		m.Replaced = append(m.Replaced, m.ID)
		if len(m.Replaced) > maxReplaced {
			m.Replaced = m.Replaced[len(m.Replaced)-maxReplaced:]
		}
		m.ID = id
		m.Epoch++
		for i := range m.Owned {
			next.Fences++
			m.Owned[i].Epoch, m.Owned[i].Fence = m.Epoch, next.Fences
		}
		next.Members[id] = m
	default:
		if len(next.Members) >= s.maxMembers {
			return nil, api.Errorf(api.CodeGroupMaxSize, "group %q has %d members, the most it may hold", group, len(next.Members))
		}
		if len(next.Members) == 0 {
			next.Assignor = api.AssignorUniform
		}
		m = &Member{MemberValue: MemberValue{ID: id, InstanceID: p.InstanceID, Kind: api.MemberKindKafka, Topics: []string{}, Owned: []Grant{}}}
		next.Members[id] = m
		retargetNeeded = true
	}
	m.SessionTimeoutMs = p.SessionTimeout.Milliseconds()
	m.Classic = &ClassicMember{Protocol: p.Protocol, Version: p.Version, RebalanceTimeoutMs: p.RebalanceTimeout.Milliseconds(),
		ClientID: p.ClientID, ClientHost: p.ClientHost}
	if !slices.Equal(m.Topics, p.Topics) {
		m.Topics = slices.Clone(p.Topics)
		retargetNeeded = true
	}
	if retargetNeeded || partitionCountsChanged(next, meta) {
		next.Epoch++
		retarget(next, meta)
	}
	reconcileClassic(next, m, p.Owned)
	if m.Epoch == 0 {
		m.Epoch = 1 // generations start at 1, as Kafka's do
	}
	return []Record{groupRecord(next)}, nil
}

// reconcileClassic moves a rejoining Kafka member toward its target: it
// keeps what is still its target, and what the client still lists as owned
// (pending revocation: it is not handed back in SyncGroup, and the client
// rejoins once it let go); it gets the target partitions no other member
// owns. Any change bumps its epoch, and new grants carry it.
func reconcileClassic(g *Group, m *Member, reported []api.TopicPartition) {
	still := make(map[api.TopicPartition]bool, len(reported))
	for _, tp := range reported {
		still[tp] = true
	}
	changed := false
	kept := m.Owned[:0:0]
	for _, o := range m.Owned {
		if still[o.tp()] || slices.Contains(m.Target, o.tp()) {
			kept = append(kept, o)
		} else {
			changed = true
		}
	}
	m.Owned = kept
	var add []api.TopicPartition
	for _, t := range m.Target {
		if m.grant(t) < 0 && g.owner(t) == nil {
			add = append(add, t)
		}
	}
	if !changed && len(add) == 0 {
		return
	}
	m.Epoch++
	for _, t := range add {
		g.Fences++
		m.Owned = append(m.Owned, Grant{Topic: t.Topic, Partition: t.Partition, Epoch: m.Epoch, Fence: g.Fences})
	}
}

// needsRejoin reports whether a Kafka member's assignment would change if
// it rejoined: it owns a partition that is no longer its target (it must
// let go), or a partition of its target is free for it to take.
func needsRejoin(g *Group, m *Member) bool {
	for _, o := range m.Owned {
		if !slices.Contains(m.Target, o.tp()) {
			return true
		}
	}
	for _, t := range m.Target {
		if m.grant(t) < 0 && g.owner(t) == nil {
			return true
		}
	}
	return false
}

// classicMember finds the Kafka member a request names: UNKNOWN_MEMBER_ID
// when it is not in the group or is no Kafka member, FENCED_INSTANCE_ID
// when a newer incarnation replaced it or its instance id differs, and,
// unless generation is -1, ILLEGAL_GENERATION when generation is not its
// epoch.
func (s *State) classicMember(group, id, instance string, generation int32) (*Group, *Member, error) {
	g, m, err := s.member(group, id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case m.Kind != api.MemberKindKafka || m.Consumer != nil:
		return nil, nil, api.Errorf(api.CodeUnknownMemberID, "member %q of group %q is a %s member, not a classic Kafka one", id, group, m.Kind)
	case instance != "" && m.InstanceID != instance:
		return nil, nil, api.Errorf(api.CodeFencedInstanceID, "member %q of group %q has instance id %q, not %q", id, group, m.InstanceID, instance)
	case generation != -1 && generation != m.Epoch:
		return nil, nil, api.Errorf(api.CodeIllegalGeneration, "member %q of group %q is at generation %d, not %d", id, group, m.Epoch, generation)
	}
	return g, m, nil
}

// HeartbeatClassic renews a Kafka member's session and reports whether it
// must rejoin (REBALANCE_IN_PROGRESS). The first heartbeat that asks it to
// starts its rebalance timeout: a member not rejoined by then is removed
// by Expire, so what it held goes to the others. A change of a subscribed
// topic's partition count retargets the group (the records returned).
func (s *State) HeartbeatClassic(group, id, instance string, generation int32, meta Metadata, now time.Time) ([]Record, bool, error) {
	g, m, err := s.classicMember(group, id, instance, generation)
	if err != nil {
		return nil, false, err
	}
	m.LastSeen = now
	var recs []Record
	check, checkM := g, m
	if partitionCountsChanged(g, meta) {
		next := g.clone()
		next.Epoch++
		retarget(next, meta)
		recs = []Record{groupRecord(next)}
		check, checkM = next, next.Members[id]
	}
	rejoin := needsRejoin(check, checkM)
	if rejoin && m.rejoinBy.IsZero() {
		m.rejoinBy = now.Add(time.Duration(m.classic().RebalanceTimeoutMs) * time.Millisecond)
	}
	return recs, rejoin, nil
}

// classic returns the member's classic part (zero when it has none).
func (m *Member) classic() ClassicMember {
	if m.Classic == nil {
		return ClassicMember{RebalanceTimeoutMs: m.SessionTimeoutMs}
	}
	return *m.Classic
}

// SyncClassic renews a Kafka member's session and returns what SyncGroup
// hands it: the partitions it owns that are still its target, sorted
// (those pending revocation are left out, so the client lets them go).
func (s *State) SyncClassic(group, id, instance string, generation int32, now time.Time) ([]api.TopicPartition, ClassicMember, error) {
	_, m, err := s.classicMember(group, id, instance, generation)
	if err != nil {
		return nil, ClassicMember{}, err
	}
	m.LastSeen = now
	out := []api.TopicPartition{}
	for _, o := range m.Owned {
		if slices.Contains(m.Target, o.tp()) {
			out = append(out, o.tp())
		}
	}
	sortTPs(out)
	return out, m.classic(), nil
}

// LeaveClassic removes a Kafka member named by member id or, when id is
// empty, by instance id; its partitions go to the others.
func (s *State) LeaveClassic(group, id, instance string, meta Metadata) ([]Record, error) {
	if id == "" {
		g := s.groups[group]
		var m *Member
		if g != nil {
			m = g.byInstance(instance)
		}
		if m == nil {
			return nil, api.Errorf(api.CodeUnknownMemberID, "no member of group %q has instance id %q", group, instance)
		}
		id = m.ID
	}
	if _, _, err := s.classicMember(group, id, instance, -1); err != nil {
		return nil, err
	}
	return s.Leave(group, id, meta)
}

// ClassicOffset is one partition of a Kafka OffsetCommit.
type ClassicOffset struct {
	api.TopicPartition
	Offset      int64
	LeaderEpoch int32 // -1: none
	Metadata    string
}

// CommitClassic commits a Kafka client's offsets. With an empty member id
// and generation -1 (an admin client, or a consumer outside group
// management) the group must have no members, else UNKNOWN_MEMBER_ID, as
// in Kafka; a push subscription's group is GROUP_MANAGED. Otherwise the
// member must be at generation and own each partition (one pending
// revocation counts: a client commits what it processed before letting
// go). A partition that fails gets its own error in errs and the others
// are committed; err fails them all.
func (s *State) CommitClassic(group, id, instance string, generation int32, offs []ClassicOffset, meta Metadata, now time.Time) (recs []Record, errs []error, err error) {
	if api.IsPushGroup(group) {
		return nil, nil, api.Errorf(api.CodeGroupManaged, "group %q belongs to a push subscription; its offsets move through /v1/push", group)
	}
	var m *Member
	if id == "" && generation < 0 {
		if g := s.groups[group]; g != nil && len(g.Members) > 0 {
			return nil, nil, api.Errorf(api.CodeUnknownMemberID, "group %q has %d members; a commit without a member id needs an empty group", group, len(g.Members))
		}
		if err := s.checkNewGroup(group); err != nil {
			return nil, nil, err
		}
	} else if _, cm, cerr := s.consumerMember(group, id); cerr == nil {
		// A consumer-protocol member commits at its member epoch, or an
		// older one it held the partition at (Kafka's KIP-1251), so a
		// commit racing a heartbeat that bumped the epoch still counts.
		m = cm
		m.LastSeen = now
		if generation > m.Epoch {
			return nil, nil, api.Errorf(api.CodeFencedMemberEpoch, "member %q of group %q is at epoch %d, not %d", id, group, m.Epoch, generation)
		}
	} else {
		if _, m, err = s.classicMember(group, id, instance, generation); err != nil {
			return nil, nil, err
		}
		m.LastSeen = now
	}
	errs = make([]error, len(offs))
	for i, o := range offs {
		switch {
		case o.Offset < 0:
			errs[i] = api.Errorf(api.CodeInvalidOffset, "%s/%d: offset %d is negative", o.Topic, o.Partition, o.Offset)
			continue
		case len(o.Metadata) > api.MaxCommitMetadataBytes:
			errs[i] = api.Errorf(api.CodeInvalidRequest, "%s/%d: metadata is %d bytes, more than %d", o.Topic, o.Partition, len(o.Metadata), api.MaxCommitMetadataBytes)
			continue
		case m != nil && m.grant(o.TopicPartition) < 0:
			errs[i] = api.Errorf(api.CodeIllegalGeneration, "member %q does not own %s/%d at generation %d", id, o.Topic, o.Partition, generation)
			continue
		case m != nil && m.Consumer != nil && generation < m.grant(o.TopicPartition):
			errs[i] = api.Errorf(api.CodeFencedMemberEpoch, "member %q holds %s/%d since epoch %d, after %d", id, o.Topic, o.Partition, m.grant(o.TopicPartition), generation)
			continue
		}
		ov := OffsetValue{Offset: o.Offset, CommitMs: now.UnixMilli(), Metadata: o.Metadata}
		if o.LeaderEpoch >= 0 {
			le := o.LeaderEpoch
			ov.LeaderEpoch = &le
		}
		recs = append(recs, offsetRecord(group, o.TopicPartition, ov))
	}
	return recs, errs, nil
}

// Committed returns a group's committed offsets (nil for an unknown group).
// The map is the state's: read it, never change it, before the next
// operation (operations replace it rather than change it).
func (s *State) Committed(group string) map[api.TopicPartition]OffsetValue {
	if g := s.groups[group]; g != nil {
		return g.Offsets
	}
	return nil
}
