package api

import (
	"encoding/json"
	"time"
)

// Public API v1 shapes, shared by the gateway, the CLI and tests. openapi.yaml
// describes the same shapes; a test keeps the two in step.

// ClusterInfo answers GET /v1/cluster.
type ClusterInfo struct {
	Brokers    []BrokerStatus `json:"brokers"`
	Controller int32          `json:"controller"`
	Version    string         `json:"version"`
	// Topics counts the topics, internal ones included.
	Topics     int             `json:"topics"`
	Partitions PartitionHealth `json:"partitions"`
	// TimeMs is the gateway's clock when it assembled the answer (unix ms);
	// rates are counter differences between two answers over their TimeMs.
	TimeMs int64 `json:"time_ms"`
}

// PartitionHealth counts the cluster's partitions by replication state.
type PartitionHealth struct {
	Total int `json:"total"`
	// UnderReplicated have fewer ISR members than replicas.
	UnderReplicated int `json:"under_replicated"`
	// UnderMinISR have fewer ISR members than their topic's
	// min.insync.replicas: acks=all produces to them fail.
	UnderMinISR int `json:"under_min_isr"`
	// Offline have no live leader.
	Offline int `json:"offline"`
}

// BrokerStatus is one broker as the cluster sees it. The sizes and counters
// come from the broker itself; they are -1 when it did not answer (or is not
// alive). The counters start at zero when the broker process starts.
type BrokerStatus struct {
	ID      int32  `json:"id"`
	Address string `json:"address"`
	Alive   bool   `json:"alive"`
	// Controller is true for the active controller.
	Controller bool `json:"controller"`
	// PartitionsLed and Replicas count, from the cluster metadata, the
	// partitions whose leader this broker is and those it is a replica of.
	PartitionsLed int `json:"partitions_led"`
	Replicas      int `json:"replicas"`
	// LocalBytes is the size of every partition on the broker's disk;
	// RemoteBytes of the object-store segments of the partitions it leads.
	LocalBytes  int64 `json:"local_bytes"`
	RemoteBytes int64 `json:"remote_bytes"`
	// ProducedRecords and ProducedBytes count what the broker appended as a
	// leader; FetchedRecords (offsets spanned) and FetchedBytes what it served
	// to consumers. Replication is not counted.
	ProducedRecords int64 `json:"produced_records"`
	ProducedBytes   int64 `json:"produced_bytes"`
	FetchedRecords  int64 `json:"fetched_records"`
	FetchedBytes    int64 `json:"fetched_bytes"`
	// FailedLogs are the broker's replicas whose log failed (its
	// registration's), empty when every log is healthy.
	FailedLogs []FailedLog `json:"failed_logs"`
}

// CreateTopicRequest is the body of POST /v1/topics.
type CreateTopicRequest struct {
	Name              string            `json:"name"`
	Partitions        int               `json:"partitions"`
	ReplicationFactor int               `json:"replication_factor"`
	Configs           map[string]string `json:"configs,omitempty"`
}

// Topic answers GET /v1/topics/{topic} and POST /v1/topics.
type Topic struct {
	Name              string            `json:"name"`
	ReplicationFactor int               `json:"replication_factor"`
	Configs           map[string]string `json:"configs"`
	Partitions        []PartitionInfo   `json:"partitions"`
}

// TopicList answers GET /v1/topics.
type TopicList struct {
	Topics []Topic `json:"topics"`
}

// OfflineReplica is a replica of a partition that cannot serve.
type OfflineReplica struct {
	Broker int32 `json:"broker"`
	// Reason is ReasonBrokerDown or ReasonStorageError.
	Reason string `json:"reason"`
	// Error is the disk error, for ReasonStorageError.
	Error string `json:"error,omitempty"`
}

