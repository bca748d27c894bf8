package brokerapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

func TestReplicaFetchRequestRoundTrip(t *testing.T) {
	r := ReplicaFetchRequest{ReplicaID: 2, SessionID: 7, SessionEpoch: 3, MaxWait: 500 * time.Millisecond, MinBytes: 1, MaxBytes: 1 << 20, PartitionMaxBytes: 1 << 16,
		Changed: []ReplicaFetchPartition{{TopicPartition{"events", 0}, 42, 5}, {TopicPartition{"t", 9}, 0, 1}},
		Removed: []TopicPartition{{"gone", 3}}}
	got, err := DecodeReplicaFetchRequest(EncodeReplicaFetchRequest(r))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
}

// TestReplicaFetchRequestBounds: every malformed or oversized request is
// INVALID_REQUEST, before anything is allocated for what it claims.
func TestReplicaFetchRequestBounds(t *testing.T) {
	good := EncodeReplicaFetchRequest(ReplicaFetchRequest{ReplicaID: 2, Changed: []ReplicaFetchPartition{{TopicPartition{"a", 0}, 1, 1}}})
	huge := EncodeReplicaFetchRequest(ReplicaFetchRequest{ReplicaID: 2})
	// The changed count claims a million partitions the body does not hold.
	binary.BigEndian.PutUint32(huge[29:], 1_000_000)
	many := make([]ReplicaFetchPartition, MaxReplicaFetchPartitions+1)
	for i := range many {
		many[i] = ReplicaFetchPartition{TopicPartition{"a", int32(i)}, 0, 0}
	}
	cases := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"cut short", good[:len(good)-3]},
		{"trailing bytes", append(bytes.Clone(good), 0)},
		{"wrong version", append([]byte{9}, good[1:]...)},
		{"count past the body", huge},
		{"too many partitions", EncodeReplicaFetchRequest(ReplicaFetchRequest{ReplicaID: 2, Changed: many})},
		{"empty topic", EncodeReplicaFetchRequest(ReplicaFetchRequest{ReplicaID: 2, Changed: []ReplicaFetchPartition{{TopicPartition{"", 0}, 1, 1}}})},
		{"negative offset", EncodeReplicaFetchRequest(ReplicaFetchRequest{ReplicaID: 2, Changed: []ReplicaFetchPartition{{TopicPartition{"a", 0}, -1, 1}}})},
		{"no replica", EncodeReplicaFetchRequest(ReplicaFetchRequest{})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeReplicaFetchRequest(c.body)
			if !errors.Is(err, &api.Error{Code: api.CodeInvalidRequest}) {
				t.Fatalf("decode: %v, want INVALID_REQUEST", err)
			}
		})
	}
}

func TestReplicaFetchAnswerRoundTrip(t *testing.T) {
	parts := []ReplicaFetchedPartition{
		{TopicPartition: TopicPartition{"a", 0}, HighWatermark: 5, LogStart: 0, LogEnd: 9, Size: 3},
		{TopicPartition: TopicPartition{"a", 1}, Err: &api.Error{Code: api.CodeNotLeader, Message: "moved"}, HighWatermark: -1},
		{TopicPartition: TopicPartition{"b", 2}, HighWatermark: 1, LogEnd: 1, Size: 2},
	}
	body := AppendReplicaFetchHeader(nil, 11, parts)
	body = append(body, "xyzpq"...)
	var buf []byte
	a, err := DecodeReplicaFetchAnswer(bytes.NewReader(body), int64(len(body)), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if a.SessionID != 11 || len(a.Partitions) != 3 {
		t.Fatalf("answer %+v", a)
	}
	if string(a.Partitions[0].Data) != "xyz" || len(a.Partitions[1].Data) != 0 || string(a.Partitions[2].Data) != "pq" {
		t.Fatalf("data %q %q %q", a.Partitions[0].Data, a.Partitions[1].Data, a.Partitions[2].Data)
	}
	if e := a.Partitions[1].Err; e == nil || e.Code != api.CodeNotLeader || e.Message != "moved" {
		t.Fatalf("error %v", e)
	}
	// A body whose sizes do not add up is refused.
	if _, err := DecodeReplicaFetchAnswer(bytes.NewReader(body), int64(len(body)+1), &buf); err == nil {
		t.Fatal("an answer with a byte missing decoded")
	}
	if _, err := DecodeReplicaFetchAnswer(bytes.NewReader(body[:len(body)-1]), int64(len(body)-1), &buf); err == nil {
		t.Fatal("an answer shorter than its sizes decoded")
	}
}
