package api

import (
	"regexp"
	"strconv"
	"strings"
)

// OffsetsTopic is the internal, compacted topic that holds every consumer
// group's membership, assignment and committed offsets. The coordinator of a
// group is the leader of partition GroupPartition(group, n) of it.
const OffsetsTopic = "__consumer_offsets"

// GroupPartition is the __consumer_offsets partition that holds group's
// state: murmur2(group) made positive, modulo the partition count (Kafka's
// rule uses Java's hashCode; murmur2 is what Sluice already hashes keys with).
func GroupPartition(group string, partitions int) int32 {
	return int32(KeyPartition([]byte(group), partitions))
}

var groupIDRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateGroupID applies the topic-name rule to group ids, so they are safe
// in paths and metric labels.
func ValidateGroupID(g string) error {
	if !groupIDRE.MatchString(g) || g == "." || g == ".." {
		return Errorf(CodeInvalidGroupID, "group id %q must match [a-zA-Z0-9._-]{1,249}", g)
	}
	return nil
}

// Auto offset reset policies: where a member starts on a partition the group
// has no committed offset for (or whose committed offset is out of range).
const (
	ResetEarliest = "earliest"
	ResetLatest   = "latest"
	ResetNone     = "none"
)

// Assignors a member may ask for at join; the group uses the first member's.
const (
	AssignorUniform = "uniform" // balanced and sticky: partitions stay where they are while counts allow
	AssignorRange   = "range"   // per topic, contiguous ranges in member-id order (Kafka's RangeAssignor)
)

// Member kinds.
const (
	MemberKindHTTP = "http"
	MemberKindWS   = "ws"
	// MemberKindPush is a gateway's pusher in a push subscription's group.
	MemberKindPush = "push"
	// MemberKindKafka is a Kafka client speaking the classic group
	// protocol (JoinGroup, SyncGroup, Heartbeat) on a broker's Kafka
	// listener.
	MemberKindKafka = "kafka"
)

// PushGroupPrefix starts the id of every push subscription's group
// (push.<subscription>). Such a group is managed: only pushers join it,
// and its offsets move through the subscription's routes, never the
// group routes (GROUP_MANAGED).
const PushGroupPrefix = "push."

// IsPushGroup reports whether group belongs to a push subscription.
func IsPushGroup(group string) bool { return strings.HasPrefix(group, PushGroupPrefix) }

// Group kinds, as GET /v1/groups lists them.
const (
	GroupKindPull = "pull"
	GroupKindPush = "push"
)

// GroupKind is push for a push subscription's group, else pull.
func GroupKind(group string) string {
	if IsPushGroup(group) {
		return GroupKindPush
	}
	return GroupKindPull
}

// MaxCommitMetadataBytes bounds the metadata a commit stores with an offset
// (Kafka's offset.metadata.max.bytes).
const MaxCommitMetadataBytes = 4096

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// PartitionGrant is an owned partition and its fence: a token that only
// grows from one grant of a group's partition to the next, whichever
// member gets it. A store that a member writes into can keep the highest
// fence it saw per partition and refuse writes under a lower one, so an
// old owner that wakes up (paused, cut off) changes nothing there.
type PartitionGrant struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Fence     int64  `json:"fence"`
}

// JoinGroupRequest is the body of POST /v1/groups/{group}/members.
type JoinGroupRequest struct {
	Topics []string `json:"topics"`
	// InstanceID makes the member static (KIP-345): a join with a known
	// instance id takes over that member and its assignment, without a
	// rebalance; the previous incarnation is fenced (FENCED_INSTANCE_ID).
	InstanceID       string `json:"instance_id,omitempty"`
	SessionTimeoutMs int64  `json:"session_timeout_ms,omitempty"` // default 30000, 1000..300000
	AutoOffsetReset  string `json:"auto_offset_reset,omitempty"`  // earliest (default), latest, none
	AutoCommit       bool   `json:"auto_commit,omitempty"`
	Assignor         string `json:"assignor,omitempty"` // uniform (default) or range
}

// JoinGroupResponse answers a join.
type JoinGroupResponse struct {
	MemberID            string           `json:"member_id"`
	MemberEpoch         int32            `json:"member_epoch"`
	Assignment          []TopicPartition `json:"assignment"`
	Grants              []PartitionGrant `json:"grants"`
	HeartbeatIntervalMs int64            `json:"heartbeat_interval_ms"`
	// Cursor is for the first poll: it names no positions, so the poll
	// reads from the committed offsets (or auto_offset_reset) and can be
	// retried with the same cursor without skipping anything.
	Cursor string `json:"cursor"`
}

// GroupRecord is one record in a group poll: a fetched record and where it is from.
type GroupRecord struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	FetchedRecord
}

// GroupPollResponse answers GET /v1/groups/{group}/members/{member}/records.
type GroupPollResponse struct {
	Records []GroupRecord `json:"records"`
	// Cursor names the positions after these records: commit it, or pass it
	// to the next poll (passing the previous one again returns the same records).
	Cursor      string           `json:"cursor"`
	MemberEpoch int32            `json:"member_epoch"`
	Assignment  []TopicPartition `json:"assignment"`
	Grants      []PartitionGrant `json:"grants"`
}

// HeartbeatResponse answers POST .../members/{member}/heartbeat.
type HeartbeatResponse struct {
	MemberEpoch int32            `json:"member_epoch"`
	Assignment  []TopicPartition `json:"assignment"`
	Grants      []PartitionGrant `json:"grants"`
}

