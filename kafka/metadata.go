package kafka

import (
	"context"
	"net"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// handleMetadata answers Metadata from the broker's view: the brokers that
// serve Kafka, the controller, and each topic asked for (all of them for a
// null list, or an empty one at v0) with its partitions' leaders, leader
// epochs, replicas, ISR and offline replicas. Topics are never created by
// asking (auto-creation is off): an unknown one is
// UNKNOWN_TOPIC_OR_PARTITION.
func (s *Server) handleMetadata(_ context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	md := s.opts.Backend.Metadata()
	kafkaBrokers := metadataBrokers(md)
	for _, b := range kafkaBrokers {
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, rb)
	}
	resp.ControllerID = controllerID(md, kafkaBrokers)

	if req.Topics == nil || req.Version == 0 && len(req.Topics) == 0 {
		for _, name := range md.TopicNames() {
			resp.Topics = append(resp.Topics, metadataTopic(md, md.Topics[name], kafkaBrokers))
		}
		return resp, nil
	}
	for _, rt := range req.Topics {
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		} else if n, ok := s.ids.name(md, rt.TopicID); ok {
			name = n
		} else {
			t := kmsg.NewMetadataResponseTopic()
			t.TopicID, t.ErrorCode = rt.TopicID, kerr.UnknownTopicID.Code
			resp.Topics = append(resp.Topics, t)
			continue
		}
		tm, ok := md.Topics[name]
		if !ok {
			t := kmsg.NewMetadataResponseTopic()
			t.Topic = kmsg.StringPtr(name)
			t.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if api.ValidateTopicName(name) != nil {
				t.ErrorCode = kerr.InvalidTopicException.Code
			}
			resp.Topics = append(resp.Topics, t)
			continue
		}
		resp.Topics = append(resp.Topics, metadataTopic(md, tm, kafkaBrokers))
	}
	return resp, nil
}

// kafkaBroker is a broker that serves Kafka, at its advertised address.
type kafkaBroker struct {
	id   int32
	host string
	port int32
}

// metadataBrokers lists the registered brokers that advertise a Kafka
// address, in ID order. A broker without one (its listener is off) is
// left out, and so are the partitions it leads: they have no leader a
// Kafka client could reach.
func metadataBrokers(md *cluster.Metadata) []kafkaBroker {
	var out []kafkaBroker
	for _, id := range md.BrokerIDs() {
		host, port, ok := splitHostPort(md.Brokers[id].KafkaAddress)
		if ok {
			out = append(out, kafkaBroker{id, host, port})
		}
	}
	return out
}

// splitHostPort splits an advertised host:port.
func splitHostPort(addr string) (string, int32, bool) {
	if addr == "" {
		return "", 0, false
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return host, int32(port), true
}

func servesKafka(brokers []kafkaBroker, id int32) bool {
	return slices.ContainsFunc(brokers, func(b kafkaBroker) bool { return b.id == id })
}

// controllerID is the controller when it serves Kafka, else -1.
func controllerID(md *cluster.Metadata, brokers []kafkaBroker) int32 {
	if id := md.Controller.BrokerID; id >= 0 && servesKafka(brokers, id) {
		return id
	}
	return -1
}

// metadataTopic is one topic's Metadata answer.
func metadataTopic(md *cluster.Metadata, tm *cluster.TopicMeta, brokers []kafkaBroker) kmsg.MetadataResponseTopic {
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr(tm.Name)
	t.TopicID = topicID(tm.Record)
	t.IsInternal = tm.Name == api.OffsetsTopic
	for p, replicas := range tm.Record.Replicas {
		st := tm.States[p]
		rp := kmsg.NewMetadataResponseTopicPartition()
		rp.Partition = int32(p)
		rp.Leader, rp.LeaderEpoch = st.Leader, st.LeaderEpoch
		if st.Leader < 0 || !servesKafka(brokers, st.Leader) {
			rp.Leader, rp.ErrorCode = -1, kerr.LeaderNotAvailable.Code
		}
		rp.Replicas = slices.Clone(replicas)
		rp.ISR = slices.Clone(st.ISR)
		if rp.ISR == nil {
			rp.ISR = []int32{}
		}
		rp.OfflineReplicas = []int32{}
		for _, r := range replicas {
			reg, alive := md.Brokers[r]
			if _, failed := reg.FailedLog(tm.Name, int32(p)); !alive || failed {
				rp.OfflineReplicas = append(rp.OfflineReplicas, r)
			}
		}
		t.Partitions = append(t.Partitions, rp)
	}
	return t
}
