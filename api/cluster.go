package api

// Cluster metadata as brokers and gateways keep it in the coordinator. These are
// JSON documents under the znodes listed in DESIGN.md.

// BrokerRegistration is the data of /brokers/ids/{id} (ephemeral).
type BrokerRegistration struct {
	ID      int32  `json:"id"`
	Address string `json:"address"` // host:port of the broker's internal HTTP API, https://host:port with TLS
	Rack    string `json:"rack,omitempty"`
	// KafkaAddress is the host:port Kafka clients reach the broker's Kafka
	// listener at; empty when the broker serves no Kafka protocol.
	KafkaAddress string `json:"kafka_address,omitempty"`
	// ShuttingDown is set while the broker hands its leaderships to other
	// replicas before it stops (a controlled shutdown): the controller moves
	// them away (dropping it from those ISRs), elects no new leader on it,
	// and no leader adds it to an ISR; it stays in the ISRs it follows.
	ShuttingDown bool `json:"shutting_down,omitempty"`
	// Stopping is set once a controlled shutdown has handed over every
	// leadership that could move: the broker is about to stop following,
	// so the controller drops it from each ISR that keeps another live
	// member (acks=all writes do not wait for a replica on its way out),
	// and the leaders do not take it back.
	Stopping bool `json:"stopping,omitempty"`
	// FailedLogs are the replicas on this broker whose log a disk error made
	// read-only (or that could not be opened): the controller takes their
	// leaderships away and drops them from the ISRs at once, without
	// waiting for the lag timeout.
	FailedLogs []FailedLog `json:"failed_logs,omitempty"`
}

// FailedLog returns the broker's failed log of a partition, when its
// registration lists one.
func (r BrokerRegistration) FailedLog(topic string, partition int32) (FailedLog, bool) {
	for _, f := range r.FailedLogs {
		if f.Topic == topic && f.Partition == partition {
			return f, true
		}
	}
	return FailedLog{}, false
}

// FailedLog is one replica a broker can no longer write.
type FailedLog struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Reason is ReasonStorageError.
	Reason string `json:"reason"`
	// Error is the disk error's text.
	Error string `json:"error"`
}

// Reasons a replica is offline (OfflineReplica.Reason, FailedLog.Reason).
const (
	// ReasonStorageError: the replica's log is read-only after a disk error
	// (ENOSPC, EIO) or could not be opened.
	ReasonStorageError = "storage_error"
	// ReasonBrokerDown: the replica's broker is not registered.
	ReasonBrokerDown = "broker_down"
)

// ControllerRegistration is the data of /controller (ephemeral).
type ControllerRegistration struct {
	BrokerID int32 `json:"broker_id"`
	Epoch    int32 `json:"epoch"`
}

// TopicRecord is the data of /brokers/topics/{topic}: the replica assignment
// (replicas[p] lists partition p's brokers, preferred leader first) and configs.
type TopicRecord struct {
	// ID tells this topic apart from an earlier one of the same name; brokers
	// keep it beside each partition's log and set aside logs of another ID.
	ID       string            `json:"id"`
	Replicas [][]int32         `json:"replicas"`
	Configs  map[string]string `json:"configs"`
	// Deleting marks a topic whose deletion has begun: no reader sees it,
	// and the controller deletes what is left of it.
	Deleting bool `json:"deleting,omitempty"`
}

// PartitionState is the data of /brokers/topics/{topic}/partitions/{p}/state.
// It changes only by a conditional write on its znode version.
type PartitionState struct {
	Leader          int32   `json:"leader"` // -1 when offline
	LeaderEpoch     int32   `json:"leader_epoch"`
	ISR             []int32 `json:"isr"`
	ControllerEpoch int32   `json:"controller_epoch"`
}

// ProducerRecord is the data of a producer id's node: its current epoch.
type ProducerRecord struct {
	Epoch int16 `json:"epoch"`
	// Principal is who was issued the id, where authentication is on: only
	// it (or a principal with WRITE on the cluster) may bump the epoch.
	Principal string `json:"principal,omitempty"`
}
