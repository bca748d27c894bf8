package offsets

import (
	"slices"

	"github.com/sluice-io/sluice/api"
)

// Metadata reports a topic's partition count; ok is false when the topic
// does not exist. The coordinator's owner passes its cluster view.
type Metadata func(topic string) (partitions int32, ok bool)

// retarget recomputes every member's target assignment from the group's
// subscriptions (names, and what regular expressions resolved to) and the topics' current partition counts.
func retarget(g *Group, meta Metadata) {
	g.Partitions = map[string]int32{}
	for _, m := range g.Members {
		for _, t := range g.subscription(m) {
			if n, ok := meta(t); ok {
				g.Partitions[t] = n
			}
		}
	}
	ids := g.memberIDs()
	subs := g.subscriptions()
	var targets map[string][]api.TopicPartition
	switch g.Assignor {
	case api.AssignorRange:
		targets = assignRange(g, ids, subs)
	default:
		targets = assignUniform(g, ids, subs)
	}
	for _, id := range ids {
		t := targets[id]
		sortTPs(t)
		if t == nil {
			t = []api.TopicPartition{}
		}
		g.Members[id].Target = t
	}
}

// partitionCountsChanged reports whether a subscribed topic's partition
// count differs from the one the targets were computed with.
func partitionCountsChanged(g *Group, meta Metadata) bool {
	seen := map[string]bool{}
	for _, m := range g.Members {
		for _, t := range g.subscription(m) {
			if seen[t] {
				continue
			}
			seen[t] = true
			n, ok := meta(t)
			old, had := g.Partitions[t]
			if ok != had || n != old {
				return true
			}
		}
	}
	return false
}

// assignRange is Kafka's RangeAssignor: per topic, the subscribed members in
// id order get contiguous ranges; the first (partitions % members) get one more.
func assignRange(g *Group, ids []string, subs map[string]map[string]bool) map[string][]api.TopicPartition {
	out := map[string][]api.TopicPartition{}
	for _, topic := range sortedTopics(g.Partitions) {
		var members []string
		for _, id := range ids {
			if subs[id][topic] {
				members = append(members, id)
			}
		}
		if len(members) == 0 {
			continue
		}
		n := int(g.Partitions[topic])
		per, extra := n/len(members), n%len(members)
		p := 0
		for i, id := range members {
			k := per
			if i < extra {
				k++
			}
			for j := 0; j < k; j++ {
				out[id] = append(out[id], api.TopicPartition{Topic: topic, Partition: int32(p)})
				p++
			}
		}
	}
	return out
}

// assignUniform spreads all subscribed partitions evenly over the members
// and moves as few as it can: each member first keeps its previous target
// up to its share, then the rest go to the eligible member holding fewest.
// With identical subscriptions the counts differ by at most one.
func assignUniform(g *Group, ids []string, subs map[string]map[string]bool) map[string][]api.TopicPartition {
	var all []api.TopicPartition
	for _, topic := range sortedTopics(g.Partitions) {
		for p := int32(0); p < g.Partitions[topic]; p++ {
			all = append(all, api.TopicPartition{Topic: topic, Partition: p})
		}
	}
	out := map[string][]api.TopicPartition{}
	var members []string
	for _, id := range ids {
		if len(subs[id]) > 0 {
			members = append(members, id)
		}
	}
	if len(members) == 0 || len(all) == 0 {
		return out
	}
	exists := map[api.TopicPartition]bool{}
	for _, tp := range all {
		exists[tp] = true
	}
	eligible := func(id string, tp api.TopicPartition) bool {
		return subs[id][tp.Topic]
	}
	floor, extra := len(all)/len(members), len(all)%len(members)
	taken := map[api.TopicPartition]bool{}
	keep := func(id string, limit int) {
		for _, tp := range g.Members[id].Target {
			if len(out[id]) >= limit {
				return
			}
			if exists[tp] && !taken[tp] && eligible(id, tp) {
				out[id] = append(out[id], tp)
				taken[tp] = true
			}
		}
	}
	for _, id := range members {
		keep(id, floor)
	}
	for _, id := range members {
		if extra == 0 {
			break
		}
		before := len(out[id])
		if before == floor {
			keep(id, floor+1)
			if len(out[id]) > before {
				extra--
			}
		}
	}
	for _, tp := range all {
		if taken[tp] {
			continue
		}
		best := ""
		for _, id := range members {
			if eligible(id, tp) && (best == "" || len(out[id]) < len(out[best])) {
				best = id
			}
		}
		if best != "" {
			out[best] = append(out[best], tp)
			taken[tp] = true
		}
	}
	return out
}

func sortedTopics(m map[string]int32) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
