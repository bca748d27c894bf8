package sink_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/sink"
)

// Sinks against an in-process cluster and the real Redis of `make test`.

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startCluster(t *testing.T) *embedtest.Cluster {
	t.Helper()
	return embedtest.Start(t, embedtest.Options{Brokers: 1})
}

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", testsvc.Redis(t), err)
	}
	return rdb
}

// uniquePrefix is a key prefix no other test run uses.
func uniquePrefix(t *testing.T, rdb *redis.Client) string {
	n, err := rdb.Incr(context.Background(), "test:unique").Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("test:%s:%d:", t.Name(), n)
}

func newClient(t *testing.T, url string, hc *http.Client) *client.Client {
	t.Helper()
	opts := []client.Option{client.WithRetry(client.RetryPolicy{MaxAttempts: 3, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})}
	if hc != nil {
		opts = append(opts, client.WithHTTPClient(hc))
	}
	cl, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func testLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("sink", name)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runningSink is a sink started in a goroutine; stop cancels it and waits.
type runningSink struct {
	*sink.Sink
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startSink(t *testing.T, cl *client.Client, store sink.Store, name, group string, topics []string, session time.Duration) *runningSink {
	t.Helper()
	s, err := sink.New(cl, sink.Options{
		Group: group, Topics: topics, Store: store, SessionTimeout: session,
		MaxRecords: 50, MaxWait: 200 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, LagInterval: -1,
		Logger: testLogger(t, name),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningSink{Sink: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *runningSink) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("sink: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("sink did not stop within 30 s")
		}
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testwait.For(t, d, what, cond)
}

// produceKeyed produces n records over keys k0..k(keys-1), every
// tombstoneEvery-th a null value, in requests of batch records.
func produceKeyed(t *testing.T, cl *client.Client, topic string, from, n, keys, tombstoneEvery, batch int) {
	t.Helper()
	for i := from; i < from+n; i += batch {
		var recs []client.Record
		for j := i; j < min(i+batch, from+n); j++ {
			r := client.Record{Key: []byte("k" + strconv.Itoa(j%keys))}
			if tombstoneEvery == 0 || j%tombstoneEvery != tombstoneEvery-1 {
				r.Value = []byte("v" + strconv.Itoa(j))
			}
			recs = append(recs, r)
		}
		if _, err := cl.Produce(testCtx(t), topic, recs, client.ProduceOptions{}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// logOf reads every partition of topic from offset 0 to its high watermark.
func logOf(t *testing.T, cl *client.Client, topic string, partitions int) [][]api.FetchedRecord {
	t.Helper()
	out := make([][]api.FetchedRecord, partitions)
	for p := range partitions {
		next := int64(0)
		for {
			fr, err := cl.Fetch(testCtx(t), topic, int32(p), client.At(next), client.FetchOptions{MaxRecords: 10000})
			if err != nil {
				t.Fatal(err)
			}
			out[p] = append(out[p], fr.Records...)
			if len(fr.Records) > 0 {
				next = fr.Records[len(fr.Records)-1].Offset + 1
			}
			if next >= fr.HighWatermark {
				break
			}
		}
	}
	return out
}

func valueOf(r api.FetchedRecord) (string, bool) {
	switch {
	case r.Value != nil:
		return string(r.Value), true
	case r.ValueB64 != nil:
		b, _ := base64.StdEncoding.DecodeString(*r.ValueB64)
		return string(b), true
	}
	return "", false
}

// storedNext is the store's next offset per partition, -2 when absent.
func storedNext(t *testing.T, rdb *redis.Client, offsetsKey string, topic string, partitions int) []int64 {
	out := make([]int64, partitions)
	for p := range partitions {
		out[p] = -2
		v, err := rdb.HGet(context.Background(), offsetsKey, fmt.Sprintf("%s/%d", topic, p)).Result()
		if errors.Is(err, redis.Nil) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		var next, fence int64
		if _, err := fmt.Sscanf(v, `{"next":%d,"fence":%d}`, &next, &fence); err != nil {
			t.Fatalf("offsets entry %q: %v", v, err)
		}
		out[p] = next
	}
	return out
}

// checkStream says whether the stream holds every record of the log once,
// in partition order, with the log's keys and values.
func checkStream(t *testing.T, rdb *redis.Client, key string, log [][]api.FetchedRecord) {
	t.Helper()
	es, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]redis.XMessage, len(log))
	for _, e := range es {
		p, _ := strconv.Atoi(fmt.Sprint(e.Values["partition"]))
		got[p] = append(got[p], e)
	}
	for p, recs := range log {
		if len(got[p]) != len(recs) {
			t.Errorf("partition %d: stream holds %d entries, the log %d records", p, len(got[p]), len(recs))
		}
		for i := range min(len(got[p]), len(recs)) {
			e, r := got[p][i], recs[i]
			if e.Values["offset"] != strconv.FormatInt(r.Offset, 10) {
				t.Fatalf("partition %d: entry %d has offset %v, want %d (duplicate or out of order)", p, i, e.Values["offset"], r.Offset)
			}
			v, ok := valueOf(r)
			if gv, has := e.Values["value"]; has != ok || (ok && gv != v) || e.Values["key"] != *r.Key {
				t.Fatalf("partition %d offset %d: entry %v, record key %s value %q", p, r.Offset, e.Values, *r.Key, v)
			}
		}
	}
}

// checkHashFold says whether the hash equals the log folded by key.
func checkHashFold(t *testing.T, rdb *redis.Client, key string, log [][]api.FetchedRecord) {
	t.Helper()
	want := map[string]string{}
	for _, recs := range log {
		for _, r := range recs {
			if v, ok := valueOf(r); ok {
				want[*r.Key] = v
			} else {
				delete(want, *r.Key)
			}
		}
	}
	got, err := rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hash is not the fold of the log:\n got %v\nwant %v", got, want)
	}
}

// A sink started before its topic exists waits for it, then writes what is
// produced to it.
func TestSinkWaitsForItsTopic(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	rdb := redisClient(t)
	prefix := uniquePrefix(t, rdb)
	st, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: "g-late", Mode: sink.ModeStream, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, cl, st, "late", "g-late", []string{"later"}, 0)
	time.Sleep(300 * time.Millisecond) // a join or two refused with UNKNOWN_TOPIC
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "later", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, cl, "later", 0, 100, 10, 0, 50)
	waitFor(t, "the sink to write the 100 records", 30*time.Second, func() bool { return s.Stats().Written == 100 })
	checkStream(t, rdb, prefix+"later", logOf(t, cl, "later", 2))
}
