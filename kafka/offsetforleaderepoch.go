package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// EpochEndResult answers Backend.EpochEnd.
type EpochEndResult struct {
	// LeaderEpoch is the largest epoch at or below the one asked for that
	// the leader's log knows, and EndOffset where the epoch after it
	// starts (the log end for the latest). Both are -1 when the log knows
	// no epoch that old or older.
	LeaderEpoch int32
	EndOffset   int64
}

// handleOffsetForLeaderEpoch answers OffsetForLeaderEpoch (KIP-101, and
// KIP-320 for consumers): per partition, on its leader, the end offset of
// the epoch asked for, as the leader's lineage has it. A consumer whose
// fetch position was written in an old epoch learns where that epoch ended
// and truncates there only if it read past it; franz-go takes -1/-1 as
// records lost and resets, so an old epoch is answered with its real end,
// as Kafka does.
func (s *Server) handleOffsetForLeaderEpoch(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = make([]kmsg.OffsetForLeaderEpochResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		t := &resp.Topics[i]
		*t = kmsg.NewOffsetForLeaderEpochResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			out := &t.Partitions[j]
			*out = kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			out.Partition = rp.Partition
			current := int32(-1)
			if req.Version >= 2 {
				current = rp.CurrentLeaderEpoch
			}
			res, err := s.opts.Backend.EpochEnd(ctx, rt.Topic, rp.Partition, current, rp.LeaderEpoch)
			if err != nil {
				out.ErrorCode, out.LeaderEpoch, out.EndOffset = errorCode(err), -1, -1
				continue
			}
			out.LeaderEpoch, out.EndOffset = res.LeaderEpoch, res.EndOffset
		}
	}
	return resp, nil
}
