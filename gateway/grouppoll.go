package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
)

// pollParams bound one group poll.
type pollParams struct {
	maxRecords int
	maxBytes   int64
	wait       time.Duration
	cursor     string
}

// handleGroupPoll is GET /v1/groups/{group}/members/{member}/records: ask the
// coordinator where to read (renewing the session), read every assigned
// partition from its leader, tell the coordinator where the poll ended, and
// answer with the records and a cursor naming those positions.
func (g *Gateway) handleGroupPoll(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	pp, err := parsePollQuery(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pp.wait+groupBudget)
	defer cancel()
	g.setWriteDeadline(w, pp.wait+groupBudget)
	res, err := g.groupPoll(ctx, group, member, pp)
	if err != nil {
		g.setWriteDeadline(w, 0)
		apihttp.WriteError(w, err)
		return
	}
	bp := getBuf(0)
	*bp, err = renderGroupPoll(*bp, &res)
	g.writeRenderedWithin(w, http.StatusOK, bp, err)
}

func (g *Gateway) groupPoll(ctx context.Context, group, member string, pp pollParams) (api.GroupPollResponse, error) {
	plan, positions, pp, err := g.startGroupPoll(ctx, group, member, pp)
	if err != nil {
		return api.GroupPollResponse{}, err
	}
	began := time.Now()
	recs, next, throttled := g.readPartitions(ctx, positions, pp)
	if len(recs) == 0 && throttled != nil {
		// Over the fetch quota and nothing to show for it: the member
		// waits it off (429, or a WebSocket member's pause) instead of
		// polling again at once.
		return api.GroupPollResponse{}, throttled
	}
	g.endGroupPoll(ctx, group, member, pp, plan, positions, next, began)
	return api.GroupPollResponse{
		Records:     recs,
		Cursor:      api.Cursor{Epoch: plan.MemberEpoch, Positions: next}.Encode(),
		MemberEpoch: plan.MemberEpoch,
		Assignment:  plan.Assignment,
		Grants:      plan.Grants,
	}, nil
}

// startGroupPoll asks the coordinator where a poll reads (renewing the
// session) and resolves the positions it has none for; the wait is cut to
// half the session so that a poll never outlives the member.
func (g *Gateway) startGroupPoll(ctx context.Context, group, member string, pp pollParams) (brokerapi.GroupPollPlan, []position, pollParams, error) {
	g.metrics.fetchRequests.WithLabelValues("group").Inc()
	plan, err := onCoordinator(g, ctx, group, true, func(addr string) (brokerapi.GroupPollPlan, error) {
		return g.brokers.StartPoll(ctx, addr, group, member, pp.cursor)
	})
	if err != nil {
		return plan, nil, pp, err
	}
	positions, err := g.startPositions(ctx, plan.Starts)
	if err != nil {
		return plan, nil, pp, err
	}
	if half := time.Duration(plan.SessionTimeoutMs) * time.Millisecond / 2; half > 0 && pp.wait > half {
		pp.wait = half
	}
	return plan, positions, pp, nil
}

// endGroupPoll tells the coordinator where a poll ended when it must hear
// of it. A member that polls without a cursor reads on from where the
// coordinator remembers its last poll ending (one that sends the cursor
// tells it in the next StartPoll). Best effort: if the coordinator does not
// hear of it, the member's next poll reads these records again. It also
// renews the session after a long wait.
func (g *Gateway) endGroupPoll(ctx context.Context, group, member string, pp pollParams, plan brokerapi.GroupPollPlan, positions []position, next []api.PartitionOffset, began time.Time) {
	if (pp.cursor == "" && moved(positions, plan.Starts, next)) || time.Since(began) > time.Second {
		_, _ = onCoordinator(g, ctx, group, true, func(addr string) (struct{}, error) {
			return struct{}{}, g.brokers.EndPoll(ctx, addr, group, member, next)
		})
	}
}

// moved reports whether the coordinator must hear of the poll's end: some
// position changed, or was resolved by a reset it does not know of.
func moved(ps []position, starts []brokerapi.GroupStart, next []api.PartitionOffset) bool {
	for i := range ps {
		if starts[i].Offset != next[i].Offset {
			return true
		}
	}
	return false
}

// position is where a poll reads one partition.
type position struct {
	tp     api.TopicPartition
	offset int64
	reset  string
}

// startPositions resolves the partitions the group has no position for by
// their reset policy.
func (g *Gateway) startPositions(ctx context.Context, starts []brokerapi.GroupStart) ([]position, error) {
	out := make([]position, len(starts))
	for i, s := range starts {
		out[i] = position{tp: api.TopicPartition{Topic: s.Topic, Partition: s.Partition}, offset: s.Offset, reset: s.Reset}
		if s.Offset >= 0 {
			continue
		}
		off, err := g.resetPosition(ctx, out[i])
		if err != nil {
			return nil, err
		}
		out[i].offset = off
	}
	return out, nil
}

