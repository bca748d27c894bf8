package offsets

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sluice-io/sluice/api"
)

// State is every group of one __consumer_offsets partition. It is not safe
// for concurrent use: its owner (the broker's coordinator for the partition)
// serializes operations, appends the records an operation returns, and
// applies them before the next operation begins.
//
// Operations (Join, Heartbeat, StartPoll, Commit, Leave, ...) never change
// the persisted state themselves: they return the records that would, and
// the owner feeds those to Apply once they are in the log. They do change
// what only memory holds (last-seen times, poll positions).
type State struct {
	groups     map[string]*Group
	maxMembers int
	maxGroups  int
}

// NewState returns an empty state whose groups hold at most
// DefaultMaxGroupMembers members, and that holds at most
// api.DefaultMaxGroupsPerCoordinator groups.
func NewState() *State {
	return &State{groups: map[string]*Group{}, maxMembers: DefaultMaxGroupMembers, maxGroups: api.DefaultMaxGroupsPerCoordinator}
}

// SetMaxGroups changes the bound on the groups the state holds (n > 0);
// groups beyond it that a replay brings in stay, but no more are created.
func (s *State) SetMaxGroups(n int) { s.maxGroups = n }

// checkNewGroup refuses to create group past the bound; an existing group
// passes.
func (s *State) checkNewGroup(group string) error {
	if s.groups[group] == nil && len(s.groups) >= s.maxGroups {
		return api.Errorf(api.CodeTooManyGroups, "this group coordinator holds %d groups, its %s; group %q would be one more",
			len(s.groups), api.LimitMaxGroupsPerCoord, group)
	}
	return nil
}

// SetMaxGroupMembers changes the bound on a group's members (n > 0); members
// beyond it that a replay brings in stay, but no more join.
func (s *State) SetMaxGroupMembers(n int) { s.maxMembers = n }

// Group returns a group, or nil when it does not exist.
func (s *State) Group(id string) *Group { return s.groups[id] }

// Groups lists the group ids, sorted.
func (s *State) Groups() []string {
	out := make([]string, 0, len(s.groups))
	for id := range s.groups {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Apply replays one record (from the log at load, or just appended). now is
// the session start for members the record brings in. Records with keys
// this version does not know are skipped.
func (s *State) Apply(r Record, now time.Time) error {
	k, ok, err := decodeKey(r.Key)
	if err != nil || !ok {
		return err
	}
	g := s.groups[k.Group]
	if k.Topic == nil { // group record
		if r.Value == nil {
			delete(s.groups, k.Group)
			return nil
		}
		var v GroupValue
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return fmt.Errorf("offsets: group %q: bad group record: %w", k.Group, err)
		}
		if g == nil {
			g = newGroup(k.Group)
			s.groups[k.Group] = g
		}
		applyGroupValue(g, v, now)
		return nil
	}
	tp := api.TopicPartition{Topic: *k.Topic, Partition: k.Partition}
	if r.Value == nil {
		if g != nil {
			g.deleteOffset(tp)
			if len(g.Members) == 0 && len(g.Offsets) == 0 && g.Epoch == 0 {
				delete(s.groups, k.Group)
			}
		}
		return nil
	}
	var ov OffsetValue
	if err := json.Unmarshal(r.Value, &ov); err != nil {
		return fmt.Errorf("offsets: group %q: bad offset record: %w", k.Group, err)
	}
	if g == nil {
		g = newGroup(k.Group)
		s.groups[k.Group] = g
	}
	g.setOffset(tp, ov)
	return nil
}

// setOffset and deleteOffset copy the offsets map on write: operations
// share it with clones they make.
func (g *Group) setOffset(tp api.TopicPartition, ov OffsetValue) {
	next := make(map[api.TopicPartition]OffsetValue, len(g.Offsets)+1)
	for k, v := range g.Offsets {
		next[k] = v
	}
	next[tp] = ov
	g.Offsets = next
}

func (g *Group) deleteOffset(tp api.TopicPartition) {
	if _, ok := g.Offsets[tp]; !ok {
		return
	}
	next := make(map[api.TopicPartition]OffsetValue, len(g.Offsets))
	for k, v := range g.Offsets {
		if k != tp {
			next[k] = v
		}
	}
	g.Offsets = next
}

// applyGroupValue replaces g's persisted state by v, keeping what memory
// holds for members that stay: last seen, and positions in partitions they
// still own.
func applyGroupValue(g *Group, v GroupValue, now time.Time) {
	old := g.Members
	g.Epoch, g.Assignor, g.Fences = v.Epoch, v.Assignor, v.Fences
	g.Partitions, g.Regexes = v.Partitions, v.Regexes
	if g.Partitions == nil {
		g.Partitions = map[string]int32{}
	}
	g.Members = make(map[string]*Member, len(v.Members))
	for _, mv := range v.Members {
		m := &Member{MemberValue: mv, LastSeen: now}
		if prev := old[mv.ID]; prev != nil {
			m.LastSeen, m.rejoinBy = prev.LastSeen, prev.rejoinBy
			for tp, off := range prev.positions {
				if m.grant(tp) >= 0 && m.grant(tp) == prev.grant(tp) {
					if m.positions == nil {
						m.positions = map[api.TopicPartition]int64{}
					}
					m.positions[tp] = off
				}
			}
		}
		g.Members[mv.ID] = m
	}
}

// Expire returns, for every group with members whose session ran out by
// now, the record that removes them (their partitions go to the others).
func (s *State) Expire(now time.Time, meta Metadata) []Record {
	var out []Record
	for _, id := range s.Groups() {
		g := s.groups[id]
		var gone []string
		for _, mid := range g.memberIDs() {
			m := g.Members[mid]
			if now.Sub(m.LastSeen) > m.sessionTimeout() || !m.rejoinBy.IsZero() && now.After(m.rejoinBy) {
				gone = append(gone, mid)
			}
		}
		if len(gone) == 0 {
			continue
		}
		next := g.clone()
		for _, mid := range gone {
			delete(next.Members, mid)
		}
		next.Epoch++
		retarget(next, meta)
		out = append(out, groupRecord(next))
	}
	return out
}
