package sink_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// storeFixture is one Store implementation over a backend of its own (a
// memory backend, a key prefix in the test Redis, a prefix in the test S3
// bucket), for the contract suites (store_contract_test.go,
// sink_contract_test.go).
type storeFixture struct {
	// open returns a Store over the fixture's backend. Stores opened from
	// one fixture share the backend, as processes share a Redis or a
	// bucket; each has its own state in memory, if it keeps any. log serves
	// a store that rebuilds ranges from the log (the S3 archive).
	open func(t *testing.T, log sink.ReadLogFunc) sink.Store
	// gathers is set for a store that gathers records across Write calls
	// and stores them ten at a time (the S3 archive with MaxRecords 10):
	// its Write answers the durable next offset, which trails the records
	// handed over until ten are gathered or settle is called.
	gathers bool
	// settle stores what a gathering store holds of tp and returns the
	// durable next offset; nil when Write's answer is durable already.
	settle func(ctx context.Context, s sink.Store, tp api.TopicPartition, fence int64) (int64, error)
	// state renders everything the backend holds: equal before and after
	// a call that must change nothing.
	state func(t *testing.T) string
	// records returns the records the backend holds for tp, in the order
	// it holds them; nil for a store that folds records by key.
	records func(t *testing.T, tp api.TopicPartition) []sink.Record
	// ends returns, per partition of topic, the next offset the backend
	// holds (0 or less while it holds none).
	ends func(t *testing.T, topic string, partitions int) []int64
	// holds checks that the backend holds log (read through cl) as this
	// store renders it: every record once, in order, or their fold by key.
	holds func(t *testing.T, cl *client.Client, topic string, log [][]api.FetchedRecord)
}

// storeGroup is the group every fixture's stores are opened for (the
// Redis offsets hash's name, the group S3 fence objects name).
const storeGroup = "contract"

// noLog is a ReadLogFunc for tests that never rebuild from the log.
func noLog(context.Context, api.TopicPartition, int64, int64) ([]sink.Record, error) {
	return nil, errors.New("the log is not read in this test")
}

// storeFixtures are the implementations the contract suites run against.
// withFolds adds the Redis store in hash mode, which folds records by key
// and so has no records to list.
func storeFixtures(withFolds bool) []struct {
	name string
	new  func(t *testing.T) storeFixture
} {
	out := []struct {
		name string
		new  func(t *testing.T) storeFixture
	}{
		{"memory", memoryFixture},
		{"redis", func(t *testing.T) storeFixture { return redisFixture(t, sink.ModeStream) }},
		{"s3", func(t *testing.T) storeFixture { return s3Fixture(t, sink.CompressionGzip) }},
		{"s3-uncompressed", func(t *testing.T) storeFixture { return s3Fixture(t, sink.CompressionNone) }},
	}
	if withFolds {
		out = append(out, struct {
			name string
			new  func(t *testing.T) storeFixture
		}{"redis-hash", func(t *testing.T) storeFixture { return redisFixture(t, sink.ModeHash) }})
	}
	return out
}

func memoryFixture(t *testing.T) storeFixture {
	b := newMemBackend()
	return storeFixture{
		open:    func(*testing.T, sink.ReadLogFunc) sink.Store { return memStore{b} },
		state:   func(*testing.T) string { return b.state() },
		records: func(_ *testing.T, tp api.TopicPartition) []sink.Record { return b.records(tp) },
		ends: func(_ *testing.T, topic string, partitions int) []int64 {
			out := make([]int64, partitions)
			for p := range partitions {
				out[p] = b.next(api.TopicPartition{Topic: topic, Partition: int32(p)})
			}
			return out
		},
		holds: func(t *testing.T, _ *client.Client, topic string, log [][]api.FetchedRecord) {
			t.Helper()
			for p, want := range log {
				got := renderRecords(b.records(api.TopicPartition{Topic: topic, Partition: int32(p)}))
				if w := renderFetched(t, want); !slices.Equal(got, w) {
					t.Fatalf("partition %d: the store holds %d records, the log %d:\n got %v\nwant %v", p, len(got), len(w), got, w)
				}
			}
		},
	}
}

