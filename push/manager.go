package push

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/gogroup"
	"github.com/sluice-io/sluice/recordbatch"
)

// ManagerOptions configure the pushers of one gateway.
type ManagerOptions struct {
	Coord   coord.Coordinator // required
	Cluster Cluster           // required
	// Instance is this gateway's static member id in every push group:
	// a gateway that restarts under the same id takes its partitions back
	// at once. Required.
	Instance string
	// ClusterName names the cluster in ce-source (sluice://<name>/...).
	// Default "sluice".
	ClusterName string
	// AllowPrivate lets endpoints resolve to loopback, private and
	// link-local addresses (--push-allow-private). Default false.
	AllowPrivate bool
	// Metrics default: unregistered.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Manager runs a pusher for every active subscription, and restarts it
// when its settings change.
//
// Goroutines: the store's watcher (Store); loop (Start → Close), which
// reconciles the running pushers with the store after each change; one
// run per active subscription, started and stopped by loop; the delivery
// log's writer; short disable writes. All are owned by goroutines and waited for in Close.
type Manager struct {
	opts   ManagerOptions
	log    *slog.Logger
	store  *Store
	client *http.Client
	wake   chan struct{}
	dlog   *deliveryLog

	ctx    context.Context
	cancel context.CancelFunc
	group  gogroup.Group

	mu   sync.Mutex // guards runs
	runs map[string]*runHandle
}

type runHandle struct {
	run    *subscriptionRun
	rev    int64 // the subscription's UpdatedMs the run was started with
	cancel context.CancelFunc
	done   chan struct{}
}

// NewManager returns a manager; Start begins watching and pushing.
func NewManager(opts ManagerOptions) *Manager {
	if opts.ClusterName == "" {
		opts.ClusterName = "sluice"
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{opts: opts, log: opts.Logger, client: NewHTTPClient(opts.AllowPrivate), wake: make(chan struct{}, 1), runs: map[string]*runHandle{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.store = NewStore(opts.Coord, opts.Logger, m.changed)
	m.dlog = newDeliveryLog(opts.Cluster, opts.Instance, opts.Metrics, opts.Logger)
	return m
}

// Store is the subscriptions' store.
func (m *Manager) Store() *Store { return m.store }

// AllowPrivate reports whether endpoints may be private addresses.
func (m *Manager) AllowPrivate() bool { return m.opts.AllowPrivate }

func (m *Manager) changed() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Start starts watching the store and the pushers it asks for.
func (m *Manager) Start() {
	m.store.Start()
	m.group.Go(m.loop)
	m.group.Go(func() { m.dlog.run(m.ctx) })
}

// Close stops every pusher (each commits what it delivered and leaves its
// group), then the watcher.
func (m *Manager) Close() {
	m.cancel()
	m.group.Close()
	m.store.Close()
	m.client.CloseIdleConnections()
}

func (m *Manager) loop() {
	defer m.stopAll()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.wake:
		}
		m.reconcile()
	}
}

// reconcile starts pushers for active subscriptions that have none (or
// whose settings changed since theirs started) and stops the others.
func (m *Manager) reconcile() {
	want := map[string]*Subscription{}
	for _, sub := range m.store.All() {
		if sub.State == api.PushActive {
			want[sub.Config.Name] = sub
		}
	}
	m.mu.Lock()
	var stop []*runHandle
	for name, h := range m.runs {
		sub, ok := want[name]
		select {
		case <-h.done:
			ok = false
		default:
		}
		if !ok || sub.UpdatedMs != h.rev {
			stop = append(stop, h)
			delete(m.runs, name)
			if _, still := m.store.Get(name); !still {
				h.run.stats.forget()
			}
		}
	}
	m.mu.Unlock()
	for _, h := range stop {
		h.cancel()
		<-h.done
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, sub := range want {
		if m.runs[name] != nil {
			continue
		}
		stats := m.opts.Metrics.forSubscription(name)
		run, err := newSubscriptionRun(sub, m.opts.Instance, m.opts.ClusterName, m.opts.Cluster, m.opts.Coord, m.client, m.log, stats, m.dlog,
			func(reason string) { m.disable(name, reason) })
		if err != nil {
			m.log.Error("a push subscription cannot run", "subscription", name, "err", err)
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		h := &runHandle{run: run, rev: sub.UpdatedMs, cancel: cancel, done: make(chan struct{})}
		m.runs[name] = h
		if !m.group.Go(func() {
			defer close(h.done)
			run.run(ctx)
		}) {
			close(h.done)
		}
	}
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	runs := m.runs
	m.runs = map[string]*runHandle{}
	m.mu.Unlock()
	for _, h := range runs {
		h.cancel()
	}
	for _, h := range runs {
		<-h.done
	}
}

// disable stores a subscription's disabled state (after a 410, or an
// outage longer than its outage.disable_after_ms).
func (m *Manager) disable(name, reason string) {
	m.group.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 30*time.Second)
		defer cancel()
		_, err := m.store.Update(ctx, name, func(s *Subscription) error {
			if s.State != api.PushActive {
				return errNoChange
			}
			s.State, s.Reason, s.UpdatedMs = api.PushDisabled, reason, time.Now().UnixMilli()
			return nil
		})
		if err != nil {
			m.log.Error("a push subscription could not be disabled", "subscription", name, "reason", reason, "err", err)
		}
	})
}

// Status returns the live status of every running pusher of name, on
// every gateway.
func (m *Manager) Status(ctx context.Context, name string) ([]PusherStatus, error) {
	return ReadStatus(ctx, m.opts.Coord, name)
}

// RemoveStatus deletes a deleted subscription's status directory (best
// effort).
func (m *Manager) RemoveStatus(ctx context.Context, name string) {
	removeStatusDir(ctx, m.opts.Coord, name)
}

// TestResult is the answer of one synthetic delivery.
type TestResult struct {
	Status    int    `json:"status"` // 0: no answer
	Verdict   string `json:"verdict"`
	LatencyMs int64  `json:"latency_ms"`
	Response  string `json:"response,omitempty"` // the start of the answer's body, or the error
}

// Test sends one signed synthetic event to the subscription's endpoint,
// outside its delivery (no gate, no retry, nothing committed).
func (m *Manager) Test(ctx context.Context, sub *Subscription) (TestResult, error) {
	sign, err := newSigner(sub.Secrets)
	if err != nil {
		return TestResult{}, err
	}
	b := &requestBuilder{cfg: sub.Config, cluster: m.opts.ClusterName, sign: sign, render: m.opts.Cluster.Render}
	now := time.Now()
	rec := recordbatch.Record{Offset: 0, Timestamp: now.UnixMilli(), Value: []byte(`{"test":true}`),
		Headers: []recordbatch.RecordHeader{{Key: CEHeaderPrefix + "type", Value: []byte("sluice.push.test")}}}
	d := &delivery{tp: api.TopicPartition{Topic: sub.Config.Topics[0], Partition: -1}, recs: []*recordbatch.Record{&rec}, attempt: 1,
		id: sub.Config.Name + ".test." + now.UTC().Format("20060102T150405.000000000")}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(sub.Config.TimeoutMs)*time.Millisecond)
	defer cancel()
	req, err := b.build(rctx, d, now)
	if err != nil {
		return TestResult{}, err
	}
	resp, err := m.client.Do(req)
	o := judge(resp, err, time.Now(), false)
	o.took = time.Since(now)
	status := api.DeliveryDelivered
	if o.verdict != delivered {
		status = api.DeliveryFailed
	}
	m.dlog.record(sub.Config.Name, d.tp, -1, 1, o, status)
	return TestResult{Status: o.status, Verdict: o.verdict.String(), LatencyMs: time.Since(now).Milliseconds(), Response: o.excerpt}, nil
}
