package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
)

// sessionTimeout is a pusher's session in its group: how long after a
// gateway dies its partitions wait for another gateway.
const sessionTimeout = 10 * time.Second

// subscriptionRun is one subscription's pusher on this gateway: a static
// member of push.<name> that runs a partition loop per granted partition.
//
// Goroutines: run (started by the manager, which cancels and waits for
// it) owns the membership and starts one goroutine per granted partition,
// and the status writer (publishStatus), which it waits for before it
// returns.
type subscriptionRun struct {
	cfg      api.PushConfig
	group    string
	instance string
	cluster  Cluster
	coord    coord.Coordinator // where its live status goes
	client   *http.Client
	builder  *requestBuilder
	gate     *gate
	log      *slog.Logger
	stats    *subStats
	dlog     *deliveryLog // nil: no delivery log
	// onDisable stores the disabled state (the manager's); called once.
	onDisable func(reason string)

	disabled    chan struct{} // closed by disable
	disableOnce sync.Once

	member atomic.Pointer[memberInfo]
	// resync asks run for a heartbeat now (a partition's commit was fenced).
	resync chan struct{}
	// statusKick wakes the status writer (publishStatus).
	statusKick chan struct{}
	// backingOff is the gate's state as last published.
	backingOff atomic.Bool

	mu    sync.Mutex // guards parts
	parts map[api.TopicPartition]*partRun
}

type memberInfo struct {
	id    string
	epoch int32
}

// partRun is a running partition loop.
type partRun struct {
	p      *partition
	cancel context.CancelFunc
	done   chan struct{}
}

func newSubscriptionRun(sub *Subscription, instance, cluster string, c Cluster, co coord.Coordinator, client *http.Client, log *slog.Logger, stats *subStats, dlog *deliveryLog, onDisable func(string)) (*subscriptionRun, error) {
	sign, err := newSigner(sub.Secrets)
	if err != nil {
		return nil, err
	}
	cfg := sub.Config
	r := &subscriptionRun{
		cfg: cfg, group: Group(cfg.Name), instance: instance, cluster: c, coord: co, client: client,
		builder:    &requestBuilder{cfg: cfg, cluster: cluster, sign: sign, render: c.Render},
		gate:       newGate(time.Duration(cfg.Retry.MinBackoffMs)*time.Millisecond, time.Duration(cfg.Retry.MaxBackoffMs)*time.Millisecond, cfg.Rate.MaxPerSecond),
		log:        log.With("subscription", cfg.Name),
		stats:      stats,
		dlog:       dlog,
		onDisable:  onDisable,
		disabled:   make(chan struct{}),
		resync:     make(chan struct{}, 1),
		statusKick: make(chan struct{}, 1),
		parts:      map[api.TopicPartition]*partRun{},
	}
	return r, nil
}

// disable stops sending and stores the disabled state with reason.
func (r *subscriptionRun) disable(reason string) {
	r.disableOnce.Do(func() {
		close(r.disabled)
		r.log.Warn("push subscription disabled", "reason", reason)
		r.onDisable(reason)
	})
}

// deliver sends one request and judges its answer. counts says whether a
// failure counts as an attempt against the records.
func (r *subscriptionRun) deliver(ctx context.Context, d *delivery) (outcome, bool) {
	t, err := r.gate.acquire(ctx)
	if err != nil {
		return outcome{verdict: unreachable, excerpt: err.Error()}, false
	}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(r.cfg.TimeoutMs)*time.Millisecond)
	defer cancel()
	began := time.Now()
	req, err := r.builder.build(rctx, d, began)
	if err != nil {
		r.gate.cancel(t)
		return outcome{verdict: refused, excerpt: err.Error()}, true
	}
	resp, err := r.client.Do(req)
	if ctx.Err() != nil {
		// Stopped while in flight (revoked, shutting down): the answer,
		// whatever it was, is not this owner's to act on.
		if resp != nil {
			resp.Body.Close()
		}
		r.gate.cancel(t)
		return outcome{verdict: unreachable, excerpt: ctx.Err().Error()}, false
	}
	out := judge(resp, err, time.Now(), len(d.recs) > 1 || r.cfg.Batch.MaxRecords > 1)
	out.took = time.Since(began)
	counts := r.gate.report(t, out, time.Duration(r.cfg.Retry.RetryAfterMaxMs)*time.Millisecond)
	r.stats.answered(out)
	down := r.gate.backingOff()
	r.stats.setBackingOff(down)
	if r.backingOff.Swap(down) != down {
		r.statusChanged()
	}
	return out, counts
}

// commit commits one partition's offset for this member.
func (r *subscriptionRun) commit(ctx context.Context, po api.PartitionOffset) error {
	m := r.member.Load()
	if m == nil {
		return api.Errorf(api.CodeUnknownMemberID, "the pusher has not joined")
	}
	err := r.cluster.Commit(ctx, r.group, api.CommitRequest{MemberID: m.id, MemberEpoch: m.epoch, Offsets: []api.PartitionOffset{po}})
	if err != nil {
		switch api.Classify(err).Code {
		case api.CodeFencedMemberEpoch, api.CodeUnknownMemberID, api.CodeFencedInstanceID:
			select {
			case r.resync <- struct{}{}:
			default:
			}
		}
	}
	return err
}