// redisFixture is a RedisStore in mode under a key prefix of the test's own.
func redisFixture(t *testing.T, mode string) storeFixture {
	rdb := redisClient(t)
	prefix := uniquePrefix(t, rdb)
	open := func(t *testing.T, _ sink.ReadLogFunc) sink.Store {
		t.Helper()
		s, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: storeGroup, Mode: mode, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ref := open(t, nil).(*sink.RedisStore)
	fx := storeFixture{
		open:  open,
		state: func(t *testing.T) string { return redisState(t, rdb, prefix) },
		ends: func(t *testing.T, topic string, partitions int) []int64 {
			return storedNext(t, rdb, ref.OffsetsKey(), topic, partitions)
		},
	}
	switch mode {
	case sink.ModeStream:
		fx.records = func(t *testing.T, tp api.TopicPartition) []sink.Record {
			return streamRecords(t, rdb, ref.DataKey(tp.Topic), tp)
		}
		fx.holds = func(t *testing.T, _ *client.Client, topic string, log [][]api.FetchedRecord) {
			checkStream(t, rdb, ref.DataKey(topic), log)
		}
	case sink.ModeHash:
		fx.holds = func(t *testing.T, _ *client.Client, topic string, log [][]api.FetchedRecord) {
			checkHashFold(t, rdb, ref.DataKey(topic), log)
		}
	}
	return fx
}

// redisState is every key under prefix with its contents.
func redisState(t *testing.T, rdb *redis.Client, prefix string) string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		switch rdb.Type(ctx, k).Val() {
		case "stream":
			out[k] = fmt.Sprint(rdb.XRange(ctx, k, "-", "+").Val())
		case "hash":
			out[k] = fmt.Sprint(rdb.HGetAll(ctx, k).Val())
		default:
			out[k] = rdb.Get(ctx, k).Val()
		}
	}
	return fmt.Sprint(out)
}

// streamRecords reads tp's entries of a stream-mode data key.
func streamRecords(t *testing.T, rdb *redis.Client, key string, tp api.TopicPartition) []sink.Record {
	t.Helper()
	es, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []sink.Record
	for _, e := range es {
		if fmt.Sprint(e.Values["partition"]) != fmt.Sprint(tp.Partition) {
			continue
		}
		var r sink.Record
		if _, err := fmt.Sscan(fmt.Sprint(e.Values["offset"]), &r.Offset); err != nil {
			t.Fatalf("entry %s: offset %v", e.ID, e.Values["offset"])
		}
		if k, ok := e.Values["key"]; ok {
			r.Key = []byte(fmt.Sprint(k))
		}
		if v, ok := e.Values["value"]; ok {
			r.Value = []byte(fmt.Sprint(v))
		}
		if h, ok := e.Values["headers"]; ok {
			if err := json.Unmarshal([]byte(fmt.Sprint(h)), &r.Headers); err != nil {
				t.Fatalf("entry %s: headers %v: %v", e.ID, h, err)
			}
		}
		out = append(out, r)
	}
	return out
}

