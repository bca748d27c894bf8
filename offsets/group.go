package offsets

import (
	"slices"
	"sort"
	"time"

	"github.com/sluice-io/sluice/api"
)

// maxReplaced bounds the member ids a static member remembers having replaced.
const maxReplaced = 4

// Group is one consumer group's state on its coordinator.
type Group struct {
	ID         string
	Epoch      int32 // bumps when membership, subscriptions or partition counts change
	Assignor   string
	Partitions map[string]int32 // partition counts the target was computed with
	Members    map[string]*Member
	Offsets    map[api.TopicPartition]OffsetValue
	Fences     int64 // grants made so far; the last fence handed out
	// Regexes are the regular expressions members subscribe with, each
	// with the topics it resolved to (sorted).
	Regexes map[string][]string
	// regexes caches Regexes compiled, with the topic-set version each
	// was resolved at (memory only; see regex.go).
	regexes map[string]*compiledRegex
}

// Member is a member's persisted state plus what only the coordinator's
// memory holds: when it was last heard from and where its polls ended. A new
// coordinator starts every session afresh and every position at the
// committed offset.
type Member struct {
	MemberValue
	LastSeen  time.Time
	positions map[api.TopicPartition]int64
	// rejoinBy is set for a Kafka member from the first heartbeat that asks
	// it to rejoin: a member that keeps heartbeating but has not rejoined
	// by then is removed (its rebalance timeout), so a partition pending
	// its revocation cannot stay held. Zero: no rejoin asked.
	rejoinBy time.Time
}

func newGroup(id string) *Group {
	return &Group{ID: id, Partitions: map[string]int32{}, Members: map[string]*Member{}, Offsets: map[api.TopicPartition]OffsetValue{}}
}

func (g *Group) memberIDs() []string {
	ids := make([]string, 0, len(g.Members))
	for id := range g.Members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// clone deep-copies the persisted part of the group, so an operation can
// compute the next state without touching the live one.
func (g *Group) clone() *Group {
	c := &Group{ID: g.ID, Epoch: g.Epoch, Assignor: g.Assignor, Partitions: make(map[string]int32, len(g.Partitions)),
		Members: make(map[string]*Member, len(g.Members)), Offsets: g.Offsets, Fences: g.Fences}
	for t, n := range g.Partitions {
		c.Partitions[t] = n
	}
	if g.Regexes != nil {
		c.Regexes = make(map[string][]string, len(g.Regexes))
		for expr, topics := range g.Regexes {
			c.Regexes[expr] = topics // never modified in place
		}
	}
	for id, m := range g.Members {
		mv := m.MemberValue
		mv.Topics = slices.Clone(mv.Topics)
		mv.Owned = slices.Clone(mv.Owned)
		mv.Target = slices.Clone(mv.Target)
		mv.Replaced = slices.Clone(mv.Replaced)
		if mv.Classic != nil {
			c := *mv.Classic
			mv.Classic = &c
		}
		if mv.Consumer != nil {
			c := *mv.Consumer
			mv.Consumer = &c
		}
		c.Members[id] = &Member{MemberValue: mv, LastSeen: m.LastSeen}
	}
	return c
}

// owner returns the member that owns tp, or nil.
func (g *Group) owner(tp api.TopicPartition) *Member {
	for _, m := range g.Members {
		if m.grant(tp) >= 0 {
			return m
		}
	}
	return nil
}

// byInstance finds the live member with a static instance id.
func (g *Group) byInstance(instance string) *Member {
	if instance == "" {
		return nil
	}
	for _, m := range g.Members {
		if m.InstanceID == instance {
			return m
		}
	}
	return nil
}

// replacedBy finds the member that took over member id, or nil.
func (g *Group) replacedBy(id string) *Member {
	for _, m := range g.Members {
		if slices.Contains(m.Replaced, id) {
			return m
		}
	}
	return nil
}

// State is the group's state for GET /v1/groups/{group}.
func (g *Group) State() string {
	if len(g.Members) == 0 {
		return api.GroupEmpty
	}
	for _, m := range g.Members {
		if !sameSet(m.Owned, m.Target) {
			return api.GroupRebalancing
		}
	}
	return api.GroupStable
}

// grant returns the epoch tp was granted to m at, or -1 when m does not own it.
func (m *Member) grant(tp api.TopicPartition) int32 {
	for _, o := range m.Owned {
		if o.Topic == tp.Topic && o.Partition == tp.Partition {
			return o.Epoch
		}
	}
	return -1
}

// Assignment is the partitions the member owns now, sorted.
func (m *Member) Assignment() []api.TopicPartition {
	out := make([]api.TopicPartition, 0, len(m.Owned))
	for _, o := range m.Owned {
		out = append(out, o.tp())
	}
	sortTPs(out)
	return out
}

// Grants is the partitions the member owns with their fences, sorted.
func (m *Member) Grants() []api.PartitionGrant {
	out := make([]api.PartitionGrant, 0, len(m.Owned))
	for _, o := range m.Owned {
		out = append(out, api.PartitionGrant{Topic: o.Topic, Partition: o.Partition, Fence: o.Fence})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// sessionTimeout is the member's session timeout.
func (m *Member) sessionTimeout() time.Duration {
	return time.Duration(m.SessionTimeoutMs) * time.Millisecond
}

func sameSet(owned []Grant, target []api.TopicPartition) bool {
	if len(owned) != len(target) {
		return false
	}
	for _, t := range target {
		found := false
		for _, o := range owned {
			if o.tp() == t {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
