// Package gateway is Sluice's public HTTP and WebSocket API. A gateway is
// stateless: it reads cluster metadata from the coordinator (watched), turns
// produce requests into record batches for partition leaders, and relays or
// decodes fetches. Any number of gateways can serve the same cluster.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/gogroup"
	"github.com/sluice-io/sluice/internal/httpserve"
	"github.com/sluice-io/sluice/internal/tlsfiles"
	"github.com/sluice-io/sluice/push"
	"github.com/sluice-io/sluice/quota"
	"github.com/sluice-io/sluice/web"
)

// Options configure a gateway. Zero values take the documented defaults.
type Options struct {
	// Listener serves the public API; when nil the gateway listens on Addr.
	Listener net.Listener
	// Addr default 127.0.0.1:8080.
	Addr string
	// Coord is the coordinator session for metadata; not closed by the gateway.
	Coord coord.Coordinator
	// MaxBodyBytes bounds a JSON or NDJSON produce body
	// (max.request.bytes). Default 32 MiB.
	MaxBodyBytes int64
	// Limits bound records, headers, produce memory and acks=0 sends;
	// zero fields take the defaults in api/limits.go.
	Limits Limits
	// Streams bound write times and WebSocket connections, pings and
	// idle clients; zero fields take the defaults in api/limits.go.
	Streams StreamLimits
	// Version is reported by GET /v1/cluster.
	Version string
	// OpenAPI is served at GET /openapi.yaml.
	OpenAPI []byte
	// OffsetsTopicPartitions is the partition count of __consumer_offsets
	// when a gateway creates it, on the first group request
	// (offsets.topic.num.partitions). Default 50.
	OffsetsTopicPartitions int
	// TLS, when set, serves the public API over TLS (TLS 1.2 at least).
	TLS *TLSOptions
	// BrokerTLS configures calls to brokers whose listeners have TLS: the
	// cluster CA that signs their certificates and the certificate shown
	// to brokers that require one. Default nil: the system's roots, no
	// client certificate (brokers registered with https:// are still
	// called over TLS).
	BrokerTLS *tlsfiles.ClientOptions
	// ClusterSecret, when set, signs every call to a broker (the brokers'
	// --cluster-secret). Default none.
	ClusterSecret []byte
	// Auth configures tokens and ACLs; the zero value lets everyone do
	// everything (the embedded default).
	Auth AuthOptions
	// AllowedOrigins are the web origins (scheme://host[:port]) besides the
	// gateway's own whose pages may open WebSockets and send requests that
	// change state; AllowedHosts are the names clients reach the gateway
	// by, besides the hosts of AllowedOrigins, localhost and IP addresses.
	// Either list turns both checks on (a Host that is not a name of the
	// gateway is refused with 403 HOST_NOT_ALLOWED, an Origin not allowed
	// with 403 ORIGIN_NOT_ALLOWED). Default none: the WebSocket handshake
	// only compares Origin with Host.
	AllowedOrigins, AllowedHosts []string
	// PushAllowPrivate lets push subscriptions' endpoints be loopback,
	// private or link-local addresses (--push-allow-private). Default
	// false: such endpoints are refused (ENDPOINT_NOT_ALLOWED) and no push
	// connects to one.
	PushAllowPrivate bool
	// PushInstance is the gateway's static member id in push groups.
	// Default gw-<host name>-<listen address>.
	PushInstance string
	// ClusterName names the cluster in the ce-source of pushed events
	// (sluice://<name>/topics/<topic>). Default "sluice".
	ClusterName string
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Gateway serves the public API.
type Gateway struct {
	opts       Options
	log        *slog.Logger
	view       *cluster.View
	brokers    *brokerapi.Client
	splice     *brokerapi.SpliceFetcher // raw fetches relayed with splice
	ln         net.Listener
	srv        *http.Server
	sticky     stickyPartitioner
	producers  producerEpochs
	metrics    *gatewayMetrics
	limits     Limits     // opts.Limits with defaults
	mem        *memBudget // produce memory (gateway.produce.memory.bytes)
	acks0      sendSlots  // acks=0 background sends (gateway.acks0.max.in.flight)
	sends      *coalescer // produce sends, coalesced per partition
	wsConns    *wsConns   // open WebSockets: limits, pings, shutdown
	tails      *tails     // shared long polls of WebSocket streams at their partition's end
	auth       AuthOptions
	authStore  *auth.Store   // tokens and ACLs, watched
	origins    *originGuard  // nil: no Origin or Host allow-list
	quotas     *quota.Store  // client quotas, watched (enforced by the brokers)
	quotaStats *quotaStats   // THROTTLED answers and stream waits per principal
	pushers    *push.Manager // push subscriptions: the store, and this gateway's pushers

	ctx    context.Context // ends at Close; parent of background work
	cancel context.CancelFunc
	// goroutines owns the server and the background work (acks=0 sends,
	// coalesced sends, shared tail polls); Close waits for it, after which
	// goFunc starts nothing.
	goroutines gogroup.Group
}

// New builds a gateway and opens its listener; Start makes it serve.
func New(opts Options) (*Gateway, error) {
	if opts.Coord == nil {
		return nil, errors.New("gateway: Coord is required")
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:8080"
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = api.DefaultMaxRequestBytes
	}
	if opts.MaxBodyBytes < 0 {
		return nil, errors.New("gateway: negative MaxBodyBytes")
	}
	limits, err := opts.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	streams, err := opts.Streams.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	authOpts, err := opts.Auth.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.OffsetsTopicPartitions == 0 {
		opts.OffsetsTopicPartitions = 50
	}
	origins, err := newOriginGuard(opts.AllowedOrigins, opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	g := &Gateway{opts: opts, log: opts.Logger.With("component", "gateway"), metrics: newGatewayMetrics(),
		limits: limits, mem: &memBudget{limit: limits.ProduceMemoryBytes}, acks0: make(sendSlots, limits.Acks0MaxInFlight),
		origins: origins}
	g.metrics.reg.MustRegister(g.limitCollectors()...)
	g.wsConns = newWSConns(streams)
	g.metrics.reg.MustRegister(g.wsConns.collectors()...)
	g.tails = newTails(g)
	g.metrics.reg.MustRegister(g.tails.collectors()...)
	var tlsConfig *tls.Config
	if opts.TLS != nil {
		files, err := tlsfiles.New(*opts.TLS)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		tlsConfig = files.ServerConfig()
	}
	var brokerTLS *tls.Config
	if opts.BrokerTLS != nil {
		if brokerTLS, err = opts.BrokerTLS.Config(); err != nil {
			return nil, fmt.Errorf("gateway: calls to brokers: %w", err)
		}
	}
	g.ln = opts.Listener
	if g.ln == nil {
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, err
		}
		g.ln = ln
	}
	if tlsConfig != nil {
		g.ln = tls.NewListener(g.ln, tlsConfig)
	}
	g.view = cluster.NewView(opts.Coord, g.log)
	g.auth = authOpts
	g.authStore = auth.NewStore(opts.Coord, g.log)
	g.quotas = quota.NewStore(opts.Coord, g.log)
	g.quotaStats = newQuotaStats()
	g.metrics.reg.MustRegister(g.quotaStats)
	g.brokers = brokerapi.NewClient()
	if brokerTLS != nil {
		g.brokers.UseTLS(brokerTLS)
	}
	g.brokers.OnThrottle = g.quotaStats.onThrottle
	if len(opts.ClusterSecret) > 0 {
		g.brokers.Auth = &brokerapi.NodeAuth{Secret: opts.ClusterSecret, Node: brokerapi.NodeGateway}
	}
	g.splice = brokerapi.NewSpliceFetcher(g.brokers)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.sends = newCoalescer(g)
	g.srv = &http.Server{
		Handler:           g.Routes(),
		ReadHeaderTimeout: min(10*time.Second, limits.ReadTimeout),
		// Bodies are bounded by MaxBodyBytes. No WriteTimeout: fetch and
		// group poll handlers set a deadline of their long poll plus
		// gateway.write.timeout.ms, and WebSockets one per frame.
		ReadTimeout:    limits.ReadTimeout,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	httpserve.CloseSilentConnsOnShutdown(g.srv)
	g.pushers = push.NewManager(push.ManagerOptions{
		Coord: opts.Coord, Cluster: pushCluster{g}, Instance: pushInstance(opts, g.ln.Addr().String()),
		ClusterName: opts.ClusterName, AllowPrivate: opts.PushAllowPrivate,
		Metrics: push.NewMetrics(g.metrics.reg), Logger: g.log,
	})
	return g, nil
}

// Addr is the address the gateway listens on.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Start begins watching metadata and serving.
func (g *Gateway) Start() {
	g.view.Start()
	g.authStore.Start()
	g.quotas.Start()
	g.pushers.Start()
	g.goFunc(func() {
		if err := g.srv.Serve(g.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("public API stopped", "err", err)
		}
	})
}

// goFunc starts a goroutine the gateway owns and waits for in Close. Once
// Close has begun to wait it starts nothing and reports false; a caller
// whose work must still happen does it itself.
func (g *Gateway) goFunc(f func()) bool { return g.goroutines.Go(f) }

// Close stops the gateway. Order: refuse new WebSockets and close the open
// ones with 1001, stop accepting and let in-flight requests finish (5 s at
// most), wait for the WebSocket handlers (15 s at most), end background
// pushers (each commits and leaves its group), end background
// work (acks=0 sends are cancelled and waited for), stop the metadata view,
// drop idle broker connections.
func (g *Gateway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// WebSockets first: new upgrades are refused and every stream closes
	// with 1001 (going away) while the server drains, so their clients
	// reconnect elsewhere at once. net/http does not track them (hijacked).
	g.wsConns.shutdown()
	err := g.srv.Shutdown(ctx)
	if err != nil {
		g.srv.Close()
	}
	// Their handlers end after a close handshake (10 s at most) and, for
	// group members, a leave (5 s), which needs g.ctx: wait before
	// cancelling it.
	if !g.wsConns.wait(15 * time.Second) {
		g.log.Warn("WebSocket handlers still running after shutdown")
	}
	// Pushers commit what they delivered and leave their groups, so
	// their partitions move to another gateway at once.
	g.pushers.Close()
	g.cancel()
	g.goroutines.Close() // from here goFunc starts nothing
	g.authStore.Close()
	g.quotas.Close()
	g.view.Close()
	g.splice.Close()
	g.brokers.Close()
	return err
}

// Routes is the public router. openapi.yaml lists exactly these routes; a test
// checks it.
func (g *Gateway) Routes() http.Handler {
	r := chi.NewRouter()
	r.Use(g.recoverer, g.guardOrigins, g.authenticate, g.withClientID)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		apihttp.WriteError(w, api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		apihttp.WriteError(w, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	})
	r.Get("/healthz", g.handleHealthz)
	r.Get("/readyz", g.handleReadyz)
	r.Get("/openapi.yaml", g.handleOpenAPI)
	r.Method(http.MethodGet, "/metrics", g.metrics.handler())
	// Each /v1/ route maps to one authorization check (DESIGN.md, "Who may
	// do what"); routes whose resource is in the body check in the handler.
	var (
		topic   = func(op auth.Operation) func(http.Handler) http.Handler { return g.check(op, auth.ResourceTopic) }
		group   = func(op auth.Operation) func(http.Handler) http.Handler { return g.check(op, auth.ResourceGroup) }
		cluster = func(op auth.Operation) func(http.Handler) http.Handler { return g.check(op, auth.ResourceCluster) }
	)
	r.With(cluster(auth.OpDescribe)).Get("/v1/cluster", g.handleCluster)
	r.Get("/v1/topics", g.handleListTopics)   // lists what the caller may DESCRIBE
	r.Post("/v1/topics", g.handleCreateTopic) // CREATE on the topic named in the body, or on the cluster
	r.With(topic(auth.OpDescribe)).Get("/v1/topics/{topic}", g.handleGetTopic)
	r.With(topic(auth.OpDelete)).Delete("/v1/topics/{topic}", g.handleDeleteTopic)
	r.With(topic(auth.OpAlterConfigs)).Patch("/v1/topics/{topic}/configs", g.handleAlterTopicConfig)
	r.With(topic(auth.OpAlter)).Post("/v1/topics/{topic}/partitions", g.handleCreatePartitions)
	r.With(topic(auth.OpWrite)).Post("/v1/topics/{topic}/records", g.handleProduce)
	r.Post("/v1/producers", g.handleInitProducer) // WRITE on the cluster or on any topic; a bump, by the id's owner

	r.With(topic(auth.OpRead)).Get("/v1/topics/{topic}/partitions/{partition}/records", g.handleFetchRecords)
	r.With(topic(auth.OpRead)).Get("/v1/topics/{topic}/partitions/{partition}/batches", g.handleFetchBatches)
	r.With(topic(auth.OpDescribe)).Get("/v1/topics/{topic}/partitions/{partition}/offsets", g.handleListOffsets)
	r.With(topic(auth.OpRead)).Get("/v1/topics/{topic}/partitions/{partition}/ws", g.handleWebSocket)
	r.With(topic(auth.OpRead)).Get("/v1/topics/{topic}/partitions/{partition}/sse", g.handlePartitionSSE)
	r.With(topic(auth.OpRead)).Get("/v1/topics/{topic}/sse", g.handleTopicSSE)
	r.Get("/v1/groups", g.handleListGroups) // lists what the caller may DESCRIBE
	r.With(group(auth.OpDescribe)).Get("/v1/groups/{group}", g.handleDescribeGroup)
	r.With(group(auth.OpDelete)).Delete("/v1/groups/{group}", g.handleDeleteGroup)
	r.With(group(auth.OpRead)).Post("/v1/groups/{group}/members", g.handleJoinGroup) // and READ on each topic (join)
	r.With(group(auth.OpRead)).Get("/v1/groups/{group}/members/{member}/records", g.handleGroupPoll)
	r.With(group(auth.OpRead)).Get("/v1/groups/{group}/members/{member}/batches", g.handleGroupPollBatches)
	r.With(group(auth.OpRead)).Post("/v1/groups/{group}/members/{member}/heartbeat", g.handleHeartbeat)
	r.With(group(auth.OpRead)).Delete("/v1/groups/{group}/members/{member}", g.handleLeaveGroup)
	r.With(group(auth.OpRead)).Post("/v1/groups/{group}/offsets", g.handleCommit)
	r.With(group(auth.OpRead)).Post("/v1/groups/{group}/offsets/reset", g.handleResetOffsets)
	r.With(group(auth.OpRead)).Get("/v1/groups/{group}/ws", g.handleGroupWebSocket) // and READ on each topic (join)
	r.Get("/v1/session", g.handleGetSession)                                        // open: who the caller is
	r.Post("/v1/session", g.handleCreateSession)                                    // open: a token in, a cookie out
	r.Delete("/v1/session", g.handleDeleteSession)                                  // open: the cookie cleared
	r.With(cluster(auth.OpAlter)).Post("/v1/tokens", g.handleCreateToken)
	r.With(cluster(auth.OpAlter)).Get("/v1/tokens", g.handleListTokens)
	r.With(cluster(auth.OpAlter)).Delete("/v1/tokens/{id}", g.handleDeleteToken)
	r.With(cluster(auth.OpAlter)).Put("/v1/scram-credentials", g.handleSetScramCredential)
	r.With(cluster(auth.OpAlter)).Get("/v1/scram-credentials", g.handleListScramCredentials)
	r.With(cluster(auth.OpAlter)).Delete("/v1/scram-credentials", g.handleDeleteScramCredential)
	r.With(cluster(auth.OpAlter)).Post("/v1/acls", g.handleCreateACL)
	r.With(cluster(auth.OpAlter)).Get("/v1/acls", g.handleListACLs)
	r.With(cluster(auth.OpAlter)).Delete("/v1/acls", g.handleDeleteACLs)
	r.With(cluster(auth.OpDescribeConfigs)).Get("/v1/quotas", g.handleListQuotas)
	r.With(cluster(auth.OpAlterConfigs)).Put("/v1/quotas", g.handlePutQuota)
	r.With(cluster(auth.OpAlterConfigs)).Delete("/v1/quotas", g.handleDeleteQuota)
	g.pushRoutes(r)
	// The browser dashboard: static files under /ui/ (package web), which
	// use only the routes above.
	r.Get("/", redirectTo(web.Prefix))
	r.Get("/ui", redirectTo(web.Prefix))
	r.Method(http.MethodGet, web.Prefix+"*", web.Handler())
	r.Method(http.MethodHead, web.Prefix+"*", web.Handler())
	return r
}

// redirectTo answers 302 Found pointing at path.
func redirectTo(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, path, http.StatusFound)
	}
}

// recoverer answers a request whose handler panicked with INTERNAL (500),
// logged at error level with its stack and counted in
// sluice_gateway_panics_total.
func (g *Gateway) recoverer(next http.Handler) http.Handler {
	return httpserve.Recoverer(func(r *http.Request, v any) {
		g.log.Error("recovered a panic", "where", "http", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
		g.metrics.panics.Inc()
	})(next)
}
