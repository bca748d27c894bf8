package sink_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/sink"
)

// TestSinksResumeFromTieredStorage: sinks whose stores stand at an offset
// the brokers no longer hold locally (tiered to the real S3 server and
// trimmed by local retention) resume from there: the Redis store at next
// 100, and the S3 archive with offsets 100-199 reserved but their object
// missing (a crash between the reservation and the upload), which the
// claim rebuilds, byte for byte, from records read from tiered storage.
// Both then reach the log end; the stream and the archive hold the log.
func TestSinksResumeFromTieredStorage(t *testing.T) {
	tierBkt, _ := testBucket(t, "")
	c := embedtest.Start(t, embedtest.Options{Brokers: 1, Bucket: tierBkt, TierInterval: 50 * time.Millisecond})
	cl := newClient(t, c.URL, nil)
	ctx := testCtx(t)
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: 1, Configs: map[string]string{
		"remote.storage.enable": "true", "segment.bytes": "8192", "local.retention.bytes": "16384",
	}}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, cl, "orders", 0, 200, 13, 0, 50)
	first, err := sink.ClientLog(cl)(ctx, tp0(), 0, 199)
	if err != nil {
		t.Fatal(err)
	}

	// The stores as sinks left them while offset 100 was still local.
	rdb := redisClient(t)
	rstore, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: "tiered", Prefix: uniquePrefix(t, rdb)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rstore.Claim(ctx, tp0(), 1); err != nil {
		t.Fatal(err)
	}
	if next, err := rstore.Write(ctx, tp0(), 1, first[:100]); err != nil || next != 100 {
		t.Fatalf("redis write 0-99: %d, %v", next, err)
	}
	archBkt, _ := testBucket(t, "")
	s3store := newS3Store(t, archBkt, cl, "tiered", 100)
	if _, err := s3store.Claim(ctx, tp0(), 1); err != nil {
		t.Fatal(err)
	}
	if next, err := s3store.Write(ctx, tp0(), 1, first[:100]); err != nil || next != 100 {
		t.Fatalf("archive write 0-99: %d, %v", next, err)
	}
	// Reserve 100-199 in the fence object, as a sink that died before its
	// upload leaves it.
	fenceKey := s3store.FenceKey(tp0())
	_, etag, err := archBkt.ReadObject(ctx, fenceKey)
	if err != nil {
		t.Fatal(err)
	}
	reserved, _ := json.Marshal(map[string]any{"group": "tiered", "fence": 1, "next": 200, "first": 100})
	if _, err := archBkt.PutIf(ctx, fenceKey, reserved, etag); err != nil {
		t.Fatal(err)
	}

	// More records; then wait until offset 200 is only in the object store.
	produceKeyed(t, cl, "orders", 200, 2800, 13, 0, 100)
	var part api.PartitionInfo
	waitFor(t, "offsets below 200 to leave the local log", 30*time.Second, func() bool {
		top, err := cl.GetTopic(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		part = top.Partitions[0]
		return part.LocalStartOffset > 200
	})
	t.Logf("local start %d, remote end %d, high watermark %d", part.LocalStartOffset, part.RemoteEndOffset, part.HighWatermark)

	// Both sinks resume; their first reads are served from tiered storage.
	rs := startSink(t, newClient(t, c.URL, nil), rstore, "redis", "tiered", []string{"orders"}, 0)
	ss := startSink(t, newClient(t, c.URL, nil), newS3Store(t, archBkt, cl, "tiered", 300), "s3", "tiered-s3", []string{"orders"}, 0)
	log := logOf(t, cl, "orders", 1)
	end := int64(len(log[0]))
	waitFor(t, "both stores to reach the log end", 60*time.Second, func() bool {
		return storedNext(t, rdb, rstore.OffsetsKey(), "orders", 1)[0] == end && archivedEnds(t, archBkt, "orders", 1)[0] == end
	})
	rs.stop(t)
	ss.stop(t)
	checkStream(t, rdb, rstore.DataKey("orders"), log)
	checkArchive(t, archBkt, cl, "orders", log)

	// The rebuilt range holds the bytes its first writer would have stored.
	got, _, err := archBkt.ReadObject(ctx, sink.ObjectKey("archive", tp0(), 100, 199, sink.CompressionGzip))
	if err != nil {
		t.Fatal(err)
	}
	want, err := sink.EncodeArchiveObject(first[100:200], sink.CompressionGzip)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the rebuilt object of 100-199 differs from the range as first read (%d vs %d bytes)", len(got), len(want))
	}
}
