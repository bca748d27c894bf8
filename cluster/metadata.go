package cluster

import (
	"sort"

	"github.com/sluice-io/sluice/api"
)

// Metadata is one consistent-enough snapshot of the cluster: each node is as
// the coordinator had it when last read. It is immutable once published.
type Metadata struct {
	Brokers    map[int32]api.BrokerRegistration
	Controller api.ControllerRegistration // BrokerID -1 when there is none
	Topics     map[string]*TopicMeta
}

// TopicMeta is one topic's record and its partitions' states.
type TopicMeta struct {
	Name   string
	Record api.TopicRecord
	// States[p] is partition p's state; StateVersions[p] is the znode version it
	// was read at (for conditional writes). A partition whose state node is
	// missing has Leader -1 and version -1.
	States        []api.PartitionState
	StateVersions []int32
}

// Partitions is the partition count.
func (t *TopicMeta) Partitions() int { return len(t.Record.Replicas) }

// BrokerIDs returns the live brokers' IDs in order.
func (m *Metadata) BrokerIDs() []int32 {
	ids := make([]int32, 0, len(m.Brokers))
	for id := range m.Brokers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// TopicNames returns the topic names in order.
func (m *Metadata) TopicNames() []string {
	names := make([]string, 0, len(m.Topics))
	for n := range m.Topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Leader returns the address of partition p's leader, with the state, or an
// error with the code a client should see.
func (m *Metadata) Leader(topic string, p int32) (addr string, st api.PartitionState, err error) {
	t, ok := m.Topics[topic]
	if !ok {
		return "", st, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic)
	}
	if p < 0 || int(p) >= t.Partitions() {
		return "", st, api.Errorf(api.CodeUnknownPartition, "topic %q has no partition %d", topic, p)
	}
	st = t.States[p]
	if st.Leader < 0 {
		return "", st, api.Errorf(api.CodeLeaderNotAvailable, "partition %s/%d is offline", topic, p)
	}
	b, ok := m.Brokers[st.Leader]
	if !ok {
		return "", st, api.Errorf(api.CodeLeaderNotAvailable, "leader %d of %s/%d is not registered", st.Leader, topic, p)
	}
	return b.Address, st, nil
}
