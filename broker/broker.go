// Package broker is the composition root of a broker node: its partitions,
// its controller duty, and its internal HTTP API (produce, fetch via sendfile,
// offsets, topic administration).
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/gogroup"
	"github.com/sluice-io/sluice/internal/httpserve"
	"github.com/sluice-io/sluice/internal/tlsfiles"
	"github.com/sluice-io/sluice/quota"
	"github.com/sluice-io/sluice/tier"
)

// Options configure a broker. Zero values take the documented defaults.
type Options struct {
	// ID is the broker's unique, positive ID. Required.
	ID int32
	// Listener serves the internal API; when nil the broker listens on Addr.
	Listener net.Listener
	// Addr is the listen address when Listener is nil. Default 127.0.0.1:0.
	Addr string
	// AdvertisedAddr is what other nodes dial; default the listener's
	// address. With TLS it is registered as https://AdvertisedAddr.
	AdvertisedAddr string
	// TLS, when set, serves the internal API over TLS only (TLS 1.2 at
	// least, certificates reloaded when they change); with a client CA and
	// RequireClientCert, only callers with a certificate that CA signed
	// (other brokers, gateways) get through the handshake. Fetches are
	// then copied through the TLS connection instead of sent with
	// sendfile. Default nil: plain HTTP.
	TLS *tlsfiles.Options
	// PeerTLS configures this broker's calls to other brokers (replication,
	// the controller's) over TLS: the CA that signs their certificates,
	// and the certificate presented when they ask for one (usually TLS's
	// own). Default nil: the system's roots, no client certificate.
	PeerTLS *tlsfiles.ClientOptions
	// DataDir holds the partitions' logs. Required unless FS is set.
	DataDir string
	// FS overrides the filesystem under DataDir (tests inject faults with it).
	FS commitlog.FS
	// Coord is the coordinator session; the broker does not close it. Required.
	Coord coord.Coordinator
	// RetentionCheckInterval is how often retention runs. Default 5 minutes
	// (Kafka's log.retention.check.interval.ms).
	RetentionCheckInterval time.Duration
	// CleanerInterval is how often the log cleaner looks at the partitions of
	// compacted topics. Default 15 s (Kafka's log.cleaner.backoff.ms);
	// negative turns the cleaner off.
	CleanerInterval time.Duration
	// MaxRequestBytes bounds a produce body. Default 64 MiB.
	MaxRequestBytes int64
	// ReplicaLagTimeMax: a follower that has not caught up for this long
	// leaves the ISR. Default 10 s (Kafka's replica.lag.time.max.ms is 30 s).
	ReplicaLagTimeMax time.Duration
	// OffsetsTopicPartitions is the partition count of __consumer_offsets
	// when a Kafka client's first group request makes this broker create
	// it (the gateways' --offsets-topic-partitions when they make it).
	// Default 50.
	OffsetsTopicPartitions int
	// MinFreeBytes and MinFreePercent set the data directory's low-space
	// watermark: the larger of MinFreeBytes and MinFreePercent of the
	// filesystem. Below it the broker refuses leader appends (a retriable
	// STORAGE_ERROR) and hands its replicas over as it does failed logs,
	// before a write fails half-way on a full disk. Defaults 256 MiB and
	// 1; MinFreeBytes -1 turns the watermark off.
	MinFreeBytes   int64
	MinFreePercent float64
	// FreeSpace reports the data directory's free and total bytes. Default:
	// statfs of DataDir; a broker on Options.FS without a DataDir has no
	// watermark unless this is set.
	FreeSpace func() (free, total uint64, err error)
	// FailedLogRecheck is the first wait before the disk of a failed log is
	// probed to open the log again; it doubles per failed probe, up to
	// 20 s. Default 5 s.
	FailedLogRecheck time.Duration
	// SessionTimeout is the coordinator session timeout; a broker cut off from
	// the coordinator this long stops acknowledging writes as leader, since
	// the controller may have moved leadership. Default 6 s.
	SessionTimeout time.Duration
	// LeaderRebalanceInterval is how often the controller moves leadership
	// back to preferred replicas. Default 10 s; negative turns it off.
	LeaderRebalanceInterval time.Duration
	// Bucket is the object store for tiered topics; nil keeps every topic
	// local only (remote.storage.enable is then ignored).
	Bucket tier.Bucket
	// TierPrefix is prepended to every object key (e.g. "cluster-a/"). Default "".
	TierPrefix string
	// TierInterval is how often closed segments are copied and local copies
	// trimmed. Default 5 s.
	TierInterval time.Duration
	// OrphanGrace is how old an object no record names must be before the
	// orphan sweep deletes it: longer than any upload. Default 10 minutes.
	OrphanGrace time.Duration
	// ColdRead tunes reads served from the object store.
	ColdRead tier.ColdReaderOptions
	// RemoteCacheBytes bounds the disk cache of remote segments read back
	// (DataDir/remote-cache, unless ColdRead.DiskCacheDir says otherwise):
	// a segment read again is served from there with sendfile. Default 0:
	// no disk cache, the memory one only (`sluice broker` and `sluice dev`
	// default to 1 GiB).
	RemoteCacheBytes int64
	// PeerAddresses overrides the registered address of other brokers when
	// this one dials them (address translation, proxies). Default none.
	PeerAddresses map[int32]string
	// OpenSegmentFiles bounds the segment file descriptors this broker's
	// partitions keep open between uses, all together (commitlog.FilePool):
	// an idle partition holds none of its own, and more open only while
	// more are in use at once. Default commitlog.DefaultMaxOpenFiles (1,024).
	OpenSegmentFiles int
	// MaxPartitionsPerBroker bounds the partition replicas any broker may
	// hold: the controller refuses a topic creation past it
	// (POLICY_VIOLATION). Default api.DefaultMaxPartitionsPerBroker (4,000);
	// negative: no bound.
	MaxPartitionsPerBroker int
	// MaxGroupsPerCoordinator bounds the consumer groups each group
	// coordinator here holds (max.groups.per.coordinator): a join or
	// offset reset that would create one more is TOO_MANY_GROUPS. Default
	// api.DefaultMaxGroupsPerCoordinator (10,000).
	MaxGroupsPerCoordinator int
	// MaxFetchSessions bounds the replication fetch sessions this broker
	// holds as a leader, one per follower stream; past it a new session
	// evicts the least recently used. Default DefaultMaxFetchSessions (1,000).
	MaxFetchSessions int
	// GroupLagInterval is how often the group coordinators here measure
	// their groups' lag for the metrics. Default 10 s.
	GroupLagInterval time.Duration
	// CrashOnPanic re-raises a panic in a background loop or a replication stream
	// after logging it, instead of recovering and starting the loop again
	// (a panicking request is answered INTERNAL either way). Default false;
	// tests set it so that a bug fails them.
	CrashOnPanic bool
	// ClusterSecret, when set, is shared by every broker and gateway of the
	// cluster: this broker signs its calls with it and refuses internal
	// requests not signed with it, and a replication fetch must come from
	// the broker it names. Default none: the internal API is open to
	// whoever reaches it, unless TLS has a client CA, whose verified
	// certificates then name the calling nodes by their common name
	// (broker:<id>, gateway) for the same checks.
	ClusterSecret []byte
	// Auth checks the ACLs again for the principal a gateway names (see
	// AuthOptions). Default: off.
	Auth AuthOptions
	// Kafka serves Kafka's wire protocol (see KafkaOptions). Default: off.
	Kafka KafkaOptions
	// Logger default slog.Default().
	Logger *slog.Logger
}

