// Package brokerapi is the broker's internal HTTP API: its routes, message
// shapes and the client gateways (and, for replication, other brokers) use to
// call it. Record data crosses it as raw RecordBatch v2 bytes.
package brokerapi

import (
	"time"

	"github.com/sluice-io/sluice/api"
)

// Routes of the internal API. {topic} and {partition} are path parameters.
const (
	PathProduce          = "/internal/v1/partitions/{topic}/{partition}/produce"
	PathFetch            = "/internal/v1/partitions/{topic}/{partition}/fetch"
	PathListOffsets      = "/internal/v1/partitions/{topic}/{partition}/offsets"
	PathEpochEnd         = "/internal/v1/partitions/{topic}/{partition}/epoch-end"
	PathProducerSnapshot = "/internal/v1/partitions/{topic}/{partition}/producer-snapshot"
	PathTopicStatus      = "/internal/v1/topics/{topic}/status"
	PathTopics           = "/internal/v1/topics"
	PathTopic            = "/internal/v1/topics/{topic}"
	PathTopicConfig      = "/internal/v1/topics/{topic}/configs"
	PathTopicPartitions  = "/internal/v1/topics/{topic}/partitions"
	PathHealth           = "/internal/v1/health"
	PathDrain            = "/internal/v1/drain"
	PathStorageRecheck   = "/internal/v1/storage/recheck"
	PathStats            = "/internal/v1/stats"
)

// ProduceResult answers a produce: the offsets the batches got.
type ProduceResult struct {
	BaseOffset    int64 `json:"base_offset"`
	LastOffset    int64 `json:"last_offset"`
	HighWatermark int64 `json:"high_watermark"`
	// Throttle is how long the caller should pause before its next
	// produce: the request left its produce or request quota in debt
	// (X-Sluice-Throttle-Ms on the answer; 0: it did not).
	Throttle time.Duration `json:"-"`
}

// EpochEndResult answers OffsetsForLeaderEpoch (KIP-101): the largest epoch
// at or below the one asked for that the leader's log knows, and the offset
// where the next epoch starts (the log end for the latest). Both are -1 when
// the leader knows no such epoch.
type EpochEndResult struct {
	Epoch     int32 `json:"epoch"`
	EndOffset int64 `json:"end_offset"`
}

// OffsetsResult answers a list-offsets query.
type OffsetsResult struct {
	Offset int64 `json:"offset"` // -1 when no record matches a timestamp query
	Positions
}

// Positions are a partition's offsets as its leader sees them.
type Positions struct {
	// LogStartOffset is the first offset readable at all: the first remote
	// segment's for a tiered partition, else the local log start.
	LogStartOffset int64 `json:"log_start_offset"`
	// LocalStartOffset is the first offset on this broker's disk.
	LocalStartOffset int64 `json:"local_start_offset"`
	// RemoteEndOffset is the offset after the last segment safely in the
	// object store (-1: none).
	RemoteEndOffset int64 `json:"remote_end_offset"`
	HighWatermark   int64 `json:"high_watermark"`
	LogEndOffset    int64 `json:"log_end_offset"`
}

// PartitionStatus is one partition on one broker.
type PartitionStatus struct {
	Partition int32  `json:"partition"`
	Leader    bool   `json:"leader"`
	Error     string `json:"error,omitempty"` // set when the partition is read-only after a disk error
	Positions
	// LocalBytes is the size of the partition's segments on this broker's disk.
	LocalBytes int64 `json:"local_bytes"`
	// RemoteBytes is the size of its log objects in the object store: 0 for
	// a topic that does not tier, -1 when this broker does not know (only a
	// leader reads the remote segment list).
	RemoteBytes int64 `json:"remote_bytes"`
	// Followers is the leader's view of each other replica (leaders only).
	Followers []FollowerStatus `json:"followers,omitempty"`
}

// FollowerStatus is what a leader knows of one follower.
type FollowerStatus struct {
	Broker int32 `json:"broker"`
	// LogEndOffset is the follower's log end as of its last fetch; -1 until
	// it fetched under this leadership.
	LogEndOffset int64 `json:"log_end_offset"`
}

// Stats answers PathStats: one broker's partitions and traffic. The
// counters start at zero when the broker process starts.
type Stats struct {
	BrokerID   int32 `json:"broker_id"`
	Controller bool  `json:"controller"`
	// Leaders and Replicas count the partitions this broker leads and holds.
	Leaders  int `json:"leaders"`
	Replicas int `json:"replicas"`
	// LocalBytes sums the segments of every partition on this broker's disk;
	// RemoteBytes the object-store bytes of the tiered partitions it leads.
	LocalBytes  int64 `json:"local_bytes"`
	RemoteBytes int64 `json:"remote_bytes"`
	// ProducedRecords and ProducedBytes count what this broker appended as a
	// leader (replication not included); FetchedRecords and FetchedBytes what
	// it served to consumers (follower fetches not included), in offsets
	// spanned and batch bytes.
	ProducedRecords int64 `json:"produced_records"`
	ProducedBytes   int64 `json:"produced_bytes"`
	FetchedRecords  int64 `json:"fetched_records"`
	FetchedBytes    int64 `json:"fetched_bytes"`
}

// TopicStatus answers PathTopicStatus: the partitions of a topic this broker holds.
type TopicStatus struct {
	Partitions []PartitionStatus `json:"partitions"`
}

// StorageRecheckResult answers PathStorageRecheck: the failed logs as the
// broker's last scan saw them, before the probes it started.
type StorageRecheckResult struct {
	FailedLogs []api.FailedLog `json:"failed_logs"`
}

// DrainResult answers PathDrain: the broker is shutting down and nothing it
// still leads could move (no other live ISR member).
type DrainResult struct {
	BrokerID    int32 `json:"broker_id"`
	Leaderships int   `json:"leaderships"`
}

// Health answers PathHealth.
type Health struct {
	BrokerID   int32 `json:"broker_id"`
	Ready      bool  `json:"ready"`
	Controller bool  `json:"controller"`
	// Storage is "ok", "degraded" (some of the broker's logs failed; it
	// serves the others, and the failed ones are handed over) or "failed"
	// (every log it holds failed: not ready).
	Storage          string   `json:"storage"`
	FailedPartitions []string `json:"failed_partitions,omitempty"`
}