// resetPosition applies a member's auto_offset_reset to a partition.
func (g *Gateway) resetPosition(ctx context.Context, p position) (int64, error) {
	switch p.reset {
	case api.ResetEarliest, api.ResetLatest:
		return g.resolveOffset(ctx, p.tp.Topic, p.tp.Partition, p.reset)
	}
	return 0, api.Errorf(api.CodeNoOffset, "%s/%d has no committed offset (or it is out of range) and auto_offset_reset is none", p.tp.Topic, p.tp.Partition)
}

// partResult is one partition's share of a poll.
type partResult struct {
	recs []api.FetchedRecord
	next int64
	err  error
}

// readPartitions reads every partition once without waiting; when nothing
// came back and the poll may wait, it long-polls them all and stops at the
// first that has records. It returns the records (at most maxRecords, in
// partition order) and the position after them in every partition.
// A THROTTLED fetch leaves its partition's position; the first one is
// returned too, for a poll that read nothing because of it.
func (g *Gateway) readPartitions(ctx context.Context, ps []position, pp pollParams) ([]api.GroupRecord, []api.PartitionOffset, error) {
	results := g.readRound(ctx, ps, pp, 0)
	if total(results) == 0 && pp.wait > 0 && len(ps) > 0 {
		results = g.readRound(ctx, ps, pp, pp.wait)
	}
	take := fairShares(results, pp.maxRecords)
	recs := []api.GroupRecord{}
	next := make([]api.PartitionOffset, len(ps))
	var throttled error
	for i, p := range ps {
		r := results[i]
		pos := p.offset
		if throttled == nil && errors.Is(r.err, &api.Error{Code: api.CodeThrottled}) {
			throttled = r.err
		}
		if r.err == nil {
			pos = r.next
		} else if errors.Is(r.err, api.ErrOffsetOutOfRange) {
			// Retention or truncation moved the log past the position:
			// the reset policy says where to go.
			if off, err := g.resetPosition(ctx, p); err == nil {
				pos = off
			}
		}
		if take[i] < len(r.recs) {
			pos = r.recs[take[i]].Offset // the first record left for the next poll
		}
		for _, rec := range r.recs[:take[i]] {
			recs = append(recs, api.GroupRecord{Topic: p.tp.Topic, Partition: p.tp.Partition, FetchedRecord: rec})
		}
		next[i] = api.PartitionOffset{Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: pos}
	}
	return recs, next, throttled
}

// fairShares is how many of each partition's fetched records a poll of at
// most max records answers: every partition first gets up to an equal share,
// then what is left goes to those with more, in order. So a partition with
// a backlog never starves the others of the same member.
func fairShares(results []partResult, max int) []int {
	take := make([]int, len(results))
	if len(results) == 0 {
		return take
	}
	share := (max + len(results) - 1) / len(results)
	left := max
	for i, r := range results {
		take[i] = min(len(r.recs), share, left)
		left -= take[i]
	}
	for i, r := range results {
		extra := min(len(r.recs)-take[i], left)
		take[i] += extra
		left -= extra
	}
	return take
}

func total(rs []partResult) int {
	n := 0
	for _, r := range rs {
		n += len(r.recs)
	}
	return n
}

// readRound fetches every partition concurrently. With a wait, the first
// partition to return records ends the others' long polls.
func (g *Gateway) readRound(ctx context.Context, ps []position, pp pollParams, wait time.Duration) []partResult {
	return fetchRound(ctx, ps, pp, wait, func(ctx context.Context, fp fetchParams, p position) (partResult, bool, error) {
		res, err := g.fetchRecords(ctx, fp, p.offset)
		return partResult{recs: res.Records, next: res.NextOffset}, len(res.Records) > 0, err
	}, func(p position, err error) partResult { return partResult{err: err, next: p.offset} })
}

// fetchRound runs fetch for every position concurrently, each within its
// share of the poll's max_bytes (at least 64 KiB), and returns the results
// in order; a fetch that failed is failed's result instead. With a wait,
// the first fetch that got data (has) ends the others' long polls, and a
// fetch cut that way fails with a nil error.
func fetchRound[T any](ctx context.Context, ps []position, pp pollParams, wait time.Duration,
	fetch func(ctx context.Context, fp fetchParams, p position) (res T, has bool, err error), failed func(p position, err error) T) []T {
	out := make([]T, len(ps))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	perPart := max(pp.maxBytes/int64(max(len(ps), 1)), 64<<10)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() { // owned by fetchRound, which waits for it
			defer wg.Done()
			fp := fetchParams{topic: p.tp.Topic, partition: p.tp.Partition, maxRecords: pp.maxRecords, maxBytes: min(perPart, pp.maxBytes), wait: wait}
			res, has, err := fetch(rctx, fp, p)
			if err != nil {
				if rctx.Err() != nil && ctx.Err() == nil {
					err = nil // ended early: another partition had records
				}
				out[i] = failed(p, err)
				return
			}
			out[i] = res
			if wait > 0 && has {
				cancel()
			}
		}()
	}
	wg.Wait()
	return out
}
