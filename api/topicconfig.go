package api

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// Topic configs use Kafka's names. Each has a default; a topic stores only the
// values it was given, so changing a default changes every topic that did not
// set its own.
const (
	ConfigRetentionMs        = "retention.ms"
	ConfigRetentionBytes     = "retention.bytes"
	ConfigSegmentBytes       = "segment.bytes"
	ConfigSegmentMs          = "segment.ms"
	ConfigMaxMessageBytes    = "max.message.bytes"
	ConfigMinInsyncReplicas  = "min.insync.replicas"
	ConfigFlushMessages      = "flush.messages"
	ConfigFlushMs            = "flush.ms"
	ConfigCleanupPolicy      = "cleanup.policy"
	ConfigCompressionType    = "compression.type"
	ConfigUncleanElection    = "unclean.leader.election.enable"
	ConfigIndexIntervalBytes = "index.interval.bytes"
	ConfigRemoteStorage      = "remote.storage.enable"
	ConfigLocalRetentionMs   = "local.retention.ms"
	ConfigLocalRetentionB    = "local.retention.bytes"
	ConfigMinCleanableRatio  = "min.cleanable.dirty.ratio"
	ConfigDeleteRetentionMs  = "delete.retention.ms"
	ConfigMinCompactionLagMs = "min.compaction.lag.ms"

	ConfigTimestampAfterMaxMs  = "message.timestamp.after.max.ms"
	ConfigTimestampBeforeMaxMs = "message.timestamp.before.max.ms"
)

// DefaultMaxMessageBytes is the largest record a topic accepts unless its
// max.message.bytes says otherwise.
const DefaultMaxMessageBytes = 1_000_000

// TopicConfig is a topic's parsed configuration.
type TopicConfig struct {
	// Retention (retention.ms; default 7 days) and RetentionBytes
	// (retention.bytes; default no limit) trim the log by time and size; -1
	// turns each off. Both are -1 whatever was set when cleanup.policy lacks
	// "delete": a compacted-only topic keeps every key's latest record for good.
	Retention          time.Duration
	RetentionBytes     int64
	SegmentBytes       int64         // segment.bytes; default 1 GiB.
	SegmentAge         time.Duration // segment.ms; default 7 days.
	MaxMessageBytes    int           // max.message.bytes: the largest record (key+value+headers); default 1,000,000.
	MinInsyncReplicas  int           // min.insync.replicas; default 2 when RF >= 3, else 1.
	FlushMessages      int64         // flush.messages; 0 (default) means no count-based fsync.
	FlushInterval      time.Duration // flush.ms; default 1000; 0 or -1 means no time-based fsync.
	Compression        Compression   // compression.type: the codec gateways use for this topic's batches; default none.
	UncleanElection    bool          // unclean.leader.election.enable; default false.
	IndexIntervalBytes int64         // index.interval.bytes; default 4096.
	// RemoteStorage copies closed segments to the object store
	// (remote.storage.enable; default false).
	RemoteStorage bool
	// LocalRetention and LocalRetentionBytes bound the local copy of a
	// tiered topic (local.retention.ms/.bytes; default -2: the same as
	// retention.ms/.bytes). A local segment is deleted by them only once it
	// is in the object store.
	LocalRetention      time.Duration
	LocalRetentionBytes int64

	// Compact and DeletePolicy are the two halves of cleanup.policy
	// ("delete", the default; "compact"; "compact,delete"): Compact turns
	// the log cleaner on, DeletePolicy keeps time and size retention on.
	Compact      bool
	DeletePolicy bool
	// MinCleanableDirtyRatio is min.cleanable.dirty.ratio (default 0.5): the
	// cleaner runs once the bytes written since the last clean are at least
	// this share of the cleanable log.
	MinCleanableDirtyRatio float64
	// DeleteRetention is delete.retention.ms (default 1 day): how long a
	// tombstone (a record with a null value) survives after the clean that
	// first covered it, so a consumer that saw the key's old value has that
	// long to see the delete.
	DeleteRetention time.Duration
	// MinCompactionLag is min.compaction.lag.ms (default 0): a record younger
	// than this is never compacted away.
	MinCompactionLag time.Duration

	// TimestampAfterMaxMs and TimestampBeforeMaxMs are
	// message.timestamp.after.max.ms (default one hour) and
	// message.timestamp.before.max.ms (default 2^63-1: no limit): how far
	// ahead of and behind the gateway's clock a record's timestamp may be.
	// Milliseconds, not Durations: Kafka's "no limit" does not fit one.
	TimestampAfterMaxMs  int64
	TimestampBeforeMaxMs int64
}

