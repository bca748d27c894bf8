package faulttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// The S3 archive sink's process tests share this set-up: a test's own
// corner of the real S3 server's bucket, the flags that point a `sluice
// sink s3` process at it, and the checks of the archive against the log.

// archivePrefix is --prefix of every S3 sink process of these tests.
const archivePrefix = "archive"

// sinkS3 is a test's own corner of the shared bucket: a fresh --s3-prefix,
// emptied when the test ends.
type sinkS3 struct {
	cfg      testsvc.S3Config
	s3Prefix string
	bkt      *tier.S3
}

func newSinkS3(t *testing.T, ctx context.Context) *sinkS3 {
	t.Helper()
	cfg := testsvc.S3(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	s := &sinkS3{cfg: cfg, s3Prefix: "sink-proc-test/" + t.Name() + "-" + hex.EncodeToString(rnd[:])}
	bkt, err := tier.NewS3(ctx, tier.S3Options{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: s.s3Prefix,
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: cfg.Region})
	if err != nil {
		t.Fatalf("S3 at %s: %v", cfg.Endpoint, err)
	}
	s.bkt = bkt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var keys []string
		_ = bkt.List(ctx, "", func(info tier.ObjectInfo) error { keys = append(keys, info.Key); return nil })
		for _, k := range keys {
			_ = bkt.Delete(ctx, k)
		}
	})
	return s
}

// args are the S3 flags of a sink process that reaches the server at
// endpoint (the server itself, or a proxy in front of it).
func (s *sinkS3) args(endpoint string) []string {
	return []string{"--s3-endpoint", endpoint, "--s3-bucket", s.cfg.Bucket, "--s3-prefix", s.s3Prefix,
		"--s3-access-key", s.cfg.AccessKey, "--prefix", archivePrefix}
}

// env is the environment entry that carries the secret key.
func (s *sinkS3) env() string { return "SLUICE_S3_SECRET_KEY=" + s.cfg.SecretKey }

// s3Fence is a partition's fence object.
type s3Fence struct {
	Group string `json:"group"`
	Fence int64  `json:"fence"`
	Next  int64  `json:"next"`
	First int64  `json:"first"`
}

// fence reads a partition's fence object; ok is false when there is none.
func (s *sinkS3) fence(t *testing.T, ctx context.Context, topic string, p int) (f s3Fence, ok bool) {
	t.Helper()
	data, _, err := s.bkt.ReadObject(ctx, fmt.Sprintf("%s/%s/%d/fence.json", archivePrefix, topic, p))
	if tier.IsNotExist(err) {
		return s3Fence{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("fence object of %s/%d: %q: %v", topic, p, data, err)
	}
	return f, true
}

// maxFence is the highest fence of the topic's fence objects (0: none).
func (s *sinkS3) maxFence(t *testing.T, ctx context.Context, topic string, partitions int) int64 {
	t.Helper()
	var top int64
	for p := range partitions {
		if f, ok := s.fence(t, ctx, topic, p); ok {
			top = max(top, f.Fence)
		}
	}
	return top
}

// archivedEnds is, per partition, the offset after the last object (0
// when there is none).
func (s *sinkS3) archivedEnds(t *testing.T, ctx context.Context, topic string, partitions int) []int64 {
	t.Helper()
	out := make([]int64, partitions)
	for p := range partitions {
		list, err := sink.ListArchive(ctx, s.bkt, archivePrefix, api.TopicPartition{Topic: topic, Partition: int32(p)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			out[p] = list[len(list)-1].Last + 1
		}
	}
	return out
}

// waitCaughtUp polls until every partition is archived to its log end.
func (s *sinkS3) waitCaughtUp(t *testing.T, ctx context.Context, topic string, ends []int64) {
	t.Helper()
	for {
		got := s.archivedEnds(t, ctx, topic, len(ends))
		done := true
		for p := range ends {
			done = done && got[p] == ends[p]
		}
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: archived to %v, log ends %v", topic, got, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verify is `sluice archive verify` in Go: the problems it finds (gaps,
// overlaps, objects past the high watermark or disagreeing with the log).
func (s *sinkS3) verify(t *testing.T, ctx context.Context, cl *client.Client, topic string, deep bool) []sink.ArchiveProblem {
	t.Helper()
	rep, err := sink.VerifyArchive(ctx, s.bkt, cl, archivePrefix, topic, deep)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Problems
}

// checkArchive asserts that the archive holds the log: `archive verify
// --deep` finds nothing, and the objects' lines, read in listing order,
// are every record of each partition once, in offset order, with the
// log's key, value and timestamp.
func (s *sinkS3) checkArchive(t *testing.T, ctx context.Context, cl *client.Client, topic string, log [][]logRecord) {
	t.Helper()
	if problems := s.verify(t, ctx, cl, topic, true); len(problems) > 0 {
		t.Fatalf("archive verify: %v", problems)
	}
	for p := range log {
		list, err := sink.ListArchive(ctx, s.bkt, archivePrefix, api.TopicPartition{Topic: topic, Partition: int32(p)})
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		for _, o := range list {
			data, _, err := s.bkt.ReadObject(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := sink.DecodeArchiveObject(data)
			if err != nil {
				t.Fatalf("%s: %v", o.Key, err)
			}
			for _, l := range lines {
				if next >= len(log[p]) {
					t.Fatalf("%s: line at offset %d is past the log's end %d", o.Key, l.Offset, len(log[p]))
				}
				want := log[p][next]
				if l.Offset != want.offset {
					t.Fatalf("%s/%d: %s holds offset %d where the log has %d (a record lost, doubled or out of order)", topic, p, o.Key, l.Offset, want.offset)
				}
				if k, v := fetchedKey(t, l), fetchedValue(t, l); !bytes.Equal(k, want.key) || !bytes.Equal(v, want.value) {
					t.Fatalf("%s/%d offset %d: archived key %q value %q, log key %q value %q", topic, p, l.Offset, k, v, want.key, want.value)
				}
				next++
			}
		}
		if next != len(log[p]) {
			t.Errorf("%s/%d: the archive holds %d records, the log %d", topic, p, next, len(log[p]))
		}
	}
}

// bucketState is every key under the test's prefix with its ETag: what a
// refused write must leave as it was.
func (s *sinkS3) bucketState(t *testing.T, ctx context.Context) string {
	t.Helper()
	var out []string
	if err := s.bkt.List(ctx, "", func(info tier.ObjectInfo) error {
		out = append(out, info.Key+"="+info.ETag)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}
