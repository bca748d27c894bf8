package kafka

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

func TestMetadata(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for _, v := range []int16{0, 1, 4, 7, 9, 10, 12, 13} {
		req := metadataReq(v)
		if v == 0 {
			req.Topics = []kmsg.MetadataRequestTopic{} // v0: empty means all
		}
		resp := c.roundTrip(req).(*kmsg.MetadataResponse)
		// Broker 3 has no Kafka listener.
		if len(resp.Brokers) != 2 || resp.Brokers[0].NodeID != 1 || resp.Brokers[0].Host != "127.0.0.1" || resp.Brokers[0].Port != 9092 ||
			resp.Brokers[1].NodeID != 2 || resp.Brokers[1].Host != "kafka-2.example" || resp.Brokers[1].Port != 19092 {
			t.Fatalf("v%d brokers %+v", v, resp.Brokers)
		}
		if v >= 1 && resp.ControllerID != 2 {
			t.Fatalf("v%d controller %d", v, resp.ControllerID)
		}
		if len(resp.Topics) != 2 {
			t.Fatalf("v%d: %d topics", v, len(resp.Topics))
		}
		i := slices.IndexFunc(resp.Topics, func(t kmsg.MetadataResponseTopic) bool { return *t.Topic == "orders" })
		orders := resp.Topics[i]
		offsets := resp.Topics[1-i]
		if orders.ErrorCode != 0 || len(orders.Partitions) != 2 {
			t.Fatalf("v%d orders %+v", v, orders)
		}
		if v >= 1 && (orders.IsInternal || !offsets.IsInternal) {
			t.Fatalf("v%d internal: orders %v, %s %v", v, orders.IsInternal, api.OffsetsTopic, offsets.IsInternal)
		}
		if v >= 10 && (orders.TopicID != [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} || offsets.TopicID == [16]byte{}) {
			t.Fatalf("v%d topic IDs %x %x", v, orders.TopicID, offsets.TopicID)
		}
		p0, p1 := orders.Partitions[0], orders.Partitions[1]
		if p0.ErrorCode != 0 || p0.Leader != 1 || !slices.Equal(p0.Replicas, []int32{1, 2, 4}) || !slices.Equal(p0.ISR, []int32{1, 2}) {
			t.Fatalf("v%d p0 %+v", v, p0)
		}
		if v >= 5 && !slices.Equal(p0.OfflineReplicas, []int32{4}) {
			t.Fatalf("v%d p0 offline %v", v, p0.OfflineReplicas)
		}
		if v >= 7 && p0.LeaderEpoch != 5 {
			t.Fatalf("v%d p0 epoch %d", v, p0.LeaderEpoch)
		}
		// Led by broker 3, which Kafka clients cannot reach.
		if p1.ErrorCode != kerr.LeaderNotAvailable.Code || p1.Leader != -1 {
			t.Fatalf("v%d p1 %+v", v, p1)
		}
	}
}

func TestMetadataTopicsAskedFor(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)

	req := metadataReq(12)
	req.Topics = []kmsg.MetadataRequestTopic{}
	if resp := c.roundTrip(req).(*kmsg.MetadataResponse); len(resp.Topics) != 0 || len(resp.Brokers) != 2 {
		t.Fatalf("no topics asked: %d topics", len(resp.Topics))
	}

	ask := func(name *string, id [16]byte) kmsg.MetadataRequestTopic {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic, rt.TopicID = name, id
		return rt
	}
	req = metadataReq(12)
	req.AllowAutoTopicCreation = true // ignored: auto-creation is off
	req.Topics = []kmsg.MetadataRequestTopic{
		ask(kmsg.StringPtr("orders"), [16]byte{}),
		ask(kmsg.StringPtr("missing"), [16]byte{}),
		ask(kmsg.StringPtr("bad name!"), [16]byte{}),
		ask(nil, topicID(testMetadata().Topics[api.OffsetsTopic].Record)),
		ask(nil, [16]byte{1}),
	}
	resp := c.roundTrip(req).(*kmsg.MetadataResponse)
	want := []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidTopicException.Code, 0, kerr.UnknownTopicID.Code}
	if len(resp.Topics) != len(want) {
		t.Fatalf("%d topics", len(resp.Topics))
	}
	for i, w := range want {
		if resp.Topics[i].ErrorCode != w {
			t.Errorf("topic %d: %v, want %v", i, kerr.ErrorForCode(resp.Topics[i].ErrorCode), kerr.ErrorForCode(w))
		}
	}
	if *resp.Topics[3].Topic != api.OffsetsTopic {
		t.Fatalf("by ID: %v", resp.Topics[3].Topic)
	}
}

func TestTopicID(t *testing.T) {
	id := topicID(api.TopicRecord{ID: "ffeeddccbbaa99887766554433221100"})
	if id != [16]byte{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00} {
		t.Fatalf("%x", id)
	}
	a, b := topicID(api.TopicRecord{ID: "x"}), topicID(api.TopicRecord{ID: "y"})
	if a == b || a != topicID(api.TopicRecord{ID: "x"}) || a == [16]byte{} {
		t.Fatalf("derived IDs %x %x", a, b)
	}
}

func TestDescribeCluster(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for _, v := range []int16{0, 1, 2} {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.Version = v
		resp := c.roundTrip(req).(*kmsg.DescribeClusterResponse)
		if resp.ErrorCode != 0 || resp.ControllerID != 2 || len(resp.Brokers) != 2 || resp.Brokers[1].Host != "kafka-2.example" {
			t.Fatalf("v%d %+v", v, resp)
		}
	}
	req := kmsg.NewPtrDescribeClusterRequest()
	req.Version, req.EndpointType = 1, 2
	if resp := c.roundTrip(req).(*kmsg.DescribeClusterResponse); resp.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Fatalf("controllers: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

func TestListOffsets(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	req := func(v int16, topic string, ts ...int64) *kmsg.ListOffsetsRequest {
		r := kmsg.NewPtrListOffsetsRequest()
		r.Version, r.ReplicaID = v, -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for i, ts := range ts {
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp = int32(i), ts
			rt.Partitions = append(rt.Partitions, p)
		}
		r.Topics = append(r.Topics, rt)
		return r
	}
	for _, v := range []int16{1, 2, 4, 6} {
		resp := c.roundTrip(req(v, "orders", -2, -1, 5000, -3)).(*kmsg.ListOffsetsResponse)
		ps := resp.Topics[0].Partitions
		if len(ps) != 4 || ps[0].Offset != 0 || ps[1].Offset != 42 || ps[2].Offset != 5 || ps[3].ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("v%d %+v", v, ps)
		}
		if v >= 4 && ps[1].LeaderEpoch != 3 {
			t.Fatalf("v%d epoch %d", v, ps[1].LeaderEpoch)
		}
	}
	resp := c.roundTrip(req(0, "orders", -1)).(*kmsg.ListOffsetsResponse)
	if ps := resp.Topics[0].Partitions; len(ps) != 1 || !slices.Equal(ps[0].OldStyleOffsets, []int64{42}) {
		t.Fatalf("v0 %+v", ps)
	}
	resp = c.roundTrip(req(2, "missing", -1)).(*kmsg.ListOffsetsResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(code))
	}
}