type configSpec struct {
	def   string
	parse func(c *TopicConfig, v string) error
	doc   string
}

func intRange(v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer")
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("out of range [%d, %d]", lo, hi)
	}
	return n, nil
}

var configSpecs = map[string]configSpec{
	ConfigRetentionMs: {"604800000", func(c *TopicConfig, v string) error {
		n, err := intRange(v, -1, 1<<53)
		c.Retention = time.Duration(n) * time.Millisecond
		if n == -1 {
			c.Retention = -1
		}
		return err
	}, "delete closed segments whose newest record is older than this (-1: never)"},
	ConfigRetentionBytes: {"-1", func(c *TopicConfig, v string) error {
		n, err := intRange(v, -1, 1<<62)
		c.RetentionBytes = n
		return err
	}, "delete the oldest closed segments while a partition is larger than this (-1: no limit)"},
	ConfigSegmentBytes: {"1073741824", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 1024, 1<<31-1)
		c.SegmentBytes = n
		return err
	}, "roll to a new segment file at this size"},
	ConfigSegmentMs: {"604800000", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 1, 1<<53)
		c.SegmentAge = time.Duration(n) * time.Millisecond
		return err
	}, "roll to a new segment once the active one is this old"},
	ConfigMaxMessageBytes: {strconv.Itoa(DefaultMaxMessageBytes), func(c *TopicConfig, v string) error {
		n, err := intRange(v, 1, 64<<20)
		c.MaxMessageBytes = int(n)
		return err
	}, "the largest record accepted (key, value and headers)"},
	ConfigMinInsyncReplicas: {"", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 1, 1000)
		c.MinInsyncReplicas = int(n)
		return err
	}, "acks=all fails with NOT_ENOUGH_REPLICAS when fewer replicas are in sync"},
	ConfigFlushMessages: {"0", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, 1<<62)
		c.FlushMessages = n
		return err
	}, "fsync after this many records (0: not by count)"},
	ConfigFlushMs: {"1000", func(c *TopicConfig, v string) error {
		n, err := intRange(v, -1, 1<<40)
		c.FlushInterval = time.Duration(n) * time.Millisecond
		if n <= 0 {
			c.FlushInterval = -1
		}
		return err
	}, "fsync at most this long after an append (0 or -1: not by time)"},
	ConfigCleanupPolicy: {"delete", func(c *TopicConfig, v string) error {
		switch v {
		case "delete":
			c.DeletePolicy = true
		case "compact":
			c.Compact = true
		case "compact,delete", "delete,compact":
			c.Compact, c.DeletePolicy = true, true
		default:
			return fmt.Errorf(`want "delete", "compact" or "compact,delete"`)
		}
		return nil
	}, "what happens to old segments: delete them by time and size, compact them to each key's latest record, or both"},
	ConfigMinCleanableRatio: {"0.5", func(c *TopicConfig, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) {
			return fmt.Errorf("not a number")
		}
		if f < 0 || f > 1 {
			return fmt.Errorf("out of range [0, 1]")
		}
		c.MinCleanableDirtyRatio = f
		return nil
	}, "compacted topics: clean once the bytes written since the last clean are this share of the log"},
	ConfigDeleteRetentionMs: {"86400000", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, 1<<53)
		c.DeleteRetention = time.Duration(n) * time.Millisecond
		return err
	}, "compacted topics: how long a tombstone survives after the clean that first covered it"},
	ConfigMinCompactionLagMs: {"0", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, 1<<53)
		c.MinCompactionLag = time.Duration(n) * time.Millisecond
		return err
	}, "compacted topics: records younger than this are never compacted away"},
	ConfigTimestampAfterMaxMs: {strconv.FormatInt(DefaultTimestampAfterMaxMs, 10), func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, math.MaxInt64)
		c.TimestampAfterMaxMs = n
		return err
	}, "refuse records whose timestamp is more than this many ms ahead of the gateway's clock (INVALID_TIMESTAMP)"},
	ConfigTimestampBeforeMaxMs: {strconv.FormatInt(DefaultTimestampBeforeMaxMs, 10), func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, math.MaxInt64)
		c.TimestampBeforeMaxMs = n
		return err
	}, "refuse records whose timestamp is more than this many ms behind the gateway's clock (INVALID_TIMESTAMP; default: no limit)"},
	ConfigCompressionType: {"none", func(c *TopicConfig, v string) error {
		codec, err := ParseCompression(v)
		c.Compression = codec
		return err
	}, "codec gateways use for this topic's batches: none, gzip, snappy, lz4, zstd"},
	ConfigUncleanElection: {"false", func(c *TopicConfig, v string) error {
		b, err := strconv.ParseBool(v)
		c.UncleanElection = b
		return err
	}, "let an out-of-sync replica become leader when no in-sync one is left (loses data)"},
	ConfigRemoteStorage: {"false", func(c *TopicConfig, v string) error {
		b, err := strconv.ParseBool(v)
		c.RemoteStorage = b
		return err
	}, "copy closed segments to the object store and serve old offsets from there"},
	ConfigLocalRetentionMs: {"-2", func(c *TopicConfig, v string) error {
		n, err := intRange(v, -2, 1<<53)
		c.LocalRetention = time.Duration(n) * time.Millisecond
		if n < 0 {
			c.LocalRetention = time.Duration(n)
		}
		return err
	}, "tiered topics: delete local segments older than this once they are in the object store (-2: retention.ms, -1: never)"},
	ConfigLocalRetentionB: {"-2", func(c *TopicConfig, v string) error {
		n, err := intRange(v, -2, 1<<62)
		c.LocalRetentionBytes = n
		return err
	}, "tiered topics: keep at most this many bytes locally, deleting only segments that are in the object store (-2: retention.bytes, -1: no limit)"},
	ConfigIndexIntervalBytes: {"4096", func(c *TopicConfig, v string) error {
		n, err := intRange(v, 0, 1<<30)
		c.IndexIntervalBytes = n
		return err
	}, "log bytes between two offset-index entries"},
}

