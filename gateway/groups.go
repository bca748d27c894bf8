package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// groupBudget bounds a group call, retries included, beyond any long poll.
const groupBudget = 30 * time.Second

// retriableGroup: answers that prove the coordinator did nothing, and
// connections that never reached it. Sent-but-unanswered calls are retried
// only by idempotent routes (see onCoordinator).
func retriableGroup(err error) bool {
	switch api.Classify(err).Code {
	case api.CodeNotCoordinator, api.CodeCoordinatorLoading, api.CodeCoordinatorNotAvail:
		return true
	}
	return brokerapi.NotSent(err)
}

func retriableGroupIdempotent(err error) bool {
	return retriableGroup(err) || api.Classify(err).Code == api.CodeBrokerUnavailable
}

// onCoordinator runs f against the coordinator of group, finding it again
// after each retriable failure until ctx ends. Only idempotent calls retry
// failures after which the call may have been applied.
func onCoordinator[T any](g *Gateway, ctx context.Context, group string, idempotent bool, f func(addr string) (T, error)) (T, error) {
	ok := retriableGroup
	if idempotent {
		ok = retriableGroupIdempotent
	}
	return retry(ctx, ok, func() (T, error) {
		addr, err := g.coordinatorAddr(ctx, group)
		if err != nil {
			var zero T
			return zero, err
		}
		return f(addr)
	})
}

// coordinatorAddr is the address of the leader of the group's
// __consumer_offsets partition. The topic is created on first use.
func (g *Gateway) coordinatorAddr(ctx context.Context, group string) (string, error) {
	if err := api.ValidateGroupID(group); err != nil {
		return "", err
	}
	md := g.view.Current()
	t, ok := md.Topics[api.OffsetsTopic]
	if !ok {
		if err := g.createOffsetsTopic(ctx); err != nil {
			return "", err
		}
		return "", api.Errorf(api.CodeCoordinatorNotAvail, "the %s topic is being created", api.OffsetsTopic)
	}
	addr, _, err := md.Leader(api.OffsetsTopic, api.GroupPartition(group, t.Partitions()))
	if err != nil {
		return "", api.Errorf(api.CodeCoordinatorNotAvail, "group %q: %v", group, err)
	}
	return addr, nil
}

// createOffsetsTopic creates __consumer_offsets: compacted, replicated to
// min(3, brokers), acks=all with min.insync.replicas min(2, RF). A topic
// another gateway created first is fine.
func (g *Gateway) createOffsetsTopic(ctx context.Context) error {
	brokers := len(g.view.Current().Brokers)
	if brokers == 0 {
		return api.Errorf(api.CodeCoordinatorNotAvail, "no brokers are registered")
	}
	req := api.OffsetsTopicRequest(g.opts.OffsetsTopicPartitions, brokers)
	// The gateway makes the topic for itself, not for the caller who
	// joined first (who may create no topic).
	cctx, cancel := context.WithTimeout(auth.WithPrincipal(ctx, brokerapi.PrincipalGateway), 10*time.Second)
	defer cancel()
	err := g.callController(cctx, func(addr string) error { return g.brokers.CreateTopic(cctx, addr, req) })
	switch {
	case err == nil:
		g.log.Info("created the consumer offsets topic", "partitions", req.Partitions, "replication_factor", req.ReplicationFactor)
	case !errors.Is(err, api.ErrTopicExists):
		return err
	}
	return g.view.Refresh(ctx)
}

// maxGroupBody bounds a group route's JSON body.
const maxGroupBody = 1 << 20

func groupCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), groupBudget)
}

// handleJoinGroup is POST /v1/groups/{group}/members.
func (g *Gateway) handleJoinGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req api.JoinGroupRequest
	if err := decodeStrictJSON(w, r, &req, maxGroupBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := groupCtx(r)
	defer cancel()
	res, err := g.join(ctx, group, req, api.MemberKindHTTP)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusCreated, res)
}

func (g *Gateway) join(ctx context.Context, group string, req api.JoinGroupRequest, kind string) (api.JoinGroupResponse, error) {
	for _, t := range req.Topics {
		if err := g.authorize(ctx, auth.OpRead, auth.ResourceTopic, t); err != nil {
			return api.JoinGroupResponse{}, err
		}
	}
	return onCoordinator(g, ctx, group, false, func(addr string) (api.JoinGroupResponse, error) {
		return g.brokers.JoinGroup(ctx, addr, group, brokerapi.GroupJoin{JoinGroupRequest: req, Kind: kind})
	})
}

