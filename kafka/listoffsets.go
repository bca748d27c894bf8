package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listOffsetsTimeout bounds one request's lookups (a lookup by time may
// read remote segments).
const listOffsetsTimeout = 30 * time.Second

// Special ListOffsets timestamps.
const (
	offsetLatest   = -1 // the high watermark (the last stable offset: there are no transactions)
	offsetEarliest = -2 // the log start, the remote tier included
)

// handleListOffsets answers ListOffsets through the broker's offsets
// path: earliest, latest, or the first record at or after a time, the
// remote tier included. The timestamp answered is -1: the broker's lookup
// by time finds the offset, not the record's time. Read-committed asks
// the same as read-uncommitted, since no transaction is ever open.
func (s *Server) handleListOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	ctx, cancel := context.WithTimeout(ctx, listOffsetsTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			if rp.Timestamp < offsetEarliest {
				// -3 (max timestamp) and later lookups come with v7+,
				// which is not served.
				p.ErrorCode = kerr.UnsupportedVersion.Code
				t.Partitions = append(t.Partitions, p)
				continue
			}
			res, err := s.opts.Backend.ListOffset(ctx, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp)
			switch {
			case err != nil:
				p.ErrorCode = errorCode(err)
			case req.Version == 0:
				p.OldStyleOffsets = []int64{}
				if res.Offset >= 0 && rp.MaxNumOffsets > 0 {
					p.OldStyleOffsets = append(p.OldStyleOffsets, res.Offset)
				}
			default:
				p.Offset, p.LeaderEpoch = res.Offset, res.LeaderEpoch
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}
