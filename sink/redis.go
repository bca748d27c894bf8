package sink

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
)

// Redis modes: how a record lands in Redis.
const (
	// ModeStream appends each record to the stream <prefix><topic> (XADD,
	// fields partition, offset, key, value, headers; null ones omitted).
	ModeStream = "stream"
	// ModeHash folds records into the hash <prefix><topic>: HSET key value,
	// HDEL key for a null value. Keyless records are skipped.
	ModeHash = "hash"
	// ModeString folds records into strings <prefix><topic>:<key>: SET, or
	// DEL for a null value. Keyless records are skipped.
	ModeString = "string"
)

// DefaultPrefix starts every key a RedisStore writes.
const DefaultPrefix = "sluice:"

//go:embed claim.lua
var claimSource string

//go:embed write.lua
var writeSource string

// The scripts run with EVALSHA, loaded on first use (go-redis falls back to
// EVAL on NOSCRIPT, so a restarted or flushed Redis loads them again).
var (
	claimScript = redis.NewScript(claimSource)
	writeScript = redis.NewScript(writeSource)
)

// RedisOptions configure a RedisStore.
type RedisOptions struct {
	// Group names the offsets hash, <prefix>offsets:<group>. Required.
	Group string
	// Mode is ModeStream, ModeHash or ModeString. Default ModeStream.
	Mode string
	// Prefix starts every key. Default DefaultPrefix; set it to a single
	// space-free string of your own to share a Redis between deployments.
	Prefix string
}

func (o *RedisOptions) validate() error {
	if o.Mode == "" {
		o.Mode = ModeStream
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := api.ValidateGroupID(o.Group); err != nil {
		return err
	}
	switch o.Mode {
	case ModeStream, ModeHash, ModeString:
	default:
		return fmt.Errorf("sink: redis mode %q: want stream, hash or string", o.Mode)
	}
	return nil
}

// RedisStore is the Redis Store: each Claim and each Write is one Lua
// script (claim.lua, write.lua), so the fence check, the data and the
// partition's next offset change in one atomic step.
type RedisStore struct {
	rdb  redis.UniversalClient
	opts RedisOptions
}

// NewRedisStore returns a store over rdb, which the caller owns and closes.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) (*RedisStore, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &RedisStore{rdb: rdb, opts: opts}, nil
}

// OffsetsKey is the hash holding each partition's {"next","fence"}.
func (s *RedisStore) OffsetsKey() string { return s.opts.Prefix + "offsets:" + s.opts.Group }

// DataKey is the stream or hash a topic's records go to (in string mode,
// the stem of the per-key strings, which add ":<key>").
func (s *RedisStore) DataKey(topic string) string { return s.opts.Prefix + topic }

// Claim runs claim.lua. See Store.
func (s *RedisStore) Claim(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	n, err := claimScript.Run(ctx, s.rdb, []string{s.OffsetsKey()}, field(tp), fence).Int64()
	return n, classifyRedis(err)
}

// Write runs write.lua: one EVALSHA per batch. See Store.
func (s *RedisStore) Write(ctx context.Context, tp api.TopicPartition, fence int64, recs []Record) (int64, error) {
	return s.write(ctx, tp, fence, recs, batchForm(recs))
}

// write runs write.lua with recs in the given form, which must carry them
// (batchForm's answer, or formFull for any batch).
func (s *RedisStore) write(ctx context.Context, tp api.TopicPartition, fence int64, recs []Record, form string) (int64, error) {
	keys := []string{s.OffsetsKey()}
	if s.opts.Mode != ModeString {
		keys = append(keys, s.DataKey(tp.Topic))
	} else {
		for _, r := range recs {
			keys = append(keys, s.DataKey(tp.Topic)+":"+string(r.Key))
		}
	}
	args := make([]any, 0, 6+5*len(recs))
	args = append(args, field(tp), fence, s.opts.Mode, strconv.Itoa(int(tp.Partition)), form)
	switch form {
	case formKeyValue, formValue:
		args = append(args, recs[0].Offset)
		for _, r := range recs {
			if form == formKeyValue {
				args = append(args, r.Key)
			}
			args = append(args, r.Value)
		}
	default:
		for _, r := range recs {
			flags := ""
			if r.Key != nil {
				flags += "k"
			}
			if r.Value != nil {
				flags += "v"
			}
			headers := ""
			if len(r.Headers) > 0 {
				b, err := json.Marshal(r.Headers)
				if err != nil {
					return 0, fmt.Errorf("%w: headers of offset %d: %v", ErrBadBatch, r.Offset, err)
				}
				headers = string(b)
			}
			args = append(args, r.Offset, flags, r.Key, r.Value, headers)
		}
	}
	n, err := writeScript.Run(ctx, s.rdb, keys, args...).Int64()
	return n, classifyRedis(err)
}

// The forms write.lua takes a batch's records in.
const (
	// formKeyValue: the first offset, then key and value of each record.
	formKeyValue = "kv"
	// formValue: the first offset, then each record's value.
	formValue = "v"
	// formFull: offset, flags, key, value and headers of each record.
	formFull = "full"
)

// batchForm is the shortest form that carries recs whole: formKeyValue or
// formValue when the offsets follow one another and every record has the
// same shape (a value, no headers, a key in all or in none), else
// formFull. Two fifths (one fifth) of the full form's arguments, each of
// which Redis copies into the script and out again.
func batchForm(recs []Record) string {
	if len(recs) == 0 {
		return formFull
	}
	keyed := recs[0].Key != nil
	for i, r := range recs {
		if r.Offset != recs[0].Offset+int64(i) || r.Value == nil || len(r.Headers) > 0 || (r.Key != nil) != keyed {
			return formFull
		}
	}
	if keyed {
		return formKeyValue
	}
	return formValue
}

// classifyRedis maps the scripts' error replies to the package's sentinels;
// every other error (connection, timeout, a server error) stays as it is,
// retriable.
func classifyRedis(err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "FENCED "):
		return fmt.Errorf("%w: %s", ErrFenced, strings.TrimPrefix(msg, "FENCED "))
	case strings.HasPrefix(msg, "BADBATCH "):
		return fmt.Errorf("%w: %s", ErrBadBatch, strings.TrimPrefix(msg, "BADBATCH "))
	}
	return err
}
