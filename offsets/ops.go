package offsets

import (
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Join bounds and defaults.
const (
	DefaultSessionTimeout = 30 * time.Second
	MinSessionTimeout     = time.Second
	MaxSessionTimeout     = 5 * time.Minute
	MaxTopicsPerMember    = 100
	// DefaultMaxGroupMembers bounds a group (Kafka's group.max.size):
	// every membership change rewrites the group's record, so its size is
	// the cost of each change.
	DefaultMaxGroupMembers = 1000
)

// HeartbeatInterval is what a member is told to keep to: a third of its
// session, at most 3 s (Kafka's default heartbeat).
func HeartbeatInterval(sessionTimeoutMs int64) int64 {
	return min(sessionTimeoutMs/3, 3000)
}

// JoinParams is a validated join request.
type JoinParams struct {
	Topics         []string
	InstanceID     string
	SessionTimeout time.Duration
	Reset          string
	AutoCommit     bool
	Assignor       string
	Kind           string
}

// ValidateJoin checks a join request and fills its defaults.
func ValidateJoin(req api.JoinGroupRequest, kind string, meta Metadata) (JoinParams, error) {
	p := JoinParams{InstanceID: req.InstanceID, AutoCommit: req.AutoCommit, Kind: kind}
	if len(req.Topics) == 0 || len(req.Topics) > MaxTopicsPerMember {
		return p, api.Errorf(api.CodeInvalidRequest, "topics: want 1 to %d topic names", MaxTopicsPerMember)
	}
	for _, t := range req.Topics {
		if err := api.ValidateTopicName(t); err != nil {
			return p, err
		}
		if _, ok := meta(t); !ok {
			return p, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", t)
		}
		if !slices.Contains(p.Topics, t) {
			p.Topics = append(p.Topics, t)
		}
	}
	slices.Sort(p.Topics)
	if len(req.InstanceID) > 249 {
		return p, api.Errorf(api.CodeInvalidRequest, "instance_id is longer than 249 bytes")
	}
	p.SessionTimeout = DefaultSessionTimeout
	if req.SessionTimeoutMs != 0 {
		p.SessionTimeout = time.Duration(req.SessionTimeoutMs) * time.Millisecond
		if p.SessionTimeout < MinSessionTimeout || p.SessionTimeout > MaxSessionTimeout {
			return p, api.Errorf(api.CodeInvalidRequest, "session_timeout_ms=%d: want %d to %d", req.SessionTimeoutMs, MinSessionTimeout.Milliseconds(), MaxSessionTimeout.Milliseconds())
		}
	}
	switch req.AutoOffsetReset {
	case "":
		p.Reset = api.ResetEarliest
	case api.ResetEarliest, api.ResetLatest, api.ResetNone:
		p.Reset = req.AutoOffsetReset
	default:
		return p, api.Errorf(api.CodeInvalidRequest, "auto_offset_reset=%q: want earliest, latest or none", req.AutoOffsetReset)
	}
	switch req.Assignor {
	case "":
		p.Assignor = api.AssignorUniform
	case api.AssignorUniform, api.AssignorRange:
		p.Assignor = req.Assignor
	default:
		return p, api.Errorf(api.CodeInvalidRequest, "assignor=%q: want uniform or range", req.Assignor)
	}
	return p, nil
}

// Join adds a member with id newID, or, for a known instance id, hands that
// member (assignment and all) to newID and fences the old id. It returns the
// records to append and the id of the joined member.
func (s *State) Join(group, newID string, p JoinParams, meta Metadata, now time.Time) ([]Record, error) {
	if err := checkKind(group, p.Kind); err != nil {
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
	if old := next.byInstance(p.InstanceID); old != nil && old.Kind == api.MemberKindKafka {
		return nil, api.Errorf(api.CodeFencedInstanceID, "instance id %q of group %q is held by a Kafka client", p.InstanceID, group)
	} else if old != nil {
		// Static membership (KIP-345): the new incarnation takes the old
		// one's place and partitions; a new member epoch on every grant
		// fences whatever the old one still tries to commit.
		delete(next.Members, old.ID)
		m := old
		m.Replaced = append(m.Replaced, m.ID)
		m.ID = newID
		if len(m.Replaced) > maxReplaced {
			m.Replaced = m.Replaced[len(m.Replaced)-maxReplaced:]
		}
		m.Epoch++
		for i := range m.Owned {
			next.Fences++
			m.Owned[i].Epoch, m.Owned[i].Fence = m.Epoch, next.Fences
		}
		m.Kind, m.SessionTimeoutMs, m.AutoOffsetReset, m.AutoCommit = p.Kind, p.SessionTimeout.Milliseconds(), p.Reset, p.AutoCommit
		next.Members[newID] = m
		if !slices.Equal(m.Topics, p.Topics) {
			m.Topics = p.Topics
			next.Epoch++
			retarget(next, meta)
		}
		reconcile(next, m)
		return []Record{groupRecord(next)}, nil
	}
	if len(next.Members) >= s.maxMembers {
		return nil, api.Errorf(api.CodeGroupMaxSize, "group %q has %d members, the most it may hold", group, len(next.Members))
	}
	if len(next.Members) == 0 {
		next.Assignor = p.Assignor
	}
	m := &Member{MemberValue: MemberValue{
		ID: newID, InstanceID: p.InstanceID, Kind: p.Kind, Topics: p.Topics,
		SessionTimeoutMs: p.SessionTimeout.Milliseconds(), AutoOffsetReset: p.Reset, AutoCommit: p.AutoCommit,
		Owned: []Grant{},
	}}
	next.Members[newID] = m
	next.Epoch++
	retarget(next, meta)
	reconcile(next, m)
	return []Record{groupRecord(next)}, nil
}

// checkKind keeps push subscriptions' groups to their pushers, and pushers
// to those groups.
func checkKind(group, kind string) error {
	switch push := api.IsPushGroup(group); {
	case push && kind != api.MemberKindPush:
		return api.Errorf(api.CodeGroupManaged, "group %q belongs to a push subscription; only its pushers join it", group)
	case !push && kind == api.MemberKindPush:
		return api.Errorf(api.CodeInvalidRequest, "a pusher joins only a push subscription's group (%s*), not %q", api.PushGroupPrefix, group)
	}
	return nil
}

// reconcile moves m toward its target: partitions it should no longer hold
// are taken away at once (m is the one asking, so it learns of it now);
// partitions it should hold are granted only when no other member owns them,
// so a partition never has two owners. Any change bumps m's epoch, and new
// grants carry it.
func reconcile(g *Group, m *Member) bool {
	if m.Kind == api.MemberKindKafka {
		// A Kafka member reads its partitions itself: it gives one up only
		// by rejoining without it (reconcileClassic), leaving or expiring.
		return false
	}
	changed := false
	kept := m.Owned[:0:0]
	for _, o := range m.Owned {
		if slices.Contains(m.Target, o.tp()) {
			kept = append(kept, o)
		} else {
			changed = true
		}
	}
	var add []api.TopicPartition
	for _, t := range m.Target {
		if m.grant(t) >= 0 {
			continue
		}
		if other := g.owner(t); other != nil && other != m {
			continue
		}
		add = append(add, t)
	}
	if !changed && len(add) == 0 {
		return false
	}
	m.Epoch++
	for _, t := range add {
		g.Fences++
		kept = append(kept, Grant{Topic: t.Topic, Partition: t.Partition, Epoch: m.Epoch, Fence: g.Fences})
	}
	m.Owned = kept
	return true
}

// member finds the member a request names: UNKNOWN_MEMBER_ID when it is not
// in the group, FENCED_INSTANCE_ID when a newer incarnation replaced it.
func (s *State) member(group, id string) (*Group, *Member, error) {
	g := s.groups[group]
	if g == nil {
		return nil, nil, api.Errorf(api.CodeUnknownMemberID, "member %q is not in group %q", id, group)
	}
	m := g.Members[id]
	if m == nil {
		if r := g.replacedBy(id); r != nil {
			return nil, nil, api.Errorf(api.CodeFencedInstanceID, "member %q of group %q was replaced by %q (instance %q)", id, group, r.ID, r.InstanceID)
		}
		return nil, nil, api.Errorf(api.CodeUnknownMemberID, "member %q is not in group %q (it left or its session expired)", id, group)
	}
	return g, m, nil
}

// httpMember is member for the HTTP door's requests: a Kafka member is
// served only through the Kafka listener (its partitions change only when
// it rejoins there), so the HTTP door does not know it.
func (s *State) httpMember(group, id string) (*Group, *Member, error) {
	g, m, err := s.member(group, id)
	if err == nil && m.Kind == api.MemberKindKafka {
		return nil, nil, api.Errorf(api.CodeUnknownMemberID, "member %q of group %q is a Kafka client's: it is served on the Kafka listener only", id, group)
	}
	return g, m, err
}

// Member returns a live member, or the error a request naming it gets.
func (s *State) Member(group, id string) (*Member, error) {
	_, m, err := s.member(group, id)
	return m, err
}

// Heartbeat renews the member's session and moves it toward its target.
// Every member request is a heartbeat.
func (s *State) Heartbeat(group, id string, meta Metadata, now time.Time) ([]Record, error) {
	g, m, err := s.httpMember(group, id)
	if err != nil {
		return nil, err
	}
	m.LastSeen = now
	next := g.clone()
	changed := false
	if partitionCountsChanged(next, meta) {
		next.Epoch++
		retarget(next, meta)
		changed = true
	}
	if reconcile(next, next.Members[id]) || changed {
		return []Record{groupRecord(next)}, nil
	}
	return nil, nil
}

// StartPoll begins a poll: with auto commit, it commits the positions the
// member's previous poll ended at (from cursor when given, else from memory),
// then it heartbeats. The plan (PollPlan) is read once the records are applied.
func (s *State) StartPoll(group, id string, cursor *api.Cursor, meta Metadata, now time.Time) ([]Record, error) {
	g, m, err := s.httpMember(group, id)
	if err != nil {
		return nil, err
	}
	var recs []Record
	if cursor != nil {
		// The cursor names where the previous poll ended: remember it, so
		// a poll that sends a cursor needs no EndPoll. (A later poll
		// without a cursor then starts where this one starts: the records
		// of this poll may come again, never be skipped.)
		for _, o := range m.Owned {
			if off, ok := previousPosition(m, cursor, o.tp()); ok {
				if m.positions == nil {
					m.positions = map[api.TopicPartition]int64{}
				}
				m.positions[o.tp()] = off
			}
		}
	}
	if m.AutoCommit {
		for _, o := range m.Owned {
			tp := o.tp()
			off, ok := previousPosition(m, cursor, tp)
			if !ok {
				continue
			}
			if cur, has := g.Offsets[tp]; has && cur.Offset == off {
				continue
			}
			recs = append(recs, offsetRecord(group, tp, OffsetValue{Offset: off, CommitMs: now.UnixMilli()}))
		}
	}
	hb, err := s.Heartbeat(group, id, meta, now)
	return append(recs, hb...), err
}

// previousPosition is where the member's last poll ended in tp: the cursor's
// position when the cursor was made while tp was held, else memory.
func previousPosition(m *Member, cursor *api.Cursor, tp api.TopicPartition) (int64, bool) {
	if cursor != nil {
		if off, ok := cursor.Position(tp); ok && cursor.Epoch >= m.grant(tp) {
			return off, true
		}
		return 0, false
	}
	off, ok := m.positions[tp]
	return off, ok
}

// Start is where a poll begins reading one owned partition.
type Start struct {
	api.TopicPartition
	// Offset is -1 when the group has no position: the reader resolves
	// Reset (earliest, latest, none) against the partition.
	Offset int64
	Reset  string
	// Metadata is the committed offset's, when the start is the committed
	// offset.
	Metadata string
}

// PollPlan is what a poll reads.
type PollPlan struct {
	MemberEpoch int32
	Assignment  []api.TopicPartition
	Grants      []api.PartitionGrant
	Starts      []Start
	// SessionTimeout is the member's: a poll must not wait so long that
	// the session runs out under it.
	SessionTimeout time.Duration
}

// Plan returns where a poll by the member reads: per owned partition, the
// cursor's position (made while the partition was held), else where the
// member's last poll ended, else the committed offset, else the reset policy.
func (s *State) Plan(group, id string, cursor *api.Cursor) (PollPlan, error) {
	g, m, err := s.httpMember(group, id)
	if err != nil {
		return PollPlan{}, err
	}
	plan := PollPlan{MemberEpoch: m.Epoch, Assignment: m.Assignment(), Grants: m.Grants(), SessionTimeout: m.sessionTimeout()}
	for _, tp := range plan.Assignment {
		st := Start{TopicPartition: tp, Offset: -1, Reset: m.AutoOffsetReset}
		if off, ok := previousPosition(m, cursor, tp); ok {
			st.Offset = off
		} else if c, ok := g.Offsets[tp]; ok {
			st.Offset, st.Metadata = c.Offset, c.Metadata
		}
		plan.Starts = append(plan.Starts, st)
	}
	return plan, nil
}

// EndPoll remembers where a poll ended, for the member's next poll without
// a cursor, and renews the session (the poll may have waited). Memory only: a new coordinator starts from the committed offsets.
// Positions of partitions the member no longer owns are ignored.
func (s *State) EndPoll(group, id string, positions []api.PartitionOffset, now time.Time) {
	_, m, err := s.httpMember(group, id)
	if err != nil {
		return
	}
	m.LastSeen = now
	for _, p := range positions {
		tp := api.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		if m.grant(tp) < 0 {
			continue
		}
		if m.positions == nil {
			m.positions = map[api.TopicPartition]int64{}
		}
		m.positions[tp] = p.Offset
	}
}

// Commit checks that the member owns every partition named, at a member
// epoch no older than the partition's grant, and returns the offset records
// (plus a heartbeat's). Nothing is committed when any check fails.
func (s *State) Commit(group, id string, epoch int32, offsets []api.PartitionOffset, meta Metadata, now time.Time) ([]Record, error) {
	_, m, err := s.httpMember(group, id)
	if err != nil {
		return nil, err
	}
	m.LastSeen = now
	var recs []Record
	for _, o := range offsets {
		tp := api.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		grant := m.grant(tp)
		switch {
		case o.Offset < 0:
			return nil, api.Errorf(api.CodeInvalidOffset, "%s/%d: offset %d is negative", o.Topic, o.Partition, o.Offset)
		case grant < 0:
			return nil, api.Errorf(api.CodeFencedMemberEpoch, "member %q does not own %s/%d", id, o.Topic, o.Partition)
		case epoch < grant || epoch > m.Epoch:
			return nil, api.Errorf(api.CodeFencedMemberEpoch, "member %q holds %s/%d since epoch %d (now at %d); the commit names epoch %d", id, o.Topic, o.Partition, grant, m.Epoch, epoch)
		case len(o.Metadata) > api.MaxCommitMetadataBytes:
			return nil, api.Errorf(api.CodeInvalidRequest, "%s/%d: metadata is %d bytes, more than %d", o.Topic, o.Partition, len(o.Metadata), api.MaxCommitMetadataBytes)
		}
		recs = append(recs, offsetRecord(group, tp, OffsetValue{Offset: o.Offset, CommitMs: now.UnixMilli(), Metadata: o.Metadata}))
	}
	hb, err := s.Heartbeat(group, id, meta, now)
	return append(recs, hb...), err
}

// Leave removes a member; its partitions go to the others.
func (s *State) Leave(group, id string, meta Metadata) ([]Record, error) {
	g, _, err := s.member(group, id)
	if err != nil {
		return nil, err
	}
	next := g.clone()
	delete(next.Members, id)
	next.Epoch++
	retarget(next, meta)
	return []Record{groupRecord(next)}, nil
}

// SetOffsets writes offsets for a group with no members (an operator's
// reset). GROUP_NOT_EMPTY when it has members; GROUP_MANAGED for a push
// subscription's group, whose offsets move only through SeekManaged.
func (s *State) SetOffsets(group string, offsets []api.PartitionOffset, now time.Time) ([]Record, error) {
	if api.IsPushGroup(group) {
		return nil, api.Errorf(api.CodeGroupManaged, "group %q belongs to a push subscription; seek it through /v1/push", group)
	}
	if g := s.groups[group]; g != nil && len(g.Members) > 0 {
		return nil, api.Errorf(api.CodeGroupNotEmpty, "group %q has %d members; offsets are reset only while it has none", group, len(g.Members))
	}
	if err := s.checkNewGroup(group); err != nil {
		return nil, err
	}
	var recs []Record
	for _, o := range offsets {
		recs = append(recs, offsetRecord(group, api.TopicPartition{Topic: o.Topic, Partition: o.Partition}, OffsetValue{Offset: o.Offset, CommitMs: now.UnixMilli()}))
	}
	return recs, nil
}

// SeekManaged writes offsets of a push subscription's group, members or
// not (a subscription's seek). Every named partition that a member owns is
// granted to it again, at a new member epoch and fence: whatever the owner
// still commits for it under the old grant is refused (FENCED_MEMBER_EPOCH),
// and its next heartbeat shows the new fence, from which it restarts the
// partition at the new committed offset.
func (s *State) SeekManaged(group string, offsets []api.PartitionOffset, now time.Time) ([]Record, error) {
	if !api.IsPushGroup(group) {
		return nil, api.Errorf(api.CodeInvalidRequest, "group %q is not a push subscription's", group)
	}
	if err := s.checkNewGroup(group); err != nil {
		return nil, err
	}
	var recs []Record
	seek := map[api.TopicPartition]bool{}
	for _, o := range offsets {
		if o.Offset < 0 {
			return nil, api.Errorf(api.CodeInvalidOffset, "%s/%d: offset %d is negative", o.Topic, o.Partition, o.Offset)
		}
		tp := api.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		seek[tp] = true
		recs = append(recs, offsetRecord(group, tp, OffsetValue{Offset: o.Offset, CommitMs: now.UnixMilli()}))
	}
	g := s.groups[group]
	if g == nil {
		return recs, nil
	}
	next := g.clone()
	regranted := false
	for _, id := range next.memberIDs() {
		m := next.Members[id]
		bumped := false
		for i, o := range m.Owned {
			if !seek[o.tp()] {
				continue
			}
			if !bumped {
				m.Epoch++
				bumped = true
			}
			next.Fences++
			m.Owned[i].Epoch, m.Owned[i].Fence = m.Epoch, next.Fences
			regranted = true
		}
	}
	if regranted {
		recs = append(recs, groupRecord(next))
	}
	return recs, nil
}

// Delete removes a group with no members: tombstones for its offsets and
// its group record. A push subscription's group is deleted only with
// managed set (by the subscription's deletion), else GROUP_MANAGED.
func (s *State) Delete(group string, managed bool) ([]Record, error) {
	g := s.groups[group]
	if g == nil {
		return nil, api.Errorf(api.CodeUnknownGroup, "group %q does not exist", group)
	}
	if api.IsPushGroup(group) && !managed {
		return nil, api.Errorf(api.CodeGroupManaged, "group %q belongs to a push subscription; delete the subscription", group)
	}
	if len(g.Members) > 0 {
		return nil, api.Errorf(api.CodeGroupNotEmpty, "group %q has %d members", group, len(g.Members))
	}
	var recs []Record
	for tp := range g.Offsets {
		recs = append(recs, Record{Key: offsetRecordKey(group, tp)})
	}
	return append(recs, Record{Key: groupRecordKey(group)}), nil
}