// s3Fixture is an S3 archive (objects of 10 records, compressed so, rolled
// by age after 300 ms) under a prefix of the test S3 bucket of the test's
// own.
func s3Fixture(t *testing.T, compression string) storeFixture {
	bkt, _ := testBucket(t, "")
	if err := sink.ProbeConditionalWrites(t.Context(), bkt, "archive"); err != nil {
		t.Fatal(err)
	}
	return storeFixture{
		open: func(t *testing.T, log sink.ReadLogFunc) sink.Store {
			t.Helper()
			st, err := sink.NewS3Store(bkt, sink.S3Options{
				Group: storeGroup, Prefix: "archive", MaxRecords: 10, MaxInterval: 300 * time.Millisecond,
				Compression: compression, ReadLog: log, Logger: testLogger(t, "s3"),
			})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		gathers: true,
		settle: func(ctx context.Context, s sink.Store, tp api.TopicPartition, fence int64) (int64, error) {
			return s.(*sink.S3Store).FlushAll(ctx, tp, fence)
		},
		state:   func(t *testing.T) string { return bucketState(t, bkt) },
		records: func(t *testing.T, tp api.TopicPartition) []sink.Record { return archiveRecords(t, bkt, tp) },
		ends: func(t *testing.T, topic string, partitions int) []int64 {
			return archivedEnds(t, bkt, topic, partitions)
		},
		holds: func(t *testing.T, cl *client.Client, topic string, log [][]api.FetchedRecord) {
			checkArchive(t, bkt, cl, topic, log)
		},
	}
}

// archiveRecords reads tp's archive objects in listing order; each
// object's lines must span its name's range, and each object must start
// where the one before ended.
func archiveRecords(t *testing.T, bkt *tier.S3, tp api.TopicPartition) []sink.Record {
	t.Helper()
	list, err := sink.ListArchive(t.Context(), bkt, "archive", tp)
	if err != nil {
		t.Fatal(err)
	}
	var out []sink.Record
	for i, o := range list {
		if i > 0 && o.First != list[i-1].Last+1 {
			t.Fatalf("%s follows %s: a gap or an overlap", o.Key, list[i-1].Key)
		}
		data, _, err := bkt.ReadObject(t.Context(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := sink.DecodeArchiveObject(data)
		if err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
		if len(lines) == 0 || lines[0].Offset != o.First || lines[len(lines)-1].Offset != o.Last {
			t.Fatalf("%s holds %d lines that do not span its name's range", o.Key, len(lines))
		}
		for _, l := range lines {
			out = append(out, fetchedToRecord(t, l))
		}
	}
	return out
}

// fetchedToRecord is the record a fetched (or archived) record renders.
func fetchedToRecord(t *testing.T, fr api.FetchedRecord) sink.Record {
	t.Helper()
	r := sink.Record{Offset: fr.Offset, Timestamp: fr.Timestamp, Headers: fr.Headers}
	var err error
	switch {
	case fr.Key != nil:
		r.Key = []byte(*fr.Key)
	case fr.KeyB64 != nil:
		if r.Key, err = base64.StdEncoding.DecodeString(*fr.KeyB64); err != nil {
			t.Fatalf("offset %d: key_b64: %v", fr.Offset, err)
		}
	}
	if v, ok := valueOf(fr); ok {
		r.Value = []byte(v)
	}
	return r
}

// renderRecords renders records as "offset:key:value:headers" (no
// timestamp: the Redis stream does not keep it), "<nil>" for a null key or
// value, "-" for no headers.
func renderRecords(recs []sink.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		key, value, headers := "<nil>", "<nil>", "-"
		if r.Key != nil {
			key = string(r.Key)
		}
		if r.Value != nil {
			value = string(r.Value)
		}
		if len(r.Headers) > 0 {
			b, _ := json.Marshal(r.Headers)
			headers = string(b)
		}
		out = append(out, fmt.Sprintf("%d:%s:%s:%s", r.Offset, key, value, headers))
	}
	return out
}

func renderFetched(t *testing.T, frs []api.FetchedRecord) []string {
	t.Helper()
	recs := make([]sink.Record, 0, len(frs))
	for _, fr := range frs {
		recs = append(recs, fetchedToRecord(t, fr))
	}
	return renderRecords(recs)
}

// kvRecords builds records from offset from on, one per key/value pair of
// kvs; the value "<nil>" is a null one.
func kvRecords(from int64, kvs ...string) []sink.Record {
	var out []sink.Record
	for i := 0; i+1 < len(kvs); i += 2 {
		r := sink.Record{Offset: from + int64(i/2), Key: []byte(kvs[i])}
		if kvs[i+1] != "<nil>" {
			r.Value = []byte(kvs[i+1])
		}
		out = append(out, r)
	}
	return out
}
