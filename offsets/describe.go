package offsets

import (
	"github.com/sluice-io/sluice/api"
)

// Describe renders a group for GET /v1/groups/{group}: members (each with
// its subscription: for a Kafka member subscribed by regular expression,
// the names it sent and those the expression resolved to), and one row
// per partition that is committed or owned. High watermarks and lag are the
// caller's to fill (they need the partitions' leaders); rows start unknown.
func (s *State) Describe(group string) (api.GroupDescription, bool) {
	g := s.groups[group]
	if g == nil {
		return api.GroupDescription{}, false
	}
	d := api.GroupDescription{Group: g.ID, Kind: api.GroupKind(g.ID), State: g.State(), GroupEpoch: g.Epoch, Assignor: g.Assignor,
		Members: []api.GroupMember{}, Partitions: []api.GroupPartitionLag{}}
	rows := map[api.TopicPartition]*api.GroupPartitionLag{}
	row := func(tp api.TopicPartition) *api.GroupPartitionLag {
		if r := rows[tp]; r != nil {
			return r
		}
		r := &api.GroupPartitionLag{Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: -1, HighWatermark: -1, Lag: -1, LagMs: -1}
		rows[tp] = r
		return r
	}
	for _, id := range g.memberIDs() {
		m := g.Members[id]
		d.Members = append(d.Members, api.GroupMember{
			MemberID: m.ID, InstanceID: m.InstanceID, Kind: m.Kind, MemberEpoch: m.Epoch,
			Topics: g.subscription(m), Assignment: m.Assignment(), LastSeenMs: m.LastSeen.UnixMilli(),
		})
		for _, tp := range m.Assignment() {
			row(tp).Owner = m.ID
		}
	}
	for tp, ov := range g.Offsets {
		row(tp).CommittedOffset, row(tp).Metadata = ov.Offset, ov.Metadata
	}
	tps := make([]api.TopicPartition, 0, len(rows))
	for tp := range rows {
		tps = append(tps, tp)
	}
	sortTPs(tps)
	for _, tp := range tps {
		d.Partitions = append(d.Partitions, *rows[tp])
	}
	return d, true
}

// Summary is a group's row in GET /v1/groups.
func (s *State) Summary(group string) api.GroupSummary {
	g := s.groups[group]
	return api.GroupSummary{Group: g.ID, Kind: api.GroupKind(g.ID), State: g.State(), Members: len(g.Members)}
}
