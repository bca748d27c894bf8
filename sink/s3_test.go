package sink_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// The S3 archive sink against an in-process cluster and the real S3 server
// of `make test`.

// testBucket opens the test S3 server's bucket under a fresh prefix and
// deletes what the test left there. name fixes the prefix (for a child
// process that must see its parent's objects); "" picks a random one.
func testBucket(t testing.TB, name string) (*tier.S3, string) {
	t.Helper()
	cfg := testsvc.S3(t)
	if name == "" {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		name = fmt.Sprintf("sink-test/%s-%s", strings.ReplaceAll(t.Name(), "/", "."), hex.EncodeToString(rnd[:]))
	}
	bkt, err := tier.NewS3(t.Context(), tier.S3Options{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: name,
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: cfg.Region,
	})
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(childEnv) != "" {
		return bkt, name
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var keys []string
		_ = bkt.List(ctx, "", func(info tier.ObjectInfo) error { keys = append(keys, info.Key); return nil })
		for _, k := range keys {
			_ = bkt.Delete(ctx, k)
		}
	})
	return bkt, name
}

func newS3Store(t *testing.T, bkt *tier.S3, cl *client.Client, group string, maxRecords int) *sink.S3Store {
	t.Helper()
	return newS3StoreCompressed(t, bkt, cl, group, maxRecords, "")
}