// run holds the membership until ctx ends: join, heartbeat, start and stop
// partition loops as grants come and go; then stop them (each commits what
// it delivered) and leave the group.
func (r *subscriptionRun) run(ctx context.Context) {
	sctx, cancelStatus := context.WithCancel(ctx)
	status := make(chan struct{})
	go func() {
		defer close(status)
		r.publishStatus(sctx)
	}()
	// The status node goes before the membership, so a group found empty
	// has no pusher status left either.
	stopStatus := func() {
		cancelStatus()
		<-status
	}
	defer stopStatus()
	defer r.stopAll()
	for ctx.Err() == nil {
		res, err := r.cluster.Join(ctx, r.group, api.JoinGroupRequest{
			Topics: r.cfg.Topics, InstanceID: r.instance, SessionTimeoutMs: sessionTimeout.Milliseconds(), AutoOffsetReset: api.ResetEarliest,
		})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("a pusher could not join its group; it tries again", "group", r.group, "err", err)
				_ = waitFor(ctx, nil, time.Second)
			}
			continue
		}
		r.member.Store(&memberInfo{id: res.MemberID, epoch: res.MemberEpoch})
		r.log.Info("pusher joined", "group", r.group, "member", res.MemberID, "partitions", len(res.Grants))
		r.hold(ctx, res.MemberID, res.Grants, time.Duration(res.HeartbeatIntervalMs)*time.Millisecond)
	}
	if m := r.member.Load(); m != nil {
		r.stopAll()
		stopStatus()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.cluster.Leave(lctx, r.group, m.id); err != nil {
			r.log.Debug("a pusher could not leave its group (its session expires)", "err", err)
		}
	}
}

// hold heartbeats as member id until ctx ends or the member is gone.
func (r *subscriptionRun) hold(ctx context.Context, id string, grants []api.PartitionGrant, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	r.sync(ctx, id, grants)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.resync:
		}
		r.checkOutage()
		hb, err := r.cluster.Heartbeat(ctx, r.group, id)
		if err != nil {
			switch api.Classify(err).Code {
			case api.CodeUnknownMemberID, api.CodeFencedInstanceID:
				r.log.Info("pusher lost its membership; it joins again", "err", err)
				r.stopAll()
				r.member.Store(nil)
				return
			}
			if ctx.Err() == nil {
				r.log.Debug("pusher heartbeat failed", "err", err)
			}
			continue
		}
		r.member.Store(&memberInfo{id: id, epoch: hb.MemberEpoch})
		r.sync(ctx, id, hb.Grants)
	}
}

// checkOutage disables the subscription once its endpoint has been down
// for outage.disable_after_ms.
func (r *subscriptionRun) checkOutage() {
	since, lastErr := r.gate.outage()
	limit := time.Duration(r.cfg.Outage.DisableAfterMs) * time.Millisecond
	if !since.IsZero() && time.Since(since) > limit {
		r.disable(fmt.Sprintf("the endpoint was unreachable for %s (last: %s)", limit, lastErr))
	}
}

// sync starts loops for new grants (and grants whose fence changed: a
// seek) and stops loops of partitions no longer granted.
func (r *subscriptionRun) sync(ctx context.Context, id string, grants []api.PartitionGrant) {
	want := map[api.TopicPartition]int64{}
	for _, g := range grants {
		want[api.TopicPartition{Topic: g.Topic, Partition: g.Partition}] = g.Fence
	}
	r.mu.Lock()
	var stop []*partRun
	for tp, pr := range r.parts {
		f, ok := want[tp]
		select {
		case <-pr.done:
			ok = false // it stopped (fenced): start it again below
		default:
		}
		if !ok || f != pr.p.fence {
			stop = append(stop, pr)
			delete(r.parts, tp)
		}
	}
	r.mu.Unlock()
	for _, pr := range stop {
		pr.cancel()
		<-pr.done
	}
	r.mu.Lock()
	missing := false
	for tp := range want {
		if r.parts[tp] == nil {
			missing = true
		}
	}
	r.mu.Unlock()
	if !missing {
		return
	}
	starts, err := r.cluster.Starts(ctx, r.group, id)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("a pusher could not read where its partitions start; it tries again", "err", err)
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range starts {
		fence, ok := want[st.TopicPartition]
		if !ok || r.parts[st.TopicPartition] != nil {
			continue
		}
		p := newPartition(r, st, fence)
		pctx, cancel := context.WithCancel(ctx)
		pr := &partRun{p: p, cancel: cancel, done: make(chan struct{})}
		r.parts[st.TopicPartition] = pr
		go func() {
			defer close(pr.done)
			err := p.run(pctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				r.log.Info("a push partition stopped", "topic", st.Topic, "partition", st.Partition, "err", err)
			}
		}()
	}
}

// stopAll stops every partition loop and waits for them.
func (r *subscriptionRun) stopAll() {
	r.mu.Lock()
	parts := r.parts
	r.parts = map[api.TopicPartition]*partRun{}
	r.mu.Unlock()
	for _, pr := range parts {
		pr.cancel()
	}
	for _, pr := range parts {
		<-pr.done
	}
}
