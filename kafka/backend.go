package kafka

import (
	"context"

	"github.com/sluice-io/sluice/cluster"
)

// Backend is what the listener needs from the broker it serves: the
// broker's own metadata, produce, fetch, offsets and producer-id paths, so that a
// Kafka client and an HTTP client reach the same code. Errors are the
// broker's *api.Error values; the listener maps their codes to Kafka's
// (errors.go). Every method may be called from many connections at once.
type Backend interface {
	// Metadata returns the broker's current view of the cluster. It never
	// blocks and never returns nil; the snapshot is immutable.
	Metadata() *cluster.Metadata

	// Produce appends one RecordBatch v2 (as the client encoded it) to a
	// partition this broker leads, and returns once acks are met: 0 and 1
	// after the append, -1 once every ISR member has the batch (with
	// min.insync.replicas checked before the append). The broker checks
	// the CRC and layout, the topic's max.message.bytes and timestamp
	// bounds and the producer's sequence, and stamps the base offset and
	// leader epoch into batch in place. A retried idempotent batch is
	// answered with the offsets it was first written at. It blocks at
	// most until ctx ends (REQUEST_TIMED_OUT: the batch may still commit).
	Produce(ctx context.Context, topic string, partition int32, batch []byte, acks int16) (ProduceResult, error)

	// ListOffset answers a partition's offset at timestamp: -2 the log
	// start (the remote tier included), -1 the high watermark, else the
	// first record at or after it (the remote tier included; Offset -1 when
	// every record is older). currentLeaderEpoch (-1: none) fences a client
	// with stale metadata (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH).
	// NOT_LEADER unless this broker leads the partition.
	ListOffset(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (OffsetResult, error)

	// Fetch reads a consumer's fetch through the broker's multi-partition
	// long poll: up to each partition's high watermark, from the object
	// store below the local log start, blocking until MinBytes are there,
	// a partition has an error, MaxWait passed or ctx ended. Each
	// partition's CurrentLeaderEpoch is fenced as ListOffset's is;
	// NOT_LEADER unless this broker leads it; an offset outside the log is
	// OFFSET_OUT_OF_RANGE. The consumer byte-rate quota of the client is
	// charged what is read. The error is for the request as a whole.
	Fetch(ctx context.Context, req FetchRequest) (FetchResult, error)

	// EpochEnd answers OffsetForLeaderEpoch for a partition this broker
	// leads (NOT_LEADER otherwise), with currentLeaderEpoch (-1: none)
	// fenced as ListOffset's is.
	EpochEnd(ctx context.Context, topic string, partition int32, currentLeaderEpoch, epoch int32) (EpochEndResult, error)

	// InitProducerID issues a new idempotent producer id at epoch 0, from
	// the same sequence the HTTP producers' ids come from.
	InitProducerID(ctx context.Context) (id int64, epoch int16, err error)
}

// ProduceResult is a produced batch's place in its partition.
type ProduceResult struct {
	BaseOffset     int64
	LogStartOffset int64
}

// OffsetResult answers ListOffset.
type OffsetResult struct {
	Offset int64
	// LeaderEpoch is the epoch of the batch at Offset, or -1 when unknown.
	LeaderEpoch int32
}
