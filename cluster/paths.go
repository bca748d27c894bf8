// Package cluster owns the cluster metadata as it lives in the coordinator: the
// znode layout, and View, a watched, always-current snapshot of it that brokers
// and gateways read without touching the coordinator on their hot paths.
package cluster

import (
	"fmt"
	"strconv"
)

// Znode layout (see DESIGN.md). Paths follow Kafka's ZooKeeper layout so that
// operators find things where they expect them.
const (
	BrokersIDsPath      = "/brokers/ids"
	TopicsPath          = "/brokers/topics"
	ControllerPath      = "/controller"
	ControllerEpochPath = "/controller_epoch"
)

// BrokerPath is /brokers/ids/{id}: ephemeral, api.BrokerRegistration.
func BrokerPath(id int32) string { return BrokersIDsPath + "/" + strconv.Itoa(int(id)) }

// TopicPath is /brokers/topics/{topic}: api.TopicRecord.
func TopicPath(topic string) string { return TopicsPath + "/" + topic }

// PartitionsPath is /brokers/topics/{topic}/partitions.
func PartitionsPath(topic string) string { return TopicPath(topic) + "/partitions" }

// PartitionPath is /brokers/topics/{topic}/partitions/{p}.
func PartitionPath(topic string, p int32) string {
	return PartitionsPath(topic) + "/" + strconv.Itoa(int(p))
}

// PartitionStatePath is /brokers/topics/{topic}/partitions/{p}/state: api.PartitionState.
func PartitionStatePath(topic string, p int32) string { return PartitionPath(topic, p) + "/state" }

// ProducersPath holds one node per idempotent producer id:
// /producer_ids/p-{10-digit id}, data api.ProducerRecord, created sequential
// (the sequence number is the id) and bumped by conditional writes.
const ProducersPath = "/producer_ids"

// ProducerPath is the node of one producer id.
func ProducerPath(id int64) string { return fmt.Sprintf("%s/p-%010d", ProducersPath, id) }
