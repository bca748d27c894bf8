package kafka

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A subscription labelled v1 in the v0 layout (segmentio/kafka-go's) reads
// as its topics and user data; a well-formed v1 keeps its owned
// partitions; bytes that are no subscription at all stay an error.
func TestReadSubscription(t *testing.T) {
	v0 := kmsg.NewConsumerMemberMetadata()
	v0.Topics, v0.UserData = []string{"a", "b"}, []byte("ud")
	b := v0.AppendTo(nil)
	b[1] = 1 // labelled v1, laid out as v0
	var m kmsg.ConsumerMemberMetadata
	if err := readSubscription(&m, b); err != nil {
		t.Fatal(err)
	}
	if m.Version != 1 || !slices.Equal(m.Topics, v0.Topics) || string(m.UserData) != "ud" {
		t.Fatalf("%+v", m)
	}

	v1 := kmsg.NewConsumerMemberMetadata()
	v1.Version, v1.Topics = 1, []string{"a"}
	op := kmsg.NewConsumerMemberMetadataOwnedPartition()
	op.Topic, op.Partitions = "a", []int32{2}
	v1.OwnedPartitions = append(v1.OwnedPartitions, op)
	m = kmsg.ConsumerMemberMetadata{}
	if err := readSubscription(&m, v1.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if len(m.OwnedPartitions) != 1 || m.OwnedPartitions[0].Partitions[0] != 2 {
		t.Fatalf("%+v", m)
	}

	for _, bad := range [][]byte{nil, {0}, {0, 1, 0xff}, {0, 0, 0, 0, 0, 9}} {
		if err := readSubscription(&kmsg.ConsumerMemberMetadata{}, bad); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}