// handleHeartbeat is POST /v1/groups/{group}/members/{member}/heartbeat.
func (g *Gateway) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	ctx, cancel := groupCtx(r)
	defer cancel()
	res, err := onCoordinator(g, ctx, group, true, func(addr string) (api.HeartbeatResponse, error) {
		return g.brokers.Heartbeat(ctx, addr, group, member)
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleLeaveGroup is DELETE /v1/groups/{group}/members/{member}.
func (g *Gateway) handleLeaveGroup(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	ctx, cancel := groupCtx(r)
	defer cancel()
	if err := g.leave(ctx, group, member); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) leave(ctx context.Context, group, member string) error {
	_, err := onCoordinator(g, ctx, group, true, func(addr string) (struct{}, error) {
		return struct{}{}, g.brokers.LeaveGroup(ctx, addr, group, member)
	})
	return err
}

// handleCommit is POST /v1/groups/{group}/offsets.
func (g *Gateway) handleCommit(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req api.CommitRequest
	if err := decodeStrictJSON(w, r, &req, maxGroupBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := groupCtx(r)
	defer cancel()
	res, err := g.commit(ctx, group, req)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// commit forwards a commit; a retried commit of the same offsets is harmless.
func (g *Gateway) commit(ctx context.Context, group string, req api.CommitRequest) (api.CommitResponse, error) {
	if req.MemberID == "" {
		return api.CommitResponse{}, api.Errorf(api.CodeInvalidRequest, "member_id is required")
	}
	if len(req.Cursor) > api.MaxCursorLen {
		return api.CommitResponse{}, api.Errorf(api.CodeInvalidRequest, "cursor longer than %d bytes", api.MaxCursorLen)
	}
	// READ on each topic written, as Kafka asks (a member's own topics
	// passed this at its join).
	offs := req.Offsets
	if req.Cursor != "" {
		c, err := api.DecodeCursor(req.Cursor)
		if err != nil {
			return api.CommitResponse{}, err
		}
		offs = append(slices.Clip(offs), c.Positions...)
	}
	if err := g.authorizeOffsetTopics(ctx, offs); err != nil {
		return api.CommitResponse{}, err
	}
	return onCoordinator(g, ctx, group, true, func(addr string) (api.CommitResponse, error) {
		return g.brokers.CommitOffsets(ctx, addr, group, req)
	})
}

// handleDescribeGroup is GET /v1/groups/{group}: the coordinator's view plus
// each partition's high watermark and lag, asked of the partition leaders.
func (g *Gateway) handleDescribeGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	ctx, cancel := groupCtx(r)
	defer cancel()
	d, err := onCoordinator(g, ctx, group, true, func(addr string) (api.GroupDescription, error) {
		return g.brokers.DescribeGroup(ctx, addr, group)
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	g.fillLag(ctx, d.Partitions)
	apihttp.WriteJSON(w, http.StatusOK, d)
}

// fillLag asks each partition's leader for its HW and, where the group lags,
// the timestamp of the first unconsumed record. Unknown values stay -1.
func (g *Gateway) fillLag(ctx context.Context, rows []api.GroupPartitionLag) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range rows {
		wg.Add(1)
		go func(row *api.GroupPartitionLag) {
			defer wg.Done()
			addr, _, err := g.view.Current().Leader(row.Topic, row.Partition)
			if err != nil {
				return
			}
			res, err := g.brokers.ListOffsets(ctx, addr, row.Topic, row.Partition, "latest")
			if err != nil {
				return
			}
			row.HighWatermark = res.HighWatermark
			if row.CommittedOffset < 0 {
				return
			}
			row.Lag = max(0, row.HighWatermark-row.CommittedOffset)
			row.LagMs = 0
			if row.Lag == 0 {
				return
			}
			fr, err := g.fetchRecords(ctx, fetchParams{topic: row.Topic, partition: row.Partition, maxRecords: 1, maxBytes: 64 << 10}, row.CommittedOffset)
			if err != nil || len(fr.Records) == 0 {
				row.LagMs = -1
				return
			}
			row.LagMs = max(0, time.Now().UnixMilli()-fr.Records[0].Timestamp)
		}(&rows[i])
	}
	wg.Wait()
}

// handleListGroups is GET /v1/groups: every broker lists the groups it
// coordinates.
func (g *Gateway) handleListGroups(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	md := g.view.Current()
	var mu sync.Mutex
	seen := map[string]api.GroupSummary{}
	var wg sync.WaitGroup
	for _, b := range md.Brokers {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			l, err := g.brokers.ListGroups(ctx, addr)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, s := range l.Groups {
				seen[s.Group] = s
			}
		}(b.Address)
	}
	wg.Wait()
	res := api.GroupList{Groups: make([]api.GroupSummary, 0, len(seen))}
	for _, s := range seen {
		if !g.allowed(r.Context(), auth.OpDescribe, auth.ResourceGroup, s.Group) {
			continue
		}
		res.Groups = append(res.Groups, s)
	}
	sort.Slice(res.Groups, func(i, j int) bool { return res.Groups[i].Group < res.Groups[j].Group })
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleDeleteGroup is DELETE /v1/groups/{group} (only without members).
func (g *Gateway) handleDeleteGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	ctx, cancel := groupCtx(r)
	defer cancel()
	_, err := onCoordinator(g, ctx, group, true, func(addr string) (struct{}, error) {
		return struct{}{}, g.brokers.DeleteGroup(ctx, addr, group)
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleResetOffsets is POST /v1/groups/{group}/offsets/reset: resolve the
// target of every partition of the topics, then write them all (refused
// with GROUP_NOT_EMPTY while the group has members).
func (g *Gateway) handleResetOffsets(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req api.ResetOffsetsRequest
	if err := decodeStrictJSON(w, r, &req, maxGroupBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if len(req.Topics) == 0 {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "topics: name at least one"))
		return
	}
	spec, fixed, err := parseResetTarget(req.To)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := groupCtx(r)
	defer cancel()
	md := g.view.Current()
	var offs []api.PartitionOffset
	for _, topic := range req.Topics {
		t, ok := md.Topics[topic]
		if !ok {
			apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic))
			return
		}
		for p := int32(0); p < int32(t.Partitions()); p++ {
			off := fixed
			if spec != "" {
				if off, err = g.resolveResetOffset(ctx, topic, p, spec); err != nil {
					apihttp.WriteError(w, err)
					return
				}
			}
			offs = append(offs, api.PartitionOffset{Topic: topic, Partition: p, Offset: off})
		}
	}
	if err := g.authorizeOffsetTopics(ctx, offs); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	res, err := onCoordinator(g, ctx, group, true, func(addr string) (api.CommitResponse, error) {
		return g.brokers.SetGroupOffsets(ctx, addr, group, offs)
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// parseResetTarget reads earliest | latest | offset:N | timestamp:MS. It
// returns the list-offsets spec to ask leaders, or a fixed offset.
func parseResetTarget(to string) (spec string, fixed int64, err error) {
	switch {
	case to == api.ResetEarliest || to == api.ResetLatest:
		return to, 0, nil
	case strings.HasPrefix(to, "offset:"):
		n, perr := strconv.ParseInt(strings.TrimPrefix(to, "offset:"), 10, 64)
		if perr == nil && n >= 0 {
			return "", n, nil
		}
	case strings.HasPrefix(to, "timestamp:"):
		n, perr := strconv.ParseInt(strings.TrimPrefix(to, "timestamp:"), 10, 64)
		if perr == nil && n >= 0 {
			return strconv.FormatInt(n, 10), 0, nil
		}
	}
	return "", 0, api.Errorf(api.CodeInvalidOffset, "to=%q: want earliest, latest, offset:N or timestamp:MS", to)
}

// resolveResetOffset asks the leader; a timestamp past every record
// resolves to the log end, as Kafka's reset does.
func (g *Gateway) resolveResetOffset(ctx context.Context, topic string, p int32, spec string) (int64, error) {
	res, err := g.listOffsets(ctx, topic, p, spec)
	if err != nil {
		return 0, err
	}
	if res.Offset < 0 {
		return res.LogEndOffset, nil
	}
	return res.Offset, nil
}

// authorizeOffsetTopics checks READ on every topic of offs, each once.
func (g *Gateway) authorizeOffsetTopics(ctx context.Context, offs []api.PartitionOffset) error {
	seen := map[string]bool{}
	for _, o := range offs {
		if seen[o.Topic] {
			continue
		}
		seen[o.Topic] = true
		if err := g.authorize(ctx, auth.OpRead, auth.ResourceTopic, o.Topic); err != nil {
			return err
		}
	}
	return nil
}