// PartitionOffset is a position in one partition: the next record to read.
type PartitionOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Metadata is stored with a committed offset and read back with it (at
	// most MaxCommitMetadataBytes); a push subscription keeps the head
	// record's attempt count there.
	Metadata string `json:"metadata,omitempty"`
}

// CommitRequest is the body of POST /v1/groups/{group}/offsets: explicit
// offsets, or the cursor of a poll.
type CommitRequest struct {
	MemberID    string            `json:"member_id"`
	MemberEpoch int32             `json:"member_epoch"`
	Offsets     []PartitionOffset `json:"offsets,omitempty"`
	Cursor      string            `json:"cursor,omitempty"`
}

// CommitResponse lists what was committed.
type CommitResponse struct {
	Committed []PartitionOffset `json:"committed"`
}

// ResetOffsetsRequest is the body of POST /v1/groups/{group}/offsets/reset.
type ResetOffsetsRequest struct {
	Topics []string `json:"topics"`
	To     string   `json:"to"` // earliest, latest, offset:N, timestamp:MS
}

// GroupMember describes a member in GET /v1/groups/{group}.
type GroupMember struct {
	MemberID    string           `json:"member_id"`
	InstanceID  string           `json:"instance_id,omitempty"`
	Kind        string           `json:"kind"`
	MemberEpoch int32            `json:"member_epoch"`
	Topics      []string         `json:"topics"`
	Assignment  []TopicPartition `json:"assignment"`
	LastSeenMs  int64            `json:"last_seen_ms"` // unix ms of the last request
}

// GroupPartitionLag is one partition's committed offset and lag.
type GroupPartitionLag struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	CommittedOffset int64  `json:"committed_offset"`   // -1: none
	HighWatermark   int64  `json:"high_watermark"`     // -1: unknown (leader unreachable)
	Lag             int64  `json:"lag"`                // records; -1 when unknown
	LagMs           int64  `json:"lag_ms"`             // now - timestamp of the first unconsumed record; 0 without lag, -1 unknown
	Owner           string `json:"owner,omitempty"`    // member id
	Metadata        string `json:"metadata,omitempty"` // stored with the committed offset
}

// Group states.
const (
	GroupEmpty       = "empty"       // no members; offsets may exist
	GroupStable      = "stable"      // every member holds its target assignment
	GroupRebalancing = "reconciling" // some partition is moving between members
)

// GroupDescription answers GET /v1/groups/{group}.
type GroupDescription struct {
	Group      string              `json:"group"`
	Kind       string              `json:"kind"` // pull, or push for a push subscription's group
	State      string              `json:"state"`
	GroupEpoch int32               `json:"group_epoch"`
	Assignor   string              `json:"assignor,omitempty"`
	Members    []GroupMember       `json:"members"`
	Partitions []GroupPartitionLag `json:"partitions"`
}

// GroupSummary is one row of GET /v1/groups.
type GroupSummary struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"` // pull, or push for a push subscription's group
	State   string `json:"state"`
	Members int    `json:"members"`
}

// GroupList answers GET /v1/groups.
type GroupList struct {
	Groups []GroupSummary `json:"groups"`
}

// ContentTypeGroupBatches is a raw group poll's answer (GET
// /v1/groups/{group}/members/{member}/batches): a 4-byte big-endian length,
// that many bytes of GroupBatchesMeta as JSON, then each partition's
// RecordBatch v2 bytes in the meta's order, GroupBatchesPart.Bytes each.
const ContentTypeGroupBatches = "application/vnd.sluice.group-batches"

// MaxGroupBatchesMeta bounds a raw group poll's meta, which a reader checks
// before it allocates.
const MaxGroupBatchesMeta = 16 << 20

// GroupBatchesMeta is the JSON head of a raw group poll: the poll's cursor,
// epoch, assignment and grants as GroupPollResponse has them, and where
// each partition's bytes start and end.
type GroupBatchesMeta struct {
	Cursor      string             `json:"cursor"`
	MemberEpoch int32              `json:"member_epoch"`
	Assignment  []TopicPartition   `json:"assignment"`
	Grants      []PartitionGrant   `json:"grants"`
	Partitions  []GroupBatchesPart `json:"partitions"`
}

// GroupBatchesPart is one partition's share of a raw group poll. Its
// batches are whole: the first may hold records before From, which a
// reader skips; the cursor's position for the partition is NextOffset.
type GroupBatchesPart struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	From          int64  `json:"from"`
	NextOffset    int64  `json:"next_offset"`
	HighWatermark int64  `json:"high_watermark"`
	Bytes         int64  `json:"bytes"`
}

// OffsetsTopicRequest is how __consumer_offsets is created, by a gateway at
// the first HTTP group call or by a broker at a Kafka client's first
// FindCoordinator: compacted, replicated to min(3, brokers), acks=all
// with min.insync.replicas min(2, RF), in 100 MiB segments.
func OffsetsTopicRequest(partitions, brokers int) CreateTopicRequest {
	rf := min(3, brokers)
	return CreateTopicRequest{Name: OffsetsTopic, Partitions: partitions, ReplicationFactor: rf,
		Configs: map[string]string{
			ConfigCleanupPolicy:     "compact",
			ConfigSegmentBytes:      strconv.Itoa(100 << 20),
			ConfigMinInsyncReplicas: strconv.Itoa(min(2, rf)),
		}}
}
