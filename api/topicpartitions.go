package api

// CreatePartitionsRequest is POST /v1/topics/{topic}/partitions: grow a
// topic to Count partitions. Partitions are only ever added, never removed
// (a smaller or equal count is INVALID_PARTITIONS); the new ones are placed
// as at creation, with the topic's replication factor. Keys are placed by
// murmur2 modulo the partition count, so after a topic grows new records of
// a key may go to another partition than its earlier ones did, as in Kafka.
// ValidateOnly checks without adding any.
type CreatePartitionsRequest struct {
	Count        int  `json:"count"`
	ValidateOnly bool `json:"validate_only,omitempty"`
}
