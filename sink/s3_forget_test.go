package sink_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// failingObjects fails the puts of archive objects (not fence objects)
// while fail is set.
type failingObjects struct {
	sink.Objects
	fail atomic.Bool
}

func (f *failingObjects) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if f.fail.Load() && strings.HasSuffix(key, ".ndjson.gz") {
		return "", tier.ErrUnavailable
	}
	return f.Objects.PutIf(ctx, key, data, ifMatch)
}

// A partition taken from the sink while the object of a range it reserved
// is not stored yet: Finish, at shutdown, still stores it.
func TestS3FinishStoresTheRangesOfForgottenPartitions(t *testing.T) {
	bkt, _ := testBucket(t, "")
	objs := &failingObjects{Objects: bkt}
	noLog := func(context.Context, api.TopicPartition, int64, int64) ([]sink.Record, error) {
		return nil, errors.New("the log is not read in this test")
	}
	st, err := sink.NewS3Store(objs, sink.S3Options{
		Group: "forget", Prefix: "archive", MaxRecords: 3, MaxInterval: time.Minute,
		ReadLog: noLog, Logger: testLogger(t, "s3-forget"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tp := api.TopicPartition{Topic: "orders", Partition: 0}
	if next, err := st.Claim(ctx, tp, 1); err != nil || next != -1 { // -1: nothing stored yet
		t.Fatalf("claim: %d %v", next, err)
	}
	objs.fail.Store(true)
	// Three records fill the buffer: the range 0-2 is reserved in the fence
	// object, and its object's upload fails.
	if _, err := st.Write(ctx, tp, 1, []sink.Record{{Offset: 0, Value: []byte(`1`)}, {Offset: 1, Value: []byte(`2`)}, {Offset: 2, Value: []byte(`3`)}}); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("write with object uploads failing: %v", err)
	}
	if ends := archivedEnds(t, bkt, "orders", 1); ends[0] != 0 {
		t.Fatalf("an object was stored: archive ends at %d", ends[0])
	}
	st.Forget(tp)
	objs.fail.Store(false)
	if err := st.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if ends := archivedEnds(t, bkt, "orders", 1); ends[0] != 3 {
		t.Fatalf("after Finish the archive ends at %d, want 3 (the reserved range 0-2 stored)", ends[0])
	}
}

// lostAnswerObjects makes the next fence-object put fail without an
// answer: with landed set the put happened, else it never reached the store.
type lostAnswerObjects struct {
	sink.Objects
	armed, landed atomic.Bool
}

func (f *lostAnswerObjects) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if strings.HasSuffix(key, ".ndjson.gz") || !f.armed.CompareAndSwap(true, false) {
		return f.Objects.PutIf(ctx, key, data, ifMatch)
	}
	if f.landed.Load() {
		if _, err := f.Objects.PutIf(ctx, key, data, ifMatch); err != nil {
			return "", err
		}
	}
	return "", tier.ErrUnavailable
}

// A reservation whose put failed without an answer, and then the sink
// stops: Finish stores the range's object if the put landed, and nothing
// if it did not.
func TestS3FinishResolvesAnUncertainReservation(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(map[bool]string{true: "landed", false: "lost"}[landed], func(t *testing.T) {
			bkt, _ := testBucket(t, "")
			objs := &lostAnswerObjects{Objects: bkt}
			objs.landed.Store(landed)
			noLog := func(context.Context, api.TopicPartition, int64, int64) ([]sink.Record, error) {
				return nil, errors.New("the log is not read in this test")
			}
			st, err := sink.NewS3Store(objs, sink.S3Options{
				Group: "uncertain", Prefix: "archive", MaxRecords: 3, MaxInterval: time.Minute,
				ReadLog: noLog, Logger: testLogger(t, "s3-uncertain"),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			tp := api.TopicPartition{Topic: "orders", Partition: 0}
			if _, err := st.Claim(ctx, tp, 1); err != nil {
				t.Fatal(err)
			}
			objs.armed.Store(true)
			if _, err := st.Write(ctx, tp, 1, []sink.Record{{Offset: 0, Value: []byte(`1`)}, {Offset: 1, Value: []byte(`2`)}, {Offset: 2, Value: []byte(`3`)}}); !errors.Is(err, tier.ErrUnavailable) {
				t.Fatalf("write with the reservation's answer lost: %v", err)
			}
			if err := st.Finish(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int64{true: 3, false: 0}[landed]
			if ends := archivedEnds(t, bkt, "orders", 1); ends[0] != want {
				t.Fatalf("after Finish the archive ends at %d, want %d", ends[0], want)
			}
		})
	}
}
