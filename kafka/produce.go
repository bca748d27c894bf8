package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/cluster"
)

// Produce bounds.
const (
	// defaultProduceTimeout applies when a request names no timeout (0 or
	// less): the broker's HTTP produce default.
	defaultProduceTimeout = 30 * time.Second
	// maxProduceTimeout caps the timeout a request names, as the HTTP
	// produce's timeout_ms is capped.
	maxProduceTimeout = 5 * time.Minute
	// produceParallel bounds the partitions of one request appended and
	// waited for at once, so that acks=all costs one replication round
	// trip for a request of a few partitions, not one per partition.
	produceParallel = 16
)

// batchOverhead is the bytes of a RecordBatch before its length field
// counts: the base offset and the length itself.
const batchOverhead = 8 + 4

// handleProduce answers Produce. Each partition's records must be one
// RecordBatch v2, which goes to the partition's log as the client encoded
// it (Backend.Produce: CRC and layout checked, offsets and leader epoch
// stamped, sequences checked for idempotent producers). Versions 0-2
// carry message sets of older formats and are refused per partition with
// UNSUPPORTED_VERSION. An acks=0 request gets no answer; when any of its
// partitions failed, its connection is closed, as Kafka does, so that the
// producer refreshes its metadata.
func (s *Server) handleProduce(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	md := s.opts.Backend.Metadata()

	// Answers are filled in place: one slot per requested partition.
	type job struct {
		topic string
		rp    *kmsg.ProduceRequestTopicPartition
		out   *kmsg.ProduceResponseTopicPartition
	}
	var jobs []job
	refuse := func(out *kmsg.ProduceResponseTopicPartition, code int16, msg string) {
		out.ErrorCode = code
		out.ErrorMessage = kmsg.StringPtr(msg)
	}
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewProduceResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		name, topicErr, topicMsg := rt.Topic, int16(0), ""
		switch {
		case req.Version < 3:
			topicErr, topicMsg = kerr.UnsupportedVersion.Code, fmt.Sprintf("produce v%d carries a message set of an old format; this broker takes RecordBatch v2 only, from produce v3", req.Version)
		case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
			topicErr, topicMsg = kerr.InvalidRequiredAcks.Code, fmt.Sprintf("acks=%d: want 0, 1 or -1", req.Acks)
		case req.Version >= 13:
			if n, ok := s.ids.name(md, rt.TopicID); ok {
				name, t.Topic = n, n
			} else {
				topicErr, topicMsg = kerr.UnknownTopicID.Code, "no topic has this ID"
			}
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			out := &t.Partitions[j]
			*out = kmsg.NewProduceResponseTopicPartition()
			out.Partition = rp.Partition
			if topicErr != 0 {
				refuse(out, topicErr, topicMsg)
				continue
			}
			if code, msg := checkRecords(rp.Records); code != 0 {
				refuse(out, code, msg)
				continue
			}
			jobs = append(jobs, job{name, rp, out})
		}
	}

	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = defaultProduceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, maxProduceTimeout))
	defer cancel()
	produce := func(j job) {
		res, err := s.opts.Backend.Produce(ctx, j.topic, j.rp.Partition, j.rp.Records, req.Acks)
		if err != nil {
			j.out.ErrorCode, j.out.ErrorMessage = errorCode(err), errorMessage(err)
			return
		}
		j.out.BaseOffset, j.out.LogStartOffset = res.BaseOffset, res.LogStartOffset
	}
	if len(jobs) == 1 {
		produce(jobs[0])
	} else {
		// Request-local goroutines, waited for before the answer.
		sem := make(chan struct{}, produceParallel)
		var wg sync.WaitGroup
		for _, j := range jobs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				produce(j)
			}()
		}
		wg.Wait()
	}
	for _, j := range jobs {
		if j.out.ErrorCode == kerr.NotLeaderForPartition.Code {
			pointToLeader(md, resp, j.topic, j.out)
		}
	}

	if req.Acks == 0 {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return nil, fmt.Errorf("%w: %s[%d]: %s", errAcks0Failed, t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
				}
			}
		}
		return nil, nil
	}
	return resp, nil
}

// magicOffset is where a batch's magic byte sits, in RecordBatch v2 and in
// the v0 and v1 message sets alike: after the offset (8), the length (4)
// and the partition leader epoch or the CRC (4).
const magicOffset = 16

// checkRecords checks that records hold exactly one RecordBatch v2, as
// Kafka wants from produce v3 on: magic 2, and a length field that covers
// the rest. The batch itself is checked by the log. A v0 or v1 message
// set is UNSUPPORTED_FOR_MESSAGE_FORMAT: librdkafka sends those, even in
// produce v7, to a broker whose ApiVersions does not list Fetch v4 (it
// takes message format v2 to need both Produce v3 and Fetch v4).
func checkRecords(records []byte) (code int16, msg string) {
	if len(records) <= magicOffset {
		return kerr.InvalidRecord.Code, fmt.Sprintf("records of %d bytes hold no record batch", len(records))
	}
	if magic := records[magicOffset]; magic != 2 {
		return kerr.UnsupportedForMessageFormat.Code, fmt.Sprintf("a message set of format v%d; this broker takes RecordBatch v2 (magic 2) only", magic)
	}
	if n := int64(int32(binary.BigEndian.Uint32(records[8:]))); n != int64(len(records)-batchOverhead) {
		return kerr.InvalidRecord.Code, fmt.Sprintf("records of %d bytes are not one record batch (its length says %d)", len(records), n+batchOverhead)
	}
	return 0, ""
}

// pointToLeader adds, to a NOT_LEADER_OR_FOLLOWER answer, the partition's
// leader as this broker knows it, and that broker's address (KIP-951), so
// that a client can move there before its next metadata refresh.
func pointToLeader(md *cluster.Metadata, resp *kmsg.ProduceResponse, topic string, out *kmsg.ProduceResponseTopicPartition) {
	tm, ok := md.Topics[topic]
	if !ok || out.Partition < 0 || int(out.Partition) >= len(tm.States) {
		return
	}
	st := tm.States[out.Partition]
	if st.Leader < 0 {
		return
	}
	host, port, ok := splitHostPort(md.Brokers[st.Leader].KafkaAddress)
	if !ok {
		return
	}
	out.CurrentLeader.LeaderID, out.CurrentLeader.LeaderEpoch = st.Leader, st.LeaderEpoch
	for _, b := range resp.Brokers {
		if b.NodeID == st.Leader {
			return
		}
	}
	b := kmsg.NewProduceResponseBroker()
	b.NodeID, b.Host, b.Port = st.Leader, host, port
	resp.Brokers = append(resp.Brokers, b)
}