func (o *Options) validate() error {
	if o.ID <= 0 {
		return errors.New("broker: ID must be positive")
	}
	if o.Coord == nil {
		return errors.New("broker: Coord is required")
	}
	if o.DataDir == "" && o.FS == nil {
		return errors.New("broker: DataDir is required")
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.RetentionCheckInterval == 0 {
		o.RetentionCheckInterval = 5 * time.Minute
	}
	if o.CleanerInterval == 0 {
		o.CleanerInterval = 15 * time.Second
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OffsetsTopicPartitions == 0 {
		o.OffsetsTopicPartitions = 50
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 256 << 20
	}
	if o.MinFreePercent == 0 {
		o.MinFreePercent = 1
	}
	if o.MinFreePercent < 0 || o.MinFreePercent > 50 {
		return fmt.Errorf("broker: MinFreePercent %v: want 0 to 50", o.MinFreePercent)
	}
	if o.FreeSpace == nil && o.DataDir != "" && o.FS == nil {
		dir := o.DataDir
		o.FreeSpace = func() (uint64, uint64, error) { return statfsFree(dir) }
	}
	if o.FailedLogRecheck == 0 {
		o.FailedLogRecheck = 5 * time.Second
	}
	if o.ReplicaLagTimeMax == 0 {
		o.ReplicaLagTimeMax = 10 * time.Second
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 6 * time.Second
	}
	if o.OrphanGrace == 0 {
		o.OrphanGrace = 10 * time.Minute
	}
	if o.TierInterval == 0 {
		o.TierInterval = 5 * time.Second
	}
	if o.MaxPartitionsPerBroker == 0 {
		o.MaxPartitionsPerBroker = api.DefaultMaxPartitionsPerBroker
	}
	if o.MaxGroupsPerCoordinator == 0 {
		o.MaxGroupsPerCoordinator = api.DefaultMaxGroupsPerCoordinator
	}
	if o.MaxFetchSessions <= 0 {
		o.MaxFetchSessions = DefaultMaxFetchSessions
	}
	if o.GroupLagInterval == 0 {
		o.GroupLagInterval = 10 * time.Second
	}
	if o.LeaderRebalanceInterval == 0 {
		o.LeaderRebalanceInterval = 10 * time.Second
	}
	return o.Auth.validate(len(o.ClusterSecret) > 0 || nodeCerts(o.TLS))
}

// Broker is one broker node.
type Broker struct {
	opts    Options
	log     *slog.Logger
	fs      commitlog.FS
	osfs    *commitlog.OSFS // closed on Close when the broker opened it
	view    *cluster.View
	parts   *manager
	ctl     *controller
	ln      net.Listener
	srv     *http.Server
	peers   *brokerapi.Client
	cold    *tier.ColdReader // nil without a bucket
	isrKick chan struct{}    // cap 1: a leader partition may need an ISR change
	// storageKick (cap 1) wakes the storage loop: a log failed. failed is
	// the loop's last scan of failed logs, which the registration carries;
	// failedRegistered is false until the registration holds it.
	storageKick      chan struct{}
	storageRecheck   chan struct{} // cap 1: probe every failed log's disk now
	failed           atomic.Pointer[[]api.FailedLog]
	lowSpace         atomic.Pointer[error] // the refusal while below the free-space watermark
	failedRegistered atomic.Bool
	recKick          chan struct{} // cap 1: reconcile now (a fence generation became live)
	groups           groupHost     // consumer-group coordinators of the __consumer_offsets partitions here
	topicNames       topicNames    // the topic set regular-expression subscriptions resolve against
	lag              groupLagState // their groups' lag as last measured, for the metrics
	traffic          traffic       // produce and consumer-fetch counters (stats route, metrics)
	// sessions are the replication fetch sessions of the followers that
	// fetch here (fetchsession.go).
	sessions *fetchSessions
	// streams are this broker's replication streams as a follower, one per
	// leader (streams.go).
	streams *streams
	quotas  brokerQuotas  // client quotas: the watched config and its buckets
	kafka   kafkaListener // the Kafka protocol listener (kafkabackend.go); zero when off

	authStore   *auth.Store // tokens, ACLs, SCRAM credentials, watched; nil unless Options.Auth.Required or a SASL Kafka listener
	authRefused authRefusals

	panicsMu sync.Mutex        // guards panics
	panics   map[string]uint64 // recovered panics by where (recover.go)

	// handBacks holds leaderships from before a restart, waiting for the
	// hand-back loop (resign.go).
	handBacks handBacks

	registered atomic.Bool
	// shuttingDown is set by Drain and never cleared: the registration
	// carries it, re-created or not, until the process stops.
	shuttingDown atomic.Bool
	// stopping is set by Drain once every leadership that could move has
	// moved, and never cleared; the registration carries it too.
	stopping atomic.Bool
	// handover runs closeForHandover once, before the mark is written;
	// concurrent Drains wait for it.
	handover sync.Once
	runCtx   context.Context // ends when Close begins
	cancel   context.CancelFunc

	goroutines gogroup.Group // what goFunc started; Close waits for it, after which goFunc starts nothing

	closeOnce sync.Once
}

// New opens the broker's data directory and listener. Start makes it serve.
func New(opts Options) (*Broker, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	b := &Broker{opts: opts, log: opts.Logger.With("broker", opts.ID), panics: map[string]uint64{}}
	b.fs = opts.FS
	if b.fs == nil {
		osfs, err := commitlog.NewOSFS(opts.DataDir)
		if err != nil {
			return nil, fmt.Errorf("broker: data dir: %w", err)
		}
		b.fs, b.osfs = osfs, osfs
	}
	var serverTLS, peerTLS, kafkaTLS *tls.Config
	if opts.TLS != nil {
		files, err := tlsfiles.New(*opts.TLS)
		if err != nil {
			b.closeFS()
			return nil, fmt.Errorf("broker: %w", err)
		}
		serverTLS, kafkaTLS = files.ServerConfig(), files.KafkaServerConfig()
	}
	if opts.PeerTLS != nil {
		cfg, err := opts.PeerTLS.Config()
		if err != nil {
			b.closeFS()
			return nil, fmt.Errorf("broker: calls to other brokers: %w", err)
		}
		peerTLS = cfg
	}
	b.ln = opts.Listener
	if b.ln == nil {
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			b.closeFS()
			return nil, fmt.Errorf("broker: listen: %w", err)
		}
		b.ln = ln
	}
	if b.opts.AdvertisedAddr == "" {
		b.opts.AdvertisedAddr = b.ln.Addr().String()
	}
	if err := b.openKafka(kafkaTLS); err != nil {
		b.ln.Close()
		b.closeFS()
		return nil, err
	}
	if serverTLS != nil {
		b.ln = tls.NewListener(b.ln, serverTLS)
		if !strings.Contains(b.opts.AdvertisedAddr, "://") {
			b.opts.AdvertisedAddr = "https://" + b.opts.AdvertisedAddr
		}
	}
	b.view = cluster.NewView(opts.Coord, b.log)
	if opts.Auth.Required || b.kafka.sasl {
		b.authStore = auth.NewStore(opts.Coord, b.log)
	}
	b.quotas.store = quota.NewStore(opts.Coord, b.log)
	b.quotas.enforcer = quota.NewEnforcer(b.quotas.store.Config, nil)
	b.peers = brokerapi.NewClient()
	if peerTLS != nil {
		b.peers.UseTLS(peerTLS)
	}
	if len(opts.ClusterSecret) > 0 {
		b.peers.Auth = &brokerapi.NodeAuth{Secret: opts.ClusterSecret, Node: brokerapi.BrokerNode(opts.ID)}
	}
	if opts.Bucket != nil {
		co := opts.ColdRead
		if co.Logger == nil {
			co.Logger = b.log
		}
		if co.DiskCacheBytes == 0 {
			co.DiskCacheBytes = opts.RemoteCacheBytes
		}
		if co.DiskCacheDir == "" && opts.DataDir != "" {
			co.DiskCacheDir = filepath.Join(opts.DataDir, "remote-cache")
		}
		b.cold = tier.NewColdReader(opts.Bucket, co)
	}
	b.isrKick = make(chan struct{}, 1)
	b.storageKick = make(chan struct{}, 1)
	b.storageRecheck = make(chan struct{}, 1)
	b.sessions = newFetchSessions(opts.MaxFetchSessions)
	b.handBacks.kick = make(chan struct{}, 1)
	b.recKick = make(chan struct{}, 1)
	b.groups.maxGroups = opts.MaxGroupsPerCoordinator
	b.streams = newStreams(opts.ID, b.peers, b.peerAddr, b.recovering)
	b.parts = newManager(opts.ID, b.fs, b.log, &partitionDeps{
		self: opts.ID, client: b.peers, log: b.log, peerAddr: b.peerAddr,
		follow: b.streams.follow, unfollow: b.streams.unfollow,
		inSyncable: func(id int32, topic string, partition int32) bool {
			reg, ok := b.view.Current().Brokers[id]
			_, failed := reg.FailedLog(topic, partition)
			return ok && !failed && !reg.ShuttingDown
		},
		resign:     b.resign,
		recovering: b.recovering,
		logFailed:  b.kickStorage,
		lowSpace:   b.lowSpaceRefusal,
		files:      commitlog.NewFilePool(opts.OpenSegmentFiles),
		kickISR: func() {
			select {
			case b.isrKick <- struct{}{}:
			default:
			}
		},
	})
	b.ctl = &controller{self: opts.ID, c: opts.Coord, view: b.view, log: b.log, rebalanceEvery: opts.LeaderRebalanceInterval, sweep: b.sweepTopic,
		maxPartitionsPerBroker: opts.MaxPartitionsPerBroker}
	b.srv = &http.Server{
		Handler:           b.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		// Produce bodies are bounded by MaxRequestBytes; a minute covers them.
		ReadTimeout: time.Minute,
		// Fetch long polls set per-request write deadlines.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(b.log.Handler(), slog.LevelWarn),
	}
	httpserve.CloseSilentConnsOnShutdown(b.srv)
	return b, nil
}

// PartitionLog returns the local log of a partition replica, or nil when this
// broker holds none (for tests and tools that inspect replicas).
func (b *Broker) PartitionLog(topic string, partition int32) *commitlog.Log {
	b.parts.mu.RLock()
	defer b.parts.mu.RUnlock()
	if p := b.parts.parts[topicPartition{topic, partition}]; p != nil {
		return p.log
	}
	return nil
}

// Handler is the internal API's handler (the server serves it on Addr).
func (b *Broker) Handler() http.Handler { return b.srv.Handler }

// peerAddr is the address to dial broker id at: an override, else its registration.
func (b *Broker) peerAddr(id int32) (string, bool) {
	if a, ok := b.opts.PeerAddresses[id]; ok {
		return a, true
	}
	reg, ok := b.view.Current().Brokers[id]
	return reg.Address, ok
}

// Addr is the address other nodes use to reach this broker, as registered:
// host:port, or https://host:port when the listener has TLS.
func (b *Broker) Addr() string { return b.opts.AdvertisedAddr }

// ID is the broker's ID.
func (b *Broker) ID() int32 { return b.opts.ID }

// Start registers the broker and starts its goroutines: the HTTP server, the
// metadata view, the partition reconciler, the controller election and the
// retention loop. Close stops them.
func (b *Broker) Start(ctx context.Context) error {
	for _, p := range []string{cluster.BrokersIDsPath, cluster.TopicsPath} {
		if err := coord.EnsurePath(ctx, b.opts.Coord, p); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	b.runCtx, b.cancel = runCtx, cancel
	b.view.Start()
	if b.authStore != nil {
		b.authStore.Start()
	}
	b.quotas.store.Start()
	b.goFunc(func() {
		if err := b.srv.Serve(b.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("internal API stopped", "err", err)
		}
	})
	b.startKafka()
	// The loops start again after a panic (recover.go).
	changed := b.view.Subscribe() // once: a restarted reconcile loop keeps it
	b.goLoop(runCtx, "register", b.registerLoop)
	b.goLoop(runCtx, "reconcile", func(ctx context.Context) { b.reconcileLoop(ctx, changed) })
	b.goLoop(runCtx, "controller", b.controllerLoop)
	b.goLoop(runCtx, "retention", b.retentionLoop)
	b.goLoop(runCtx, "cleaner", b.cleanerLoop)
	b.goLoop(runCtx, "isr", b.isrLoop)
	b.goLoop(runCtx, "storage", b.storageLoop)
	b.goLoop(runCtx, "resign", b.resignLoop)
	b.goLoop(runCtx, "hw-checkpoint", b.hwCheckpointLoop)
	if b.opts.Bucket != nil {
		b.goLoop(runCtx, "tier", b.tierLoop)
	}
	b.goLoop(runCtx, "session", b.sessionLoop)
	b.goLoop(runCtx, "group", b.groupLoop)
	b.goLoop(runCtx, "group-lag", b.groupLagLoop)
	// Ready means registered and holding metadata: then the controller can
	// assign replicas here and gateways can route to it.
	for !b.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// goFunc starts a goroutine the broker owns and waits for in Close. Once
// Close has begun to wait it starts nothing and reports false: the broker
// is stopping, and what f would do is either moot or redone at the next
// start (a resignation, a deleted topic's object sweep, a loop's restart
// after a panic).
func (b *Broker) goFunc(f func()) bool {
	return b.goroutines.Go(f)
}

// registerLoop keeps /brokers/ids/{id} present: it creates it, then re-creates it
// whenever it disappears (the session expired and a new one began).
func (b *Broker) registerLoop(ctx context.Context) {
	path := cluster.BrokerPath(b.opts.ID)
	for ctx.Err() == nil {
		_, err := b.opts.Coord.Create(ctx, path, b.registration(), coord.Ephemeral)
		if errors.Is(err, coord.ErrNodeExists) {
			// Ours from this session, or a previous session's not yet expired.
			_, st, gerr := b.opts.Coord.Get(ctx, path)
			if gerr == nil && st.EphemeralOwner != b.opts.Coord.SessionID() {
				b.log.Warn("another session holds this broker ID; waiting for it to expire")
				sleep(ctx, time.Second)
				continue
			}
			err = gerr
		}
		if err != nil {
			b.registered.Store(false)
			if ctx.Err() == nil {
				b.log.Warn("broker registration failed; retrying", "err", err)
			}
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		b.registered.Store(true)
		fn, ch := coord.WatchChan()
		exists, _, err := b.opts.Coord.ExistsW(ctx, path, fn)
		if err != nil || !exists {
			b.registered.Store(false)
			continue
		}
		select {
		case <-ch:
			b.registered.Store(false)
		case <-ctx.Done():
		}
	}
}

// reconcileLoop applies every new metadata snapshot to the local partitions,
// and applies the current one again when the session loop asks (after a
// fence generation became live). It is the only caller of manager.reconcile.
func (b *Broker) reconcileLoop(ctx context.Context, changed <-chan struct{}) {
	select {
	case <-b.view.Loaded():
	case <-ctx.Done():
		return
	}
	for {
		// The generation first: a fence that comes after it makes this
		// snapshot too old to lift it, whenever the snapshot was taken.
		gen := b.parts.liveGeneration()
		b.parts.reconcile(b.view.Current(), gen)
		select {
		case <-changed:
		case <-b.recKick:
		case <-ctx.Done():
			return
		}
	}
}

// kickReconcile asks the reconcile loop for a pass over the current snapshot.
func (b *Broker) kickReconcile() {
	select {
	case b.recKick <- struct{}{}:
	default:
	}
}

// controllerLoop runs the controller election and duty. When the duty
// panics, the role is given up first (controller.abdicate), so that the
// restarted loop, or another broker, can take it: a holder of /controller
// that no longer serves would leave the cluster without a controller.
func (b *Broker) controllerLoop(ctx context.Context) {
	returned := false
	defer func() {
		if !returned {
			b.ctl.abdicate()
		}
	}()
	b.ctl.run(ctx)
	returned = true
}

// retentionLoop applies retention to every partition on an interval.
func (b *Broker) retentionLoop(ctx context.Context) {
	every(ctx, b.opts.RetentionCheckInterval, b.ApplyRetention)
}

// every calls f every d until ctx ends (the first call after d).
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f()
		case <-ctx.Done():
			return
		}
	}
}

// hwCheckpointLoop writes every partition's HW checkpoint every 5 s (Kafka's
// replica.high.watermark.checkpoint.interval.ms), so a broker restarted after
// a crash serves reads up to nearly where it was before its followers report.
func (b *Broker) hwCheckpointLoop(ctx context.Context) {
	every(ctx, 5*time.Second, func() {
		for _, p := range b.parts.all() {
			if err := p.log.CheckpointHW(); err != nil {
				b.log.Error("HW checkpoint failed", "partition", p.String(), "err", err)
			}
		}
	})
}

// ApplyRetention runs retention on every partition now.
func (b *Broker) ApplyRetention() {
	for _, p := range b.parts.all() {
		if n := p.log.ExpireProducers(); n > 0 {
			b.log.Info("expired idle producer ids", "partition", p.String(), "producers", n)
		}
		if p.config().RemoteStorage && b.opts.Bucket != nil {
			continue // retention of tiered partitions runs in the tier loop
		}
		if n, err := p.log.ApplyRetention(); err != nil {
			b.log.Error("retention failed", "partition", p.String(), "err", err)
		} else if n > 0 {
			b.log.Info("retention deleted segments", "partition", p.String(), "segments", n)
		}
	}
}

// Ready reports whether the broker can serve: registered and with metadata.
func (b *Broker) Ready() bool {
	select {
	case <-b.view.Loaded():
	default:
		return false
	}
	return b.registered.Load()
}

// Close stops the broker. Order: stop taking requests, HTTP and Kafka (in-flight
// ones finish, long polls end at their deadline or in 5 s), stop the background loops, close
// the metadata view, then flush and close every log (marking it clean).
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if serr := b.srv.Shutdown(ctx); serr != nil {
			b.srv.Close()
		}
		b.closeKafka() // its requests under way are answered first (5 s at most)
		if b.cancel != nil {
			b.cancel()
		}
		b.view.Close()
		if b.authStore != nil {
			b.authStore.Close()
		}
		b.quotas.store.Close()
		b.goroutines.Close() // from here goFunc starts nothing

		if b.cold != nil {
			b.cold.Close()
		}
		b.streams.close() // no follower changes a log from here
		err = b.parts.closeAll()
		b.peers.Close()
		b.closeFS()
	})
	return err
}

// closeFS closes the data directory's handle; the files in it are closed
// (and synced) by their logs, so there is nothing to flush here.
func (b *Broker) closeFS() {
	if b.osfs != nil {
		_ = b.osfs.Close()
	}
}