// newS3StoreCompressed is newS3Store with the objects compressed so.
func newS3StoreCompressed(t *testing.T, bkt *tier.S3, cl *client.Client, group string, maxRecords int, compression string) *sink.S3Store {
	t.Helper()
	if err := sink.ProbeConditionalWrites(t.Context(), bkt, "archive"); err != nil {
		t.Fatal(err)
	}
	st, err := sink.NewS3Store(bkt, sink.S3Options{
		Group: group, Prefix: "archive", MaxRecords: maxRecords, MaxInterval: 300 * time.Millisecond,
		Compression: compression, ReadLog: sink.ClientLog(cl), Logger: testLogger(t, "s3-"+group),
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// bucketState is every key with its ETag: what a refused write must leave.
func bucketState(t *testing.T, bkt *tier.S3) string {
	t.Helper()
	var out []string
	if err := bkt.List(t.Context(), "", func(info tier.ObjectInfo) error {
		out = append(out, info.Key+"="+info.ETag)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}

// archivedEnds is, per partition, the offset after the last object.
func archivedEnds(t *testing.T, bkt *tier.S3, topic string, partitions int) []int64 {
	t.Helper()
	out := make([]int64, partitions)
	for p := range partitions {
		list, err := sink.ListArchive(t.Context(), bkt, "archive", api.TopicPartition{Topic: topic, Partition: int32(p)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			out[p] = list[len(list)-1].Last + 1
		}
	}
	return out
}

// checkArchive runs the deep verification and checks the archive holds
// every record of the log once, with the log's values.
func checkArchive(t *testing.T, bkt *tier.S3, cl *client.Client, topic string, log [][]api.FetchedRecord) {
	t.Helper()
	rep, err := sink.VerifyArchive(t.Context(), bkt, cl, "archive", topic, true)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("archive problems: %v", rep.Problems)
	}
	for p, recs := range log {
		list, err := sink.ListArchive(t.Context(), bkt, "archive", api.TopicPartition{Topic: topic, Partition: int32(p)})
		if err != nil {
			t.Fatal(err)
		}
		var got []api.FetchedRecord
		for _, o := range list {
			data, _, err := bkt.ReadObject(t.Context(), o.Key)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := sink.DecodeArchiveObject(data)
			if err != nil {
				t.Fatalf("%s: %v", o.Key, err)
			}
			got = append(got, lines...)
		}
		if len(got) != len(recs) {
			t.Fatalf("partition %d: archive holds %d records, the log %d", p, len(got), len(recs))
		}
		for i := range recs {
			gv, _ := valueOf(got[i])
			wv, _ := valueOf(recs[i])
			if got[i].Offset != recs[i].Offset || gv != wv || *got[i].Key != *recs[i].Key || got[i].Timestamp != recs[i].Timestamp {
				t.Fatalf("partition %d: line %d is %+v, the log's record %+v", p, i, got[i], recs[i])
			}
		}
	}
}

func tp0() api.TopicPartition { return api.TopicPartition{Topic: "orders", Partition: 0} }

// childEnv marks a child process of TestS3SinkCrashAfterReserve: it runs a
// sink that kills itself at a failpoint.
const childEnv = "SLUICE_TEST_S3_SINK_CHILD"

// TestS3SinkCrashAfterReserve: a sink process dies (failpoint
// after-reserve) after reserving a range in the fence object and before
// uploading its object. A new sink's claim rebuilds the object from the
// log, byte for byte what the dead one would have written, and carries on.
// The new sink writes uncompressed objects: the rebuilt range keeps the
// gzip it was reserved with (a late upload by the dead writer would land
// on the same key, not beside it), the objects after it are plain NDJSON,
// and the archive reads and verifies as one.
func TestS3SinkCrashAfterReserve(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		runCrashChild(t)
		return
	}
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	bkt, bucketPrefix := testBucket(t, "")
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, cl, "orders", 0, 200, 13, 7, 50)

	// The child: a sink that rolls every 40 records and dies at its second
	// reservation, after the first object was uploaded.
	if !sink.FailpointsEnabled {
		t.Fatal("this test binary has no sink failpoints: run it with -tags sluice_failpoints (make test does)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestS3SinkCrashAfterReserve$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+c.URL+" "+bucketPrefix, sink.FailpointEnv+"="+sink.StepAfterReserve+":2")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("the child did not die at its failpoint (%v):\n%s", err, out)
	}
	raw, _, err := bkt.ReadObject(t.Context(), "archive/orders/0/fence.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the crash: fence object %s; objects:\n%s", raw, bucketState(t, bkt))
	var fence struct{ Next, First int64 }
	if err := json.Unmarshal(raw, &fence); err != nil || fence.First <= 0 || fence.Next <= fence.First {
		t.Fatalf("fence object %s (%v): want a second range reserved", raw, err)
	}
	missing := sink.ObjectKey("archive", tp0(), fence.First, fence.Next-1, sink.CompressionGzip)
	if _, err := bkt.Stat(t.Context(), missing); !tier.IsNotExist(err) {
		t.Fatalf("%s: %v; want it missing after the crash", missing, err)
	}

	// A new sink claims, rebuilds the range and archives the rest.
	heir := newS3StoreCompressed(t, bkt, cl, "archiver", 40, sink.CompressionNone)
	s := startSink(t, newClient(t, c.URL, nil), heir, "heir", "archiver", []string{"orders"}, 0)
	waitFor(t, "the archive to reach the log end", 60*time.Second, func() bool {
		return archivedEnds(t, bkt, "orders", 1)[0] == 200
	})
	s.stop(t)
	checkArchive(t, bkt, cl, "orders", logOf(t, cl, "orders", 1))

	// The rebuilt object holds the bytes any writer of the range uploads.
	got, _, err := bkt.ReadObject(t.Context(), missing)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sink.ClientLog(cl)(t.Context(), tp0(), fence.First, fence.Next-1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sink.EncodeArchiveObject(recs, sink.CompressionGzip)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("rebuilt %s differs from the range encoded again (%d vs %d bytes)", missing, len(got), len(want))
	}
	list, err := sink.ListArchive(t.Context(), bkt, "archive", tp0())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		want := sink.CompressionGzip
		if o.First >= fence.Next {
			want = sink.CompressionNone
		}
		if o.Compression != want || o.Key != sink.ObjectKey("archive", tp0(), o.First, o.Last, want) {
			t.Errorf("%s (offsets %d-%d) is compressed %s; want %s, the range's reservation's", o.Key, o.First, o.Last, o.Compression, want)
		}
	}
}

// runCrashChild is the child's side: a sink with the parent's cluster and
// bucket prefix, run until the failpoint kills the process.
func runCrashChild(t *testing.T) {
	url, prefix, _ := strings.Cut(os.Getenv(childEnv), " ")
	cl := newClient(t, url, nil)
	bkt, _ := testBucket(t, prefix)
	st := newS3Store(t, bkt, cl, "archiver", 40)
	s, err := sink.New(cl, sink.Options{Group: "archiver", Topics: []string{"orders"}, Store: st, SessionTimeout: 2 * time.Second, MaxRecords: 40, MaxWait: 200 * time.Millisecond, LagInterval: -1, Logger: testLogger(t, "child")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = s.Run(ctx)
	t.Fatalf("the child's sink ran past its failpoint")
}

// TestArchiveVerifyFindsGapAndOverlap: a complete archive verifies clean;
// one object removed is a gap, one extra object over a stored range an
// overlap.
func TestArchiveVerifyFindsGapAndOverlap(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	bkt, _ := testBucket(t, "")
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, cl, "orders", 0, 50, 5, 0, 50)
	ctx := t.Context()
	recs, err := sink.ClientLog(cl)(ctx, tp0(), 0, 49)
	if err != nil {
		t.Fatal(err)
	}
	st := newS3Store(t, bkt, cl, "g", 10)
	if _, err := st.Claim(ctx, tp0(), 1); err != nil {
		t.Fatal(err)
	}
	if next, err := st.Write(ctx, tp0(), 1, recs); err != nil || next != 50 {
		t.Fatalf("write: %d, %v; want five objects of 10", next, err)
	}
	verify := func() []sink.ArchiveProblem {
		rep, err := sink.VerifyArchive(ctx, bkt, cl, "archive", "orders", true)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Problems
	}
	if p := verify(); len(p) != 0 {
		t.Fatalf("a complete archive: %v", p)
	}

	// Plant an overlap: offsets 25-34 again, over 20-29 and 30-39.
	data, err := sink.EncodeArchiveObject(recs[25:35], sink.CompressionGzip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bkt.PutIf(ctx, sink.ObjectKey("archive", tp0(), 25, 34, sink.CompressionGzip), data, ""); err != nil {
		t.Fatal(err)
	}
	// And a gap: 40-49 removed.
	if err := bkt.Delete(ctx, sink.ObjectKey("archive", tp0(), 40, 49, sink.CompressionGzip)); err != nil {
		t.Fatal(err)
	}
	// And a gap in the middle: 10-19 removed.
	if err := bkt.Delete(ctx, sink.ObjectKey("archive", tp0(), 10, 19, sink.CompressionGzip)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range verify() {
		got = append(got, fmt.Sprintf("%s %d-%d", p.Kind, p.First, p.Last))
	}
	want := []string{"gap 10-19", "overlap 25-29", "overlap 30-34"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
}
