// Package sink writes topics into external stores exactly once. A sink is a
// consumer-group member (client.GroupConsumer, through any gateway) whose
// store, not the group, is the source of truth for its offsets: each batch
// of a partition is written together with the partition's next offset in one
// atomic step, checked against the partition's fence (api.PartitionGrant),
// so a crash never loses or doubles a record and a paused old owner that
// wakes up changes nothing. The group's committed offsets follow the store,
// for lag only.
package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/api"
)

// Errors a Store returns. Anything else is a transport or server failure,
// retried with backoff (see Retriable).
var (
	// ErrFenced: the store holds a higher fence for the partition: another
	// owner claimed it after this one. Nothing was changed; the sink drops
	// the partition until the group grants it again.
	ErrFenced = errors.New("sink: fenced: the store holds a higher fence for the partition")
	// ErrBadBatch: the store refused the batch as malformed (offsets not
	// ascending) or unwritable (a data key of another type). Nothing was
	// changed; retrying the same batch fails the same way.
	ErrBadBatch = errors.New("sink: batch refused by the store")
	// ErrStoreConflict: the store holds state this sink cannot take over
	// (the S3 archive's fence object names another group, or is not one).
	// Nothing was changed; the sink stops.
	ErrStoreConflict = errors.New("sink: the store's state belongs to something else")
)

// Retriable reports whether a store error may go away on retry: not
// ErrFenced, not ErrBadBatch, not ErrStoreConflict, not a context's end.
func Retriable(err error) bool {
	return err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrBadBatch) && !errors.Is(err, ErrStoreConflict) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Record is one record of a partition as a store writes it: the bytes the
// producer sent. A nil Key or Value is a null one (a null value is a
// tombstone in the modes that fold by key).
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// Store is where a sink writes; it keeps, per group and partition, the next
// offset to write and the highest fence that claimed the partition. Every
// method is one atomic step in the store: it changes everything it says or
// nothing. Methods block for one round trip; they are safe for concurrent
// use on different partitions. Every implementation passes the contract
// suite of store_contract_test.go (and the sinks over it, of
// sink_contract_test.go).
type Store interface {
	// Claim records fence as the partition's owner and returns the next
	// offset to write (-1 when nothing was written yet: read from the
	// group's position). Claiming again with the same fence is allowed.
	// Errors: ErrFenced when a higher fence is stored (nothing changes);
	// transport errors (retriable).
	Claim(ctx context.Context, tp api.TopicPartition, fence int64) (next int64, err error)
	// Write writes recs (one partition, offsets ascending) under fence:
	// records below the stored next are skipped, the rest written, and next
	// moved past the last record, all or nothing. Writing the same batch
	// twice writes it once. It returns the new next. Errors: ErrFenced (a
	// higher fence is stored; nothing changes), ErrBadBatch (offsets that
	// do not ascend, among others; nothing changes), transport
	// errors (retriable; the write may or may not have happened, and a
	// retry of the same batch is exact either way).
	Write(ctx context.Context, tp api.TopicPartition, fence int64, recs []Record) (next int64, err error)
}

// Flusher is a Store that gathers records across Write calls into larger
// units (the S3 archive rolls objects by size and age): its Write returns
// the next offset that is durable, which may trail the records handed
// over. The sink calls Flush after every poll for each partition it holds
// and may write, so a quiet partition still rolls by age, and Forget when
// it no longer holds one.
type Flusher interface {
	// Flush writes what is due for tp under fence and returns the durable
	// next offset. Errors as Write's.
	Flush(ctx context.Context, tp api.TopicPartition, fence int64) (next int64, err error)
	// Forget drops what is gathered for tp and not yet written. It does not
	// block on the store.
	Forget(tp api.TopicPartition)
}

// field is the name of a partition's entry in a store's offsets table.
func field(tp api.TopicPartition) string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Finisher is a Store that may hold a write begun and not completed when
// the sink stops (the S3 archive's range reserved in its fence object whose
// object is not stored yet). The sink calls Finish once when it stops,
// after its last Write or Flush, with a bounded context.
type Finisher interface {
	// Finish completes what was begun, or leaves it for the next owner's
	// Claim to complete; it never leaves anything half-written. Errors:
	// what stopped it (the work stays for the next owner).
	Finish(ctx context.Context) error
}