// PartitionInfo is one partition's placement and positions.
type PartitionInfo struct {
	Partition      int32   `json:"partition"`
	Leader         int32   `json:"leader"`
	LeaderEpoch    int32   `json:"leader_epoch"`
	Replicas       []int32 `json:"replicas"`
	ISR            []int32 `json:"isr"`
	Offline        bool    `json:"offline"`
	LogStartOffset int64   `json:"log_start_offset"`
	// LocalStartOffset is the first offset on the leader's disk; below it,
	// reads come from the object store (tiered topics).
	LocalStartOffset int64 `json:"local_start_offset"`
	// RemoteEndOffset is the offset after the last segment safely in the
	// object store, -1 when none is.
	RemoteEndOffset int64 `json:"remote_end_offset"`
	HighWatermark   int64 `json:"high_watermark"`
	LogEndOffset    int64 `json:"log_end_offset"`
	// LocalBytes is the size of the partition on the leader's disk;
	// RemoteBytes of its segments in the object store (0 for a topic that
	// does not tier). -1 when not known.
	LocalBytes  int64 `json:"local_bytes"`
	RemoteBytes int64 `json:"remote_bytes"`
	// OfflineReplicas are the replicas that can serve nothing: their broker
	// is down, or their log failed (the reason and the error).
	OfflineReplicas []OfflineReplica `json:"offline_replicas"`
	// Followers is the leader's view of each other replica's log end; a
	// replica behind the leader's log end is lagging, one missing from the
	// ISR is out of sync. Empty when the leader did not answer.
	Followers []FollowerPosition `json:"followers"`
}

// FollowerPosition is a follower's log end as its leader last saw it.
type FollowerPosition struct {
	Broker int32 `json:"broker"`
	// LogEndOffset is -1 until the follower fetched from this leader.
	LogEndOffset int64 `json:"log_end_offset"`
}

// ProduceRecord is one record in a JSON or NDJSON produce body. Key and Value
// are JSON; KeyB64 and ValueB64 carry binary instead. A string Key is the
// key's bytes; any other JSON key is its encoded text.
type ProduceRecord struct {
	Key       json.RawMessage   `json:"key,omitempty"`
	KeyB64    *string           `json:"key_b64,omitempty"`
	Value     json.RawMessage   `json:"value,omitempty"`
	ValueB64  *string           `json:"value_b64,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Partition *int32            `json:"partition,omitempty"`
	Timestamp int64             `json:"timestamp,omitempty"`
}

// ProduceRequest is the JSON produce body.
type ProduceRequest struct {
	Records       []ProduceRecord  `json:"records"`
	ProducerID    *int64           `json:"producer_id,omitempty"`
	ProducerEpoch *int16           `json:"producer_epoch,omitempty"`
	Sequences     map[string]int32 `json:"sequences,omitempty"`
}

// RecordOffset is where one produced record landed.
type RecordOffset struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"` // -1 when not known (acks=0) or not written
	// Error is the code of the failure when this record's partition failed
	// while others succeeded.
	Error Code `json:"error,omitempty"`
}

// ProduceResponse lists offsets in request order. When some partitions failed,
// Error holds the first failure (the HTTP status is its status) and the failed
// records carry its code.
type ProduceResponse struct {
	Offsets []RecordOffset `json:"offsets"`
	Error   *ErrorDetail   `json:"error,omitempty"`
}

// FetchedRecord is one record in a JSON fetch answer. Value holds the record's
// value when it is valid JSON; otherwise ValueB64 holds its bytes (likewise Key:
// a key that is valid UTF-8 comes back as a JSON string). Null keys and values
// are omitted.
type FetchedRecord struct {
	Offset    int64             `json:"offset"`
	Timestamp int64             `json:"timestamp"`
	Key       *string           `json:"key,omitempty"`
	KeyB64    *string           `json:"key_b64,omitempty"`
	Value     json.RawMessage   `json:"value,omitempty"`
	ValueB64  *string           `json:"value_b64,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// FetchResponse answers GET .../records and is the WebSocket's text frame.
type FetchResponse struct {
	Records       []FetchedRecord `json:"records"`
	NextOffset    int64           `json:"next_offset"`
	HighWatermark int64           `json:"high_watermark"`
	// Throttle is X-Sluice-Throttle-Ms of the answer, not part of its
	// body: how long to pause before the next fetch because this one left
	// the caller's quota in debt.
	Throttle time.Duration `json:"-"`
}

// Credit is what a WebSocket consumer sends to be allowed more records.
type Credit struct {
	Credit int64 `json:"credit"`
}

// InitProducerRequest is the body of POST /v1/producers: empty for a new
// producer id, or the id of an existing one to bump its epoch (which fences
// every older instance of that producer).
type InitProducerRequest struct {
	ProducerID *int64 `json:"producer_id,omitempty"`
}

// ProducerIdentity answers POST /v1/producers.
type ProducerIdentity struct {
	ProducerID    int64 `json:"producer_id"`
	ProducerEpoch int16 `json:"producer_epoch"`
}
