package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/push"
)

// Push subscription routes. Access is the subscription's group's:
// DESCRIBE to read, WRITE to change, DELETE to delete, with READ on each
// topic it pushes and WRITE on its dead-letter topic to create it or
// change them.

// maxPushBody bounds a push route's JSON body.
const maxPushBody = 64 << 10

// pushBudget bounds a push route's calls.
const pushBudget = 30 * time.Second

// pushGroupCheck authorizes op on the group of the {name} in the path.
func (g *Gateway) pushGroupCheck(op auth.Operation) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := chi.URLParam(r, "name")
			if err := push.ValidateName(name); err != nil {
				apihttp.WriteError(w, err)
				return
			}
			if err := g.authorize(r.Context(), op, auth.ResourceGroup, push.Group(name)); err != nil {
				apihttp.WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (g *Gateway) pushRoutes(r chi.Router) {
	r.Post("/v1/push", g.handleCreatePush) // WRITE on push.<name>, READ on its topics, WRITE on its dead-letter topic
	r.Get("/v1/push", g.handleListPush)    // lists what the caller may DESCRIBE
	r.With(g.pushGroupCheck(auth.OpDescribe)).Get("/v1/push/{name}", g.handleGetPush)
	r.With(g.pushGroupCheck(auth.OpWrite)).Patch("/v1/push/{name}", g.handlePatchPush) // and READ/WRITE on the topics it names
	r.With(g.pushGroupCheck(auth.OpDelete)).Delete("/v1/push/{name}", g.handleDeletePush)
	r.With(g.pushGroupCheck(auth.OpWrite)).Put("/v1/push/{name}/state", g.handlePushState)
	r.With(g.pushGroupCheck(auth.OpWrite)).Post("/v1/push/{name}/seek", g.handlePushSeek)
	r.With(g.pushGroupCheck(auth.OpWrite)).Post("/v1/push/{name}/secrets/rotate", g.handlePushRotate)
	r.With(g.pushGroupCheck(auth.OpWrite)).Post("/v1/push/{name}/test", g.handlePushTest)
	r.With(g.pushGroupCheck(auth.OpDescribe)).Get("/v1/push/{name}/deliveries", g.handlePushDeliveries)
}

// checkPushConfig applies what Normalize cannot know: the caller's access
// to the topics, that they exist, and where the endpoint resolves.
func (g *Gateway) checkPushConfig(ctx context.Context, cfg api.PushConfig) error {
	for _, t := range cfg.Topics {
		if err := g.authorize(ctx, auth.OpRead, auth.ResourceTopic, t); err != nil {
			return err
		}
		if _, ok := g.view.Current().Topics[t]; !ok {
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", t)
		}
	}
	if err := g.authorize(ctx, auth.OpWrite, auth.ResourceTopic, cfg.DeadLetter.Topic); err != nil {
		return err
	}
	if !g.pushers.AllowPrivate() {
		return push.CheckEndpoint(ctx, cfg.Endpoint, net.DefaultResolver)
	}
	return nil
}

// handleCreatePush is POST /v1/push. The subscription is stored paused,
// its start is written to its group's offsets, and only then is it made
// active, so no pusher starts it anywhere else. (A gateway that dies in
// between leaves it paused, with reason "being created": resume it.)
func (g *Gateway) handleCreatePush(w http.ResponseWriter, r *http.Request) {
	var cfg api.PushConfig
	if err := decodeStrictJSON(w, r, &cfg, maxPushBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	cfg, err := push.Normalize(cfg)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	if err := g.authorize(ctx, auth.OpWrite, auth.ResourceGroup, push.Group(cfg.Name)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.checkPushConfig(ctx, cfg); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.ensureDeadLetterTopic(ctx, cfg); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.ensureDeliveriesTopic(ctx); err != nil {
		// The delivery log is best effort: the subscription does without.
		g.log.Warn("the push delivery log's topic could not be created", "topic", api.PushDeliveriesTopic, "err", err)
	}
	secret, err := push.NewSecret()
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	now := time.Now().UnixMilli()
	sub := &push.Subscription{Config: cfg, State: api.PushPaused, Reason: "being created",
		Secrets: []push.Secret{{Key: secret}}, CreatedMs: now, UpdatedMs: now}
	store := g.pushers.Store()
	if err := store.Create(ctx, sub); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if _, err := g.seekPush(ctx, cfg, cfg.Start); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	sub, err = store.Update(ctx, cfg.Name, func(s *push.Subscription) error {
		s.State, s.Reason, s.UpdatedMs = api.PushActive, "", time.Now().UnixMilli()
		return nil
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	out := sub.Public()
	out.Secret = secret
	apihttp.WriteJSON(w, http.StatusCreated, out)
}

// ensureDeadLetterTopic creates the dead-letter topic when it does not
// exist: as many partitions as the first topic, RF min(3, brokers).
func (g *Gateway) ensureDeadLetterTopic(ctx context.Context, cfg api.PushConfig) error {
	md := g.view.Current()
	if _, ok := md.Topics[cfg.DeadLetter.Topic]; ok {
		return nil
	}
	parts := 1
	if tm, ok := md.Topics[cfg.Topics[0]]; ok {
		parts = tm.Partitions()
	}
	req := api.CreateTopicRequest{Name: cfg.DeadLetter.Topic, Partitions: parts, ReplicationFactor: min(3, len(md.Brokers))}
	if err := g.createInternalTopic(ctx, req, true); err != nil {
		return err
	}
	if err := g.view.Refresh(ctx); err != nil {
		return err
	}
	_, err := g.waitTopicReady(ctx, req.Name)
	return err
}

// seekPush writes the subscription's offsets at target in every partition
// of its topics (its owners restart them from there).
func (g *Gateway) seekPush(ctx context.Context, cfg api.PushConfig, target string) ([]api.PartitionOffset, error) {
	spec, ts, err := push.ParseStart(target)
	if err != nil {
		return nil, err
	}
	c := pushCluster{g}
	var offs []api.PartitionOffset
	for _, t := range cfg.Topics {
		n, ok := c.Partitions(t)
		if !ok {
			return nil, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", t)
		}
		for p := range n {
			tp := api.TopicPartition{Topic: t, Partition: int32(p)}
			at := spec
			if spec == "timestamp" {
				at = "timestamp:" + strconv.FormatInt(ts, 10)
			}
			off, err := c.Resolve(ctx, tp, at)
			if err != nil {
				return nil, err
			}
			offs = append(offs, api.PartitionOffset{Topic: t, Partition: int32(p), Offset: off})
		}
	}
	group := push.Group(cfg.Name)
	gctx := asGateway(ctx)
	_, err = onCoordinator(g, gctx, group, true, func(addr string) (api.CommitResponse, error) {
		return g.brokers.SeekManagedGroup(gctx, addr, group, offs)
	})
	return offs, err
}

// handleListPush is GET /v1/push.
func (g *Gateway) handleListPush(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	subs, err := g.pushers.Store().List(ctx)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	out := api.PushList{Subscriptions: []api.PushSubscription{}}
	for _, s := range subs {
		if g.allowed(ctx, auth.OpDescribe, auth.ResourceGroup, push.Group(s.Config.Name)) {
			pub, _ := g.publicPush(ctx, s)
			out.Subscriptions = append(out.Subscriptions, pub)
		}
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

// publicPush renders a subscription, with backing_off when a pusher of it
// (on any gateway) treats its endpoint as down. The live status is read
// from the coordinator; without it the state is the stored one.
func (g *Gateway) publicPush(ctx context.Context, s *push.Subscription) (api.PushSubscription, []push.PusherStatus) {
	out := s.Public()
	live, err := g.pushers.Status(ctx, s.Config.Name)
	if err != nil {
		g.log.Debug("a push subscription's live status could not be read", "subscription", s.Config.Name, "err", err)
	}
	if out.State == api.PushActive {
		for _, st := range live {
			if st.BackingOff {
				out.State, out.Reason = api.PushBackingOff, st.Reason
				break
			}
		}
	}
	return out, live
}

// livePartitions indexes the pushers' live partitions by member, then
// partition: a partition's state is its owner's (a pusher it was taken
// from no longer lists it once it has stopped it).
func livePartitions(live []push.PusherStatus) map[string]map[api.TopicPartition]push.PartitionLive {
	out := map[string]map[api.TopicPartition]push.PartitionLive{}
	for _, st := range live {
		m := out[st.Member]
		if m == nil {
			m = map[api.TopicPartition]push.PartitionLive{}
			out[st.Member] = m
		}
		for _, p := range st.Partitions {
			m[p.TopicPartition] = p
		}
	}
	return out
}

// handleGetPush is GET /v1/push/{name}: the settings, the state and, per
// partition, the committed offset, lag and the attempts counted against
// the record at the committed offset.
func (g *Gateway) handleGetPush(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	sub, err := g.pushers.Store().Read(ctx, name)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	pub, live := g.publicPush(ctx, sub)
	st := api.PushStatus{PushSubscription: pub, Partitions: []api.PushPartition{}}
	group := push.Group(name)
	gctx := asGateway(ctx)
	d, err := onCoordinator(g, gctx, group, true, func(addr string) (api.GroupDescription, error) {
		return g.brokers.DescribeGroup(gctx, addr, group)
	})
	if err != nil && !errors.Is(err, &api.Error{Code: api.CodeUnknownGroup}) {
		apihttp.WriteError(w, err)
		return
	}
	g.fillLag(gctx, d.Partitions)
	byOwner := livePartitions(live)
	for _, row := range d.Partitions {
		pp := api.PushPartition{
			Topic: row.Topic, Partition: row.Partition, CommittedOffset: row.CommittedOffset, HighWatermark: row.HighWatermark,
			Lag: row.Lag, LagMs: row.LagMs, HeadAttempts: push.HeadAttempts(row.Metadata, row.CommittedOffset), Owner: row.Owner,
		}
		if l, ok := byOwner[row.Owner][api.TopicPartition{Topic: row.Topic, Partition: row.Partition}]; ok && row.Owner != "" {
			pp.InFlight, pp.LastError = l.InFlight, l.LastError
			if l.LastError != nil && (st.LastError == nil || l.LastError.AtMs > st.LastError.AtMs) {
				st.LastError = l.LastError
			}
		}
		st.Partitions = append(st.Partitions, pp)
	}
	apihttp.WriteJSON(w, http.StatusOK, st)
}

// handlePatchPush is PATCH /v1/push/{name}: any subset of the settings.
func (g *Gateway) handlePatchPush(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if err := apihttp.RequireJSON(r); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPushBody))
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeRequestTooLarge, "the body is larger than %d bytes", maxPushBody))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	var next api.PushConfig
	sub, err := g.pushers.Store().Update(ctx, name, func(s *push.Subscription) error {
		cfg, err := push.Patch(s.Config, body)
		if err != nil {
			return err
		}
		if err := g.checkPushConfig(ctx, cfg); err != nil {
			return err
		}
		next = cfg
		s.Config, s.UpdatedMs = cfg, time.Now().UnixMilli()
		return nil
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.ensureDeadLetterTopic(ctx, next); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	pub, _ := g.publicPush(ctx, sub)
	apihttp.WriteJSON(w, http.StatusOK, pub)
}

// handleDeletePush is DELETE /v1/push/{name}: the subscription, then its
// group once its pushers have left (their sessions end within 15 s). The
// dead-letter topic stays.
func (g *Gateway) handleDeletePush(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	if err := g.pushers.Store().Delete(ctx, name); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	group := push.Group(name)
	gctx := asGateway(ctx)
	for {
		_, err := onCoordinator(g, gctx, group, true, func(addr string) (struct{}, error) {
			return struct{}{}, g.brokers.DeleteManagedGroup(gctx, addr, group)
		})
		if err == nil || errors.Is(err, &api.Error{Code: api.CodeUnknownGroup}) {
			break
		}
		if !errors.Is(err, &api.Error{Code: api.CodeGroupNotEmpty}) || ctx.Err() != nil {
			// The subscription is gone; its group's offsets stay until
			// deleted (a new subscription of the name seeks them anew).
			g.log.Warn("a deleted push subscription's group was not deleted", "group", group, "err", err)
			break
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	g.pushers.RemoveStatus(ctx, name)
	w.WriteHeader(http.StatusNoContent)
}

// handlePushState is PUT /v1/push/{name}/state: active or paused. A
// disabled subscription resumes from its committed offsets.
func (g *Gateway) handlePushState(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var req api.PushStateRequest
	if err := decodeStrictJSON(w, r, &req, maxPushBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if req.State != api.PushActive && req.State != api.PushPaused {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "state %q: want active or paused", req.State))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	sub, err := g.pushers.Store().Update(ctx, name, func(s *push.Subscription) error {
		s.State, s.UpdatedMs = req.State, time.Now().UnixMilli()
		s.Reason = ""
		if req.State == api.PushPaused {
			s.Reason = "paused by " + auth.PrincipalFrom(ctx)
		}
		return nil
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	pub, _ := g.publicPush(ctx, sub)
	apihttp.WriteJSON(w, http.StatusOK, pub)
}

// handlePushSeek is POST /v1/push/{name}/seek: the committed offsets move
// to the target (durably, before the answer) and the pushers restart
// there.
func (g *Gateway) handlePushSeek(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var req api.PushSeekRequest
	if err := decodeStrictJSON(w, r, &req, maxPushBody, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if req.To == "" {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "to: want earliest, latest or timestamp:<unix ms>"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	sub, err := g.pushers.Store().Read(ctx, name)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	offs, err := g.seekPush(ctx, sub.Config, req.To)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, api.CommitResponse{Committed: offs})
}

// handlePushRotate is POST /v1/push/{name}/secrets/rotate: a new secret
// signs from now on; the old ones sign too until the grace ends.
func (g *Gateway) handlePushRotate(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var req api.PushRotateRequest
	if err := decodeStrictJSON(w, r, &req, maxPushBody, true); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	grace := push.DefaultRotationGrace
	if req.GraceSeconds != 0 {
		grace = time.Duration(req.GraceSeconds) * time.Second
	}
	if grace < 0 || grace > push.MaxRotationGrace {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "grace_seconds=%d: want 0 to %d", req.GraceSeconds, int64(push.MaxRotationGrace/time.Second)))
		return
	}
	fresh, err := push.NewSecret()
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	sub, err := g.pushers.Store().Update(ctx, name, func(s *push.Subscription) error {
		now := time.Now()
		s.Secrets, s.UpdatedMs = push.Rotate(s.Secrets, fresh, now, grace), now.UnixMilli()
		return nil
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	out, _ := g.publicPush(ctx, sub)
	out.Secret = fresh
	apihttp.WriteJSON(w, http.StatusOK, out)
}

// handlePushTest is POST /v1/push/{name}/test: one signed synthetic event,
// outside the subscription's delivery; the answer is its attempt.
func (g *Gateway) handlePushTest(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	// No body needed, but JSON's media type is: a page on another origin
	// cannot make a browser send it without asking.
	var none struct{}
	if err := decodeStrictJSON(w, r, &none, maxPushBody, true); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), push.MaxTimeout)
	defer cancel()
	sub, err := g.pushers.Store().Read(ctx, name)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if !g.pushers.AllowPrivate() {
		if err := push.CheckEndpoint(ctx, sub.Config.Endpoint, net.DefaultResolver); err != nil {
			apihttp.WriteError(w, err)
			return
		}
	}
	res, err := g.pushers.Test(ctx, sub)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// Delivery log bounds: a read scans at most deliveriesScan entries back
// from the log's end (all subscriptions'), and answers at most
// maxDeliveries.
const (
	deliveriesScan     = 20000
	defaultDeliveries  = 100
	maxDeliveries      = 1000
	deliveriesChunk    = 1000
	deliveriesMaxBytes = 4 << 20
)

// ensureDeliveriesTopic creates the delivery log's topic: one partition,
// RF min(3, brokers), a day or 64 MiB.
func (g *Gateway) ensureDeliveriesTopic(ctx context.Context) error {
	md := g.view.Current()
	if _, ok := md.Topics[api.PushDeliveriesTopic]; ok {
		return nil
	}
	req := api.CreateTopicRequest{Name: api.PushDeliveriesTopic, Partitions: 1, ReplicationFactor: min(3, len(md.Brokers)),
		Configs: map[string]string{api.ConfigRetentionMs: "86400000", api.ConfigRetentionBytes: strconv.Itoa(64 << 20)}}
	if err := g.createInternalTopic(ctx, req, false); err != nil {
		return err
	}
	return g.view.Refresh(ctx)
}

// createInternalTopic creates a topic a subscription needs, as the gateway
// itself: with the replication factor asked for, or, while brokers are
// down (the metadata counts them a moment longer), as many as are live.
// With minISR, min.insync.replicas is min(2, RF). A topic that exists is
// fine.
func (g *Gateway) createInternalTopic(ctx context.Context, req api.CreateTopicRequest, minISR bool) error {
	cctx := asGateway(ctx)
	for {
		if minISR && req.ReplicationFactor > 1 {
			if req.Configs == nil {
				req.Configs = map[string]string{}
			}
			req.Configs[api.ConfigMinInsyncReplicas] = strconv.Itoa(min(2, req.ReplicationFactor))
		}
		err := g.callController(cctx, func(addr string) error { return g.brokers.CreateTopic(cctx, addr, req) })
		switch {
		case err == nil || errors.Is(err, api.ErrTopicExists):
			return nil
		case api.Classify(err).Code == api.CodeInvalidReplication && req.ReplicationFactor > 1:
			req.ReplicationFactor--
			continue
		}
		return err
	}
}

// handlePushDeliveries is GET /v1/push/{name}/deliveries?status=&limit=:
// the subscription's latest delivery log entries, newest first.
func (g *Gateway) handlePushDeliveries(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	q := r.URL.Query()
	status := q.Get("status")
	switch status {
	case "":
		status = "all"
	case "all", api.DeliveryFailed, api.DeliveryDead:
	default:
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "status=%q: want failed, dead or all", status))
		return
	}
	limit, err := apihttp.QueryInt(q, "limit", defaultDeliveries, 1, maxDeliveries)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushBudget)
	defer cancel()
	if _, err := g.pushers.Store().Read(ctx, name); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	out := api.PushDeliveries{Deliveries: []api.PushDelivery{}}
	if _, ok := g.view.Current().Topics[api.PushDeliveriesTopic]; ok {
		if out.Deliveries, err = g.readDeliveries(asGateway(ctx), name, status, int(limit)); err != nil {
			apihttp.WriteError(w, err)
			return
		}
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

// readDeliveries scans the delivery log back from its end, a chunk at a
// time, for name's entries of status.
func (g *Gateway) readDeliveries(ctx context.Context, name, status string, limit int) ([]api.PushDelivery, error) {
	const t, p = api.PushDeliveriesTopic, 0
	first, err := g.resolveOffset(ctx, t, p, api.ResetEarliest)
	if err != nil {
		return nil, err
	}
	end, err := g.resolveOffset(ctx, t, p, api.ResetLatest)
	if err != nil {
		return nil, err
	}
	out := []api.PushDelivery{}
	for scanned := int64(0); end > first && len(out) < limit && scanned < deliveriesScan; {
		from := max(first, end-deliveriesChunk)
		var chunk []api.PushDelivery
		for pos := from; pos < end; {
			res, err := g.fetchRecords(ctx, fetchParams{topic: t, partition: p, maxRecords: deliveriesChunk, maxBytes: deliveriesMaxBytes}, pos)
			if err != nil {
				return nil, err
			}
			for _, rec := range res.Records {
				if rec.Offset >= end || rec.Key == nil || *rec.Key != name {
					continue
				}
				var d api.PushDelivery
				if json.Unmarshal(rec.Value, &d) == nil && (status == "all" || d.Status == status) {
					chunk = append(chunk, d)
				}
			}
			if res.NextOffset <= pos {
				break
			}
			pos = res.NextOffset
		}
		for i := len(chunk) - 1; i >= 0 && len(out) < limit; i-- {
			out = append(out, chunk[i])
		}
		scanned += end - from
		end = from
	}
	return out, nil
}
