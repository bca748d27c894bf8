package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// maxCommitPartitions bounds the partitions of one OffsetCommit: each is a
// record of the coordinator's one write.
const maxCommitPartitions = 10_000

// handleOffsetCommit commits a member's offsets, with the metadata string
// and leader epoch the client gives, through the coordinator's checks: the
// member at its generation owning each partition, or, with no member id
// and generation -1 (an admin client), an empty group. Each partition
// gets its own answer.
func (s *Server) handleOffsetCommit(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	md := s.opts.Backend.Metadata()
	// codes[i][j] answers req.Topics[i].Partitions[j]; -1 until known.
	codes := make([][]int16, len(req.Topics))
	var offs []CommitOffset
	var where [][2]int
	n := 0
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			n++
			switch {
			case n > maxCommitPartitions:
				codes[i][j] = kerr.InvalidRequest.Code
			case !partitionExists(md, t.Topic, p.Partition):
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
			case p.Metadata != nil && len(*p.Metadata) > api.MaxCommitMetadataBytes:
				codes[i][j] = kerr.OffsetMetadataTooLarge.Code
			default:
				codes[i][j] = -1
				le := int32(-1)
				if req.Version >= 6 {
					le = p.LeaderEpoch
				}
				offs = append(offs, CommitOffset{TopicPartition: api.TopicPartition{Topic: t.Topic, Partition: p.Partition},
					Offset: p.Offset, LeaderEpoch: le, Metadata: deref(p.Metadata)})
				where = append(where, [2]int{i, j})
			}
		}
	}
	var all error
	gb, ok := s.groupsBackend()
	switch {
	case !ok:
		all = errNoGroups
	case api.ValidateGroupID(req.Group) != nil:
		all = api.ValidateGroupID(req.Group)
	case len(offs) > 0:
		gen := int32(-1)
		if req.Version >= 1 {
			gen = req.Generation
		}
		ctx, cancel := context.WithTimeout(ctx, groupTimeout)
		defer cancel()
		var errs []error
		errs, all = gb.CommitOffsets(ctx, req.Group, GroupMember{MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Generation: gen}, offs)
		if all == nil {
			for k, w := range where {
				if k < len(errs) {
					codes[w[0]][w[1]] = errorCode(errs[k])
				} else {
					codes[w[0]][w[1]] = 0
				}
			}
		}
	}
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, codes[i][j]
			if rp.ErrorCode == -1 {
				rp.ErrorCode = errorCode(all)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// partitionExists reports whether the snapshot holds topic's partition.
func partitionExists(md *cluster.Metadata, topic string, partition int32) bool {
	t, ok := md.Topics[topic]
	return ok && partition >= 0 && int(partition) < t.Partitions()
}

// maxFetchGroups bounds the groups of one OffsetFetch v8+.
const maxFetchGroups = 1000

// handleOffsetFetch answers the committed offsets of a group (v8+: of
// several), with each one's metadata and leader epoch; a partition with no
// commit is offset -1. Asking for no topics (a null list, v2+) answers
// every committed partition.
func (s *Server) handleOffsetFetch(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	if req.Version < 8 {
		committed, err := s.fetchOffsets(ctx, req.Group)
		var asked []offsetFetchTopic
		for _, t := range req.Topics {
			asked = append(asked, offsetFetchTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		for _, t := range offsetFetchRows(committed, asked, req.Topics == nil) {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p.Partition, p.Offset, p.LeaderEpoch, kmsg.StringPtr(p.Metadata)
				if req.Version < 2 {
					rp.ErrorCode = errorCode(err) // no group-level code before v2
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	if len(req.Groups) > maxFetchGroups {
		return nil, api.Errorf(api.CodeInvalidRequest, "OffsetFetch asks for %d groups, more than %d", len(req.Groups), maxFetchGroups)
	}
	for _, g := range req.Groups {
		committed, err := s.fetchOffsets(ctx, g.Group)
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, errorCode(err)
		if err == nil {
			var asked []offsetFetchTopic
			for _, t := range g.Topics {
				asked = append(asked, offsetFetchTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
			for _, t := range offsetFetchRows(committed, asked, g.Topics == nil) {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p.Partition, p.Offset, p.LeaderEpoch, kmsg.StringPtr(p.Metadata)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (s *Server) fetchOffsets(ctx context.Context, group string) (map[api.TopicPartition]CommittedOffset, error) {
	gb, ok := s.groupsBackend()
	if !ok {
		return nil, errNoGroups
	}
	if err := api.ValidateGroupID(group); err != nil {
		return nil, err
	}
	return gb.FetchOffsets(ctx, group)
}

// offsetFetchTopic is one topic an OffsetFetch asks for.
type offsetFetchTopic struct {
	Topic      string
	Partitions []int32
}

type offsetFetchTopicRow struct {
	Topic      string
	Partitions []offsetFetchRow
}

type offsetFetchRow struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// offsetFetchRows lays out an answer: the partitions asked for, in the
// order asked, or with all set every committed one, sorted.
func offsetFetchRows(committed map[api.TopicPartition]CommittedOffset, asked []offsetFetchTopic, all bool) []offsetFetchTopicRow {
	row := func(tp api.TopicPartition) offsetFetchRow {
		if c, ok := committed[tp]; ok {
			return offsetFetchRow{Partition: tp.Partition, Offset: c.Offset, LeaderEpoch: c.LeaderEpoch, Metadata: c.Metadata}
		}
		return offsetFetchRow{Partition: tp.Partition, Offset: -1, LeaderEpoch: -1}
	}
	var out []offsetFetchTopicRow
	if all {
		tps := make([]api.TopicPartition, 0, len(committed))
		for tp := range committed {
			tps = append(tps, tp)
		}
		sortTopicPartitions(tps)
		for _, tp := range tps {
			if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
				out = append(out, offsetFetchTopicRow{Topic: tp.Topic})
			}
			out[len(out)-1].Partitions = append(out[len(out)-1].Partitions, row(tp))
		}
		return out
	}
	for _, t := range asked {
		r := offsetFetchTopicRow{Topic: t.Topic}
		for _, p := range t.Partitions {
			r.Partitions = append(r.Partitions, row(api.TopicPartition{Topic: t.Topic, Partition: p}))
		}
		out = append(out, r)
	}
	return out
}