// ConfigNames lists the known topic configs, sorted.
func ConfigNames() []string {
	out := make([]string, 0, len(configSpecs))
	for k := range configSpecs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ParseTopicConfig validates configs and fills defaults. replicationFactor
// decides min.insync.replicas' default. Errors are INVALID_CONFIG.
func ParseTopicConfig(configs map[string]string, replicationFactor int) (TopicConfig, error) {
	var c TopicConfig
	for name, spec := range configSpecs {
		v, ok := configs[name]
		if !ok {
			v = spec.def
		}
		if v == "" {
			continue
		}
		if err := spec.parse(&c, v); err != nil {
			return c, Errorf(CodeInvalidConfig, "%s=%q: %v", name, v, err)
		}
	}
	for name := range configs {
		if _, ok := configSpecs[name]; !ok {
			return c, Errorf(CodeInvalidConfig, "unknown topic config %q", name)
		}
	}
	if _, ok := configs[ConfigMinInsyncReplicas]; !ok {
		c.MinInsyncReplicas = 1
		if replicationFactor >= 3 {
			c.MinInsyncReplicas = 2
		}
	}
	if c.Compact && c.RemoteStorage {
		// Tiered segments are immutable objects; a cleaner rewriting the
		// local copy would make the two disagree.
		return c, Errorf(CodeInvalidConfig, "%s=true cannot be combined with %s=%s", ConfigRemoteStorage, ConfigCleanupPolicy, configs[ConfigCleanupPolicy])
	}
	if !c.DeletePolicy {
		// Kafka's rule: without "delete" in the policy, time and size do not
		// trim the log; only the cleaner removes records.
		c.Retention, c.RetentionBytes = -1, -1
	}
	if c.LocalRetention == -2 {
		c.LocalRetention = c.Retention
	}
	if c.LocalRetentionBytes == -2 {
		c.LocalRetentionBytes = c.RetentionBytes
	}
	if c.MinInsyncReplicas > replicationFactor && replicationFactor > 0 {
		return c, Errorf(CodeInvalidConfig, "min.insync.replicas=%d exceeds the replication factor %d", c.MinInsyncReplicas, replicationFactor)
	}
	return c, nil
}

var topicNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateTopicName applies Kafka's rule: [a-zA-Z0-9._-]{1,249}, not "." or "..".
func ValidateTopicName(name string) error {
	if !topicNameRE.MatchString(name) || name == "." || name == ".." {
		return Errorf(CodeInvalidTopicName, "topic name %q must match [a-zA-Z0-9._-]{1,249} and not be '.' or '..'", name)
	}
	return nil
}

// ConfigDoc returns a known topic config's default and what it means. The
// default is "" where it depends on the topic (min.insync.replicas, on the
// replication factor).
func ConfigDoc(name string) (def, doc string, ok bool) {
	spec, ok := configSpecs[name]
	return spec.def, spec.doc, ok
}
