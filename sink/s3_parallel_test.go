package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

// stallingObjects holds the puts of partition 0's archive objects until
// release is closed (or the put's context ends).
type stallingObjects struct {
	sink.Objects
	stalled chan struct{} // closed at the first held put
	release chan struct{}
}

func (s *stallingObjects) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if strings.Contains(key, "/0/") && strings.HasSuffix(key, ".ndjson.gz") {
		select {
		case <-s.stalled:
		default:
			close(s.stalled)
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return s.Objects.PutIf(ctx, key, data, ifMatch)
}

// Partitions are written side by side: while one partition's upload hangs,
// another's records are rolled and stored, and the hung one completes
// once its store answers.
func TestS3PartitionsUploadSideBySide(t *testing.T) {
	bkt, _ := testBucket(t, "")
	objs := &stallingObjects{Objects: bkt, stalled: make(chan struct{}), release: make(chan struct{})}
	noLog := func(context.Context, api.TopicPartition, int64, int64) ([]sink.Record, error) {
		return nil, errors.New("the log is not read in this test")
	}
	st, err := sink.NewS3Store(objs, sink.S3Options{
		Group: "parallel", Prefix: "archive", MaxRecords: 2, MaxInterval: time.Minute,
		ReadLog: noLog, Logger: testLogger(t, "s3-parallel"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tp0 := api.TopicPartition{Topic: "orders", Partition: 0}
	tp1 := api.TopicPartition{Topic: "orders", Partition: 1}
	for _, tp := range []api.TopicPartition{tp0, tp1} {
		if _, err := st.Claim(ctx, tp, 1); err != nil {
			t.Fatal(err)
		}
	}
	recs := []sink.Record{{Offset: 0, Value: []byte(`1`)}, {Offset: 1, Value: []byte(`2`)}}
	hung := make(chan error, 1)
	go func() {
		next, err := st.Write(ctx, tp0, 1, recs)
		if err == nil && next != 2 {
			err = errors.New("partition 0 not durable to 2")
		}
		hung <- err
	}()
	select {
	case <-objs.stalled:
	case <-ctx.Done():
		t.Fatal("partition 0's upload never started")
	}
	if next, err := st.Write(ctx, tp1, 1, recs); err != nil || next != 2 {
		t.Fatalf("partition 1 while partition 0's upload hangs: next %d, %v", next, err)
	}
	if ends := archivedEnds(t, bkt, "orders", 2); ends[0] != 0 || ends[1] != 2 {
		t.Fatalf("archive ends %v while partition 0 hangs, want [0 2]", ends)
	}
	close(objs.release)
	if err := <-hung; err != nil {
		t.Fatalf("partition 0 after its store answered: %v", err)
	}
	if ends := archivedEnds(t, bkt, "orders", 2); ends[0] != 2 || ends[1] != 2 {
		t.Fatalf("archive ends %v, want [2 2]", ends)
	}
}
