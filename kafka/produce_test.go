package kafka

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// fakeBatch is n bytes shaped like one record batch: its length field
// covers the rest (the fake backend checks nothing else).
func fakeBatch(n int) []byte {
	b := bytes.Repeat([]byte{7}, n)
	binary.BigEndian.PutUint64(b, 0)
	binary.BigEndian.PutUint32(b[8:], uint32(n-batchOverhead))
	b[magicOffset] = 2
	return b
}

func produceReq(version, acks int16, topic string, partition int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, acks, 5000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = topic
	if version >= 13 {
		t.TopicID = topicID(testMetadata().Topics[topic].Record)
	}
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition, p.Records = partition, records
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

func TestProduce(t *testing.T) {
	be := &fakeBackend{}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	batch := fakeBatch(61)
	for _, v := range []int16{3, 7, 9, 13} {
		resp := c.roundTrip(produceReq(v, -1, "orders", 0, batch)).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("v%d: %+v", v, resp)
		}
		rt := resp.Topics[0]
		p := rt.Partitions[0]
		if p.ErrorCode != 0 || p.Partition != 0 {
			t.Fatalf("v%d: %v %v", v, kerr.ErrorForCode(p.ErrorCode), p.ErrorMessage)
		}
		if v >= 13 && rt.TopicID != topicID(testMetadata().Topics["orders"].Record) {
			t.Fatalf("v13 answer without the topic ID")
		}
		if v < 13 && rt.Topic != "orders" {
			t.Fatalf("v%d answer for topic %q", v, rt.Topic)
		}
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.produced) != 4 {
		t.Fatalf("%d produces", len(be.produced))
	}
	for i, p := range be.produced {
		if p.topic != "orders" || p.acks != -1 || !bytes.Equal(p.batch, batch) {
			t.Fatalf("produce %d: %s acks %d, batch equal %v", i, p.topic, p.acks, bytes.Equal(p.batch, batch))
		}
	}
}

// Requests that never reach the log are refused per partition with
// Kafka's codes.
func TestProduceRefusals(t *testing.T) {
	be := &fakeBackend{}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	two := append(fakeBatch(61), fakeBatch(61)...)
	v0 := fakeBatch(61)
	v0[magicOffset] = 0
	unknownID := produceReq(13, 1, "orders", 0, fakeBatch(61))
	unknownID.Topics[0].TopicID = [16]byte{9}
	for _, tt := range []struct {
		name string
		req  *kmsg.ProduceRequest
		want int16
	}{
		{"v2 message sets", produceReq(2, 1, "orders", 0, fakeBatch(61)), kerr.UnsupportedVersion.Code},
		{"v0", produceReq(0, 1, "orders", 0, fakeBatch(61)), kerr.UnsupportedVersion.Code},
		{"acks=2", produceReq(7, 2, "orders", 0, fakeBatch(61)), kerr.InvalidRequiredAcks.Code},
		{"two batches", produceReq(7, 1, "orders", 0, two), kerr.InvalidRecord.Code},
		{"no batch", produceReq(7, 1, "orders", 0, []byte{1, 2, 3}), kerr.InvalidRecord.Code},
		{"message format v0", produceReq(7, 1, "orders", 0, v0), kerr.UnsupportedForMessageFormat.Code},
		{"unknown topic ID", unknownID, kerr.UnknownTopicID.Code},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := c.roundTrip(tt.req).(*kmsg.ProduceResponse)
			if got := resp.Topics[0].Partitions[0].ErrorCode; got != tt.want {
				t.Fatalf("%v, want %v", kerr.ErrorForCode(got), kerr.ErrorForCode(tt.want))
			}
		})
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.produced) != 0 {
		t.Fatalf("%d produces reached the backend", len(be.produced))
	}
}

// The backend's errors are mapped through the table, and a
// NOT_LEADER_OR_FOLLOWER answer names the leader and its address.
func TestProduceErrors(t *testing.T) {
	be := &fakeBackend{produceErr: api.Errorf(api.CodeNotLeader, "moved")}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	resp := c.roundTrip(produceReq(10, -1, "orders", 0, fakeBatch(61))).(*kmsg.ProduceResponse)
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != kerr.NotLeaderForPartition.Code || p.ErrorMessage == nil {
		t.Fatalf("%v %v", kerr.ErrorForCode(p.ErrorCode), p.ErrorMessage)
	}
	if p.CurrentLeader.LeaderID != 1 || p.CurrentLeader.LeaderEpoch != 5 || len(resp.Brokers) != 1 || resp.Brokers[0].Port != 9092 {
		t.Fatalf("leader %+v, brokers %+v", p.CurrentLeader, resp.Brokers)
	}

	be.mu.Lock()
	be.produceErr = api.Errorf(api.CodeNotEnoughReplicas, "ISR 1")
	be.mu.Unlock()
	resp = c.roundTrip(produceReq(7, -1, "orders", 0, fakeBatch(61))).(*kmsg.ProduceResponse)
	if got := resp.Topics[0].Partitions[0].ErrorCode; got != kerr.NotEnoughReplicas.Code {
		t.Fatal(kerr.ErrorForCode(got))
	}

	// acks=0 has no answer to carry the error: the connection closes.
	c.send(produceReq(7, 0, "orders", 0, fakeBatch(61)))
	c.closed()
}

// The partitions of one request are all produced, each answered in its
// place.
func TestProduceManyPartitions(t *testing.T) {
	be := &fakeBackend{}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	req := produceReq(7, 1, "orders", 0, fakeBatch(61))
	for p := int32(1); p < 40; p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, fakeBatch(61)
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
	}
	resp := c.roundTrip(req).(*kmsg.ProduceResponse)
	for i, p := range resp.Topics[0].Partitions {
		if p.Partition != int32(i) || p.ErrorCode != 0 {
			t.Fatalf("answer %d: partition %d, %v", i, p.Partition, kerr.ErrorForCode(p.ErrorCode))
		}
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.produced) != 40 {
		t.Fatalf("%d produced", len(be.produced))
	}
}

func TestInitProducerID(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for want := int64(1); want <= 2; want++ {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version = 4
		resp := c.roundTrip(req).(*kmsg.InitProducerIDResponse)
		if resp.ErrorCode != 0 || resp.ProducerID != want || resp.ProducerEpoch != 0 {
			t.Fatalf("%+v", resp)
		}
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID = 4, kmsg.StringPtr("txn")
	if resp := c.roundTrip(req).(*kmsg.InitProducerIDResponse); resp.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transactional: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}
