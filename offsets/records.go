// Package offsets is the consumer-group coordinator as a pure state machine:
// members, member epochs, assignors, committed offsets, and the records it
// writes to and replays from the __consumer_offsets topic. It does no I/O:
// the broker that leads a __consumer_offsets partition feeds it requests,
// appends the records an operation returns (acks=all), and only then applies
// them, through the same Apply that replays the partition at load. So the
// live state and a replayed state are built by the same code.
package offsets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sluice-io/sluice/api"
)

// Record is one key/value record for __consumer_offsets. A nil Value is a
// tombstone: the key's state is deleted, and compaction drops the key later.
type Record struct {
	Key   []byte
	Value []byte
}

// recordVersion is the version of the key and value layouts below.
const recordVersion = 1

// Keys are JSON so `sluice consume __consumer_offsets` is readable; encoding a
// struct is deterministic, which compaction needs (equal keys, equal bytes).
//
//	group:  {"v":1,"group":"g"}
//	offset: {"v":1,"group":"g","topic":"t","partition":0}
type groupKey struct {
	V     int    `json:"v"`
	Group string `json:"group"`
}

type offsetKey struct {
	V         int    `json:"v"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// decodedKey is either kind: Topic is nil for a group key.
type decodedKey struct {
	V         int     `json:"v"`
	Group     string  `json:"group"`
	Topic     *string `json:"topic"`
	Partition int32   `json:"partition"`
}

// OffsetValue is the value of an offset record.
type OffsetValue struct {
	Offset int64 `json:"offset"`
	// CommitMs is when the commit was accepted (unix ms).
	CommitMs int64 `json:"commit_ms"`
	// Metadata is the committer's, stored with the offset.
	Metadata string `json:"metadata,omitempty"`
	// LeaderEpoch is the leader epoch of the record before Offset, as a
	// Kafka client commits it (KIP-320); nil when the committer gave none.
	LeaderEpoch *int32 `json:"leader_epoch,omitempty"`
}

// GroupValue is the value of a group record: the whole persisted state of a
// group but its offsets. Groups are small, so each change rewrites it, and
// compaction keeps only the latest.
type GroupValue struct {
	V        int    `json:"v"`
	Epoch    int32  `json:"epoch"`
	Assignor string `json:"assignor"`
	// Partitions are the partition counts of the subscribed topics the
	// target assignment was computed with.
	Partitions map[string]int32 `json:"partitions"`
	Members    []MemberValue    `json:"members"`
	// Fences counts the grants the group ever made: each grant's fence is
	// the next value, so fences only grow, across members, per group.
	Fences int64 `json:"fences"`
	// Regexes are the regular expressions members of the consumer
	// protocol subscribe with, each with the topics it resolved to.
	Regexes map[string][]string `json:"regexes,omitempty"`
}

// MemberValue is one member in a group record.
type MemberValue struct {
	ID               string   `json:"id"`
	InstanceID       string   `json:"instance_id,omitempty"`
	Kind             string   `json:"kind"`
	Topics           []string `json:"topics"`
	SessionTimeoutMs int64    `json:"session_timeout_ms"`
	AutoOffsetReset  string   `json:"auto_offset_reset"`
	AutoCommit       bool     `json:"auto_commit,omitempty"`
	Epoch            int32    `json:"epoch"`
	// Owned are the partitions the member holds now, each with the member
	// epoch it was granted at (the per-partition fence).
	Owned []Grant `json:"owned"`
	// Target is where the assignor wants the member to end up.
	Target []api.TopicPartition `json:"target"`
	// Replaced are member ids this static member took over (newest last, at
	// most maxReplaced): their requests get FENCED_INSTANCE_ID.
	Replaced []string `json:"replaced,omitempty"`
	// Classic is set for a Kafka client's member (Kind "kafka"): what its
	// JoinGroup said about its protocol and timeouts.
	Classic *ClassicMember `json:"classic,omitempty"`
	// Consumer is set for a Kafka client's member of the consumer group
	// protocol (KIP-848; Kind "kafka" too).
	Consumer *ConsumerMember `json:"consumer,omitempty"`
}

// ClassicMember is what a Kafka member of the classic group protocol
// persists beyond other members.
type ClassicMember struct {
	// Protocol is the name of the client's first protocol (its assignor),
	// the one JoinGroup and SyncGroup answer with.
	Protocol string `json:"protocol"`
	// Version is the version of the ConsumerMemberMetadata the client sent:
	// its assignments are encoded at that version, as Kafka does.
	Version int16 `json:"version"`
	// RebalanceTimeoutMs is how long the member may take to rejoin once a
	// heartbeat asked it to.
	RebalanceTimeoutMs int64  `json:"rebalance_timeout_ms"`
	ClientID           string `json:"client_id,omitempty"`
	ClientHost         string `json:"client_host,omitempty"`
}

// Grant is an owned partition, the member epoch it was granted at (which
// fences the member's commits), and its fence: a token that only grows
// from grant to grant of the group, whichever member gets them, for stores
// that fence writers themselves (the exactly-once sinks).
type Grant struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
	Fence     int64  `json:"fence"`
}

func (g Grant) tp() api.TopicPartition {
	return api.TopicPartition{Topic: g.Topic, Partition: g.Partition}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("offsets: encoding %T: %v", v, err)) // only plain structs are encoded
	}
	return b
}

func groupRecordKey(group string) []byte {
	return mustJSON(groupKey{V: recordVersion, Group: group})
}

func offsetRecordKey(group string, tp api.TopicPartition) []byte {
	return mustJSON(offsetKey{V: recordVersion, Group: group, Topic: tp.Topic, Partition: tp.Partition})
}

// groupRecord encodes a group's persisted state.
func groupRecord(g *Group) Record {
	v := GroupValue{V: recordVersion, Epoch: g.Epoch, Assignor: g.Assignor, Partitions: g.Partitions, Members: []MemberValue{}, Fences: g.Fences}
	for _, id := range g.memberIDs() {
		v.Members = append(v.Members, g.Members[id].MemberValue)
	}
	if len(g.Regexes) > 0 {
		// Only the expressions members still use (one whose last member
		// left is dropped here).
		v.Regexes = map[string][]string{}
		for _, m := range v.Members {
			if c := m.Consumer; c != nil && c.TopicRegex != "" {
				if topics, ok := g.Regexes[c.TopicRegex]; ok {
					v.Regexes[c.TopicRegex] = topics
				}
			}
		}
	}
	return Record{Key: groupRecordKey(g.ID), Value: mustJSON(v)}
}

func offsetRecord(group string, tp api.TopicPartition, ov OffsetValue) Record {
	return Record{Key: offsetRecordKey(group, tp), Value: mustJSON(ov)}
}

// decodeKey parses a record key. ok is false for keys this version does not
// know (they are skipped, so a newer writer's records do not stop a replay).
func decodeKey(key []byte) (k decodedKey, ok bool, err error) {
	if len(key) == 0 || key[0] != '{' {
		return k, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(key))
	if err := d.Decode(&k); err != nil {
		return k, false, fmt.Errorf("offsets: bad record key %q: %w", key, err)
	}
	return k, k.V == recordVersion && k.Group != "", nil
}

func sortTPs(tps []api.TopicPartition) {
	sort.Slice(tps, func(i, j int) bool { return tpLess(tps[i], tps[j]) })
}

func tpLess(a, b api.TopicPartition) bool {
	if a.Topic != b.Topic {
		return a.Topic < b.Topic
	}
	return a.Partition < b.Partition
}
