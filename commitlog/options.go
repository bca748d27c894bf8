package commitlog

import (
	"errors"
	"log/slog"
	"time"
)

// Options configure one partition's log. Zero values take the documented defaults
// (see WithDefaults); a negative retention means "keep forever".
type Options struct {
	// SegmentBytes rolls the active segment when an append would take it past
	// this size. Default 1 GiB (Kafka's segment.bytes).
	SegmentBytes int64
	// SegmentAge rolls the active segment once its first batch is this old.
	// Default 7 days (Kafka's segment.ms).
	SegmentAge time.Duration
	// IndexIntervalBytes is how many log bytes may pass between two offset-index
	// entries. Default 4096 (Kafka's index.interval.bytes).
	IndexIntervalBytes int64

	// FlushMessages fsyncs the log once this many records were appended since the
	// last fsync. 0 means no count-based fsync. 1 means fsync before every append
	// returns. Default 0.
	FlushMessages int64
	// FlushInterval fsyncs the log at most this long after an append. Default 1s;
	// negative means no time-based fsync. Between fsyncs, appended data lives in the OS
	// page cache: it survives a crash of the process (kill -9) but not of the
	// machine; replication (acks=all) is what protects against the latter.
	FlushInterval time.Duration

	// RetentionAge deletes closed segments whose newest record is older than
	// this. Default 7 days (Kafka's retention.ms); negative keeps forever.
	RetentionAge time.Duration
	// RetentionBytes deletes the oldest closed segments while the log is larger
	// than this. Default -1 (no size limit; Kafka's retention.bytes).
	RetentionBytes int64

	// ProducerIDExpiration forgets an idempotent producer whose newest batch
	// here is older than this (ExpireProducers): its retries are no longer
	// recognised, and its table entry no longer costs memory. Default 1 day
	// (Kafka's producer.id.expiration.ms).
	ProducerIDExpiration time.Duration

	// Files is the pool the log's segment descriptors come from, shared
	// with the other logs that name it: it bounds what they keep open
	// while idle (see FilePool). Default: one pool of DefaultMaxOpenFiles
	// shared by every log of the process that names none.
	Files *FilePool

	// Logger receives recovery and error reports. Default slog.Default().
	Logger *slog.Logger
	// OnFail, when set, is called once, when a disk error makes the log
	// read-only (Err turns non-nil), with that error. It is called with
	// the log's lock held: it must return at once and not call the log.
	OnFail func(err error)
	// Now is the clock; tests replace it. Default time.Now.
	Now func() time.Time
}

// Defaults for Options.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentAge         = 7 * 24 * time.Hour
	DefaultIndexIntervalBytes = 4096
	DefaultFlushInterval      = time.Second
	DefaultRetentionAge       = 7 * 24 * time.Hour
	DefaultProducerIDExpiry   = 24 * time.Hour
)

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentAge == 0 {
		o.SegmentAge = DefaultSegmentAge
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.RetentionAge == 0 {
		o.RetentionAge = DefaultRetentionAge
	}
	if o.RetentionBytes == 0 {
		o.RetentionBytes = -1
	}
	if o.ProducerIDExpiration == 0 {
		o.ProducerIDExpiration = DefaultProducerIDExpiry
	}
	if o.Files == nil {
		o.Files = sharedPool()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	switch {
	case o.SegmentBytes < 1024:
		return errors.New("commitlog: segment bytes below 1024")
	case o.SegmentBytes > 1<<31-1:
		// Index positions are 32-bit, as in Kafka.
		return errors.New("commitlog: segment bytes above 2 GiB")
	case o.SegmentAge < 0:
		return errors.New("commitlog: negative segment age")
	case o.IndexIntervalBytes < 0:
		return errors.New("commitlog: negative index interval")
	case o.FlushMessages < 0:
		return errors.New("commitlog: negative flush messages")
	}
	return nil
}
