package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// handleGroupPollBatches is GET /v1/groups/{group}/members/{member}/batches:
// the group poll of handleGroupPoll with the records left as the leaders
// stored them. Nothing is decoded or rendered: each partition's batches are
// relayed whole after a small JSON head (api.ContentTypeGroupBatches), for
// readers that want bytes (the sinks, the pushers). max_records bounds each
// partition's share, at whole batches; max_bytes the answer's batches.
func (g *Gateway) handleGroupPollBatches(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	pp, err := parsePollQuery(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pp.wait+groupBudget)
	defer cancel()
	g.setWriteDeadline(w, pp.wait+groupBudget)
	meta, data, err := g.groupPollBatches(ctx, group, member, pp)
	g.setWriteDeadline(w, 0)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	head, err := json.Marshal(meta)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	size := int64(4 + len(head))
	for _, d := range data {
		size += int64(len(d))
	}
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeGroupBatches)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(head)))
	if _, err := w.Write(n[:]); err != nil {
		return
	}
	if _, err := w.Write(head); err != nil {
		return
	}
	for _, d := range data {
		if _, err := w.Write(d); err != nil {
			return
		}
	}
}

// groupPollBatches is groupPoll with raw batches: the meta of the answer
// and each partition's bytes, in the meta's order.
func (g *Gateway) groupPollBatches(ctx context.Context, group, member string, pp pollParams) (api.GroupBatchesMeta, [][]byte, error) {
	plan, positions, pp, err := g.startGroupPoll(ctx, group, member, pp)
	if err != nil {
		return api.GroupBatchesMeta{}, nil, err
	}
	began := time.Now()
	results := g.readRawRound(ctx, positions, pp, 0)
	if rawTotal(results) == 0 && pp.wait > 0 && len(positions) > 0 {
		results = g.readRawRound(ctx, positions, pp, pp.wait)
	}
	meta := api.GroupBatchesMeta{MemberEpoch: plan.MemberEpoch, Assignment: plan.Assignment, Grants: plan.Grants, Partitions: []api.GroupBatchesPart{}}
	next := make([]api.PartitionOffset, len(positions))
	data := make([][]byte, 0, len(positions))
	var throttled error
	for i, p := range positions {
		r := results[i]
		pos := p.offset
		switch {
		case r.err == nil:
			pos = r.next
		case throttled == nil && errors.Is(r.err, &api.Error{Code: api.CodeThrottled}):
			throttled = r.err
		case errors.Is(r.err, api.ErrOffsetOutOfRange):
			// Retention or truncation moved the log past the position:
			// the reset policy says where to go.
			if off, err := g.resetPosition(ctx, p); err == nil {
				pos = off
			}
		}
		next[i] = api.PartitionOffset{Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: pos}
		if len(r.data) > 0 {
			meta.Partitions = append(meta.Partitions, api.GroupBatchesPart{
				Topic: p.tp.Topic, Partition: p.tp.Partition, From: p.offset, NextOffset: pos, HighWatermark: r.hw, Bytes: int64(len(r.data)),
			})
			data = append(data, r.data)
		}
	}
	if len(data) == 0 && throttled != nil {
		return api.GroupBatchesMeta{}, nil, throttled
	}
	g.endGroupPoll(ctx, group, member, pp, plan, positions, next, began)
	meta.Cursor = api.Cursor{Epoch: plan.MemberEpoch, Positions: next}.Encode()
	return meta, data, nil
}

// rawPart is one partition's share of a raw group poll.
type rawPart struct {
	data []byte
	next int64
	hw   int64
	err  error
}

func rawTotal(rs []rawPart) int {
	n := 0
	for _, r := range rs {
		n += len(r.data)
	}
	return n
}

// readRawRound fetches every partition's raw batches concurrently. With a
// wait, the first partition to return bytes ends the others' long polls.
func (g *Gateway) readRawRound(ctx context.Context, ps []position, pp pollParams, wait time.Duration) []rawPart {
	return fetchRound(ctx, ps, pp, wait, func(ctx context.Context, fp fetchParams, p position) (rawPart, bool, error) {
		raw, fr, err := g.fetchRaw(ctx, fp, p.offset)
		if err != nil {
			return rawPart{}, false, err
		}
		return rawPart{data: raw, next: max(fr.NextOffset, p.offset), hw: fr.HighWatermark}, len(raw) > 0, nil
	}, func(p position, err error) rawPart { return rawPart{err: err, next: p.offset} })
}
