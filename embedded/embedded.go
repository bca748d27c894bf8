// Package embedded runs a whole Sluice cluster in one process: an in-process
// coordinator (coord.MemStore, optionally persisted), brokers with their real
// internal HTTP APIs on loopback ports, a gateway serving the public API and
// the dashboard, and optionally a local directory standing in for the object
// store. `sluice dev`, the in-process cluster of `sluice bench` and the
// in-process test harness (internal/embedtest) all start clusters through it.
//
// Ownership: Start owns every node it starts and Close stops them; each
// broker's goroutines belong to the broker, the gateway's to the gateway.
// The package starts no goroutine of its own.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/tier"
)

// Options configure Start. Zero values take the documented defaults.
type Options struct {
	// Brokers is how many brokers run, with IDs 1 to Brokers. Default 1.
	Brokers int
	// DataDir holds one directory per broker (broker-<id>), and coord.json
	// and tier/ when PersistCoord and LocalBucket ask for them. Default: a
	// new temporary directory, removed by Close. A given directory is
	// created if missing and kept.
	DataDir string
	// Addr is the gateway's public listen address. Default "127.0.0.1:0":
	// a free loopback port, which URL reports. The brokers' internal APIs
	// always listen on 127.0.0.1:0 and register the port they got.
	Addr string
	// PersistCoord keeps the coordinator's state (topics, configs, ACLs,
	// tokens; never the brokers' registrations) in DataDir/coord.json, so
	// a cluster started again on the same DataDir finds its topics and
	// records. Default false: the coordinator lives in memory only.
	PersistCoord bool
	// Bucket is the object store every broker tiers to; Close does not
	// close it. Default nil: no object store unless LocalBucket.
	Bucket tier.Bucket
	// LocalBucket, when Bucket is nil, opens DataDir/tier as the object
	// store (a local directory standing in for S3); Close closes it.
	// Default false.
	LocalBucket bool
	// Logger receives every node's log lines. Default slog.Default().
	Logger *slog.Logger
	// Broker, when set, tunes broker id's options last, after ID, Addr,
	// DataDir, Coord (the broker's own coordinator session), Logger and
	// Bucket are filled in; wrapping o.Coord is how a caller injects
	// coordinator faults. It runs again on every StartBroker. Default none.
	Broker func(id int, o *broker.Options)
	// Gateway, when set, tunes the gateway's options last, after Addr,
	// Coord, OpenAPI and Logger are filled in. The gateway must serve
	// plain HTTP (readiness is checked over it): TLS is refused. Default
	// none, which leaves the gateway's own defaults (50 partitions of
	// __consumer_offsets, no authentication).
	Gateway func(o *gateway.Options)
	// StartTimeout bounds each broker's start and, separately, the wait
	// for the cluster to be ready. Default 30 s.
	StartTimeout time.Duration
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Brokers == 0:
		o.Brokers = 1
	case o.Brokers < 0:
		return o, errors.New("embedded: negative Brokers")
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	return o, nil
}

// Cluster is a running in-process cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	opts      Options
	dir       string // DataDir
	ownDir    bool   // dir was made by Start and goes with Close
	store     *coord.MemStore
	bucket    tier.Bucket // opts.Bucket, or the local directory Start opened
	ownBucket bool        // bucket was opened by Start and goes with Close
	gw        *gateway.Gateway
	url       string

	// opMu serializes StartBroker, StopBroker and Close; it is held while
	// a broker starts or stops, never while only reading.
	opMu   sync.Mutex
	closed bool // under opMu

	mu       sync.Mutex          // guards brokers and sessions; taken inside opMu
	brokers  []*broker.Broker    // index id-1; nil while stopped
	sessions []*coord.MemSession // each running broker's coordinator session
}

// Start starts a cluster and returns once it is ready: every broker is
// registered, a controller is elected, and the gateway, which read the
// metadata after both, answers GET /readyz with 200 (so it routes to every
// broker and a created topic gets its full default replication factor).
// On error everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, dir: opts.DataDir,
		brokers: make([]*broker.Broker, opts.Brokers), sessions: make([]*coord.MemSession, opts.Brokers)}
	if err := c.start(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "sluice-embedded-")
		if err != nil {
			return err
		}
		c.dir, c.ownDir = dir, true
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	var mo coord.MemOptions
	if c.opts.PersistCoord {
		mo.Path = filepath.Join(c.dir, "coord.json")
	}
	store, err := coord.NewMemStore(mo)
	if err != nil {
		return fmt.Errorf("coordinator state: %w", err)
	}
	c.store = store
	c.bucket = c.opts.Bucket
	if c.bucket == nil && c.opts.LocalBucket {
		b, err := tier.OpenLocalDir(filepath.Join(c.dir, "tier"))
		if err != nil {
			return fmt.Errorf("object store directory: %w", err)
		}
		c.bucket, c.ownBucket = b, true
	}
	for id := 1; id <= c.opts.Brokers; id++ {
		if err := c.StartBroker(ctx, id); err != nil {
			return err
		}
	}
	// The gateway starts once the brokers are registered and a controller
	// is elected, so its first read of the metadata already has them all.
	if err := c.waitBrokers(ctx); err != nil {
		return err
	}
	// The embedded default pushes to local endpoints: it is where they run.
	gwOpts := gateway.Options{Addr: c.opts.Addr, Coord: store.Session(), OpenAPI: sluice.OpenAPI, Logger: c.opts.Logger, PushAllowPrivate: true}
	if c.opts.Gateway != nil {
		c.opts.Gateway(&gwOpts)
	}
	if gwOpts.TLS != nil {
		return errors.New("embedded: the gateway serves plain HTTP (its readiness is checked over it); TLS is not supported")
	}
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return err
	}
	gw.Start()
	c.gw, c.url = gw, "http://"+gw.Addr()
	wctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	return WaitReady(wctx, c.url)
}

// waitBrokers waits until the coordinator lists every running broker and a
// controller, as a fresh metadata view reads them.
func (c *Cluster) waitBrokers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	sess := c.store.Session()
	defer func() { _ = sess.Close() }() // a MemSession's Close never fails
	view := cluster.NewView(sess, c.opts.Logger)
	changed := view.Subscribe()
	view.Start()
	defer view.Close()
	for {
		md := view.Current()
		missing := -1
		for id := 1; id <= c.opts.Brokers && missing < 0; id++ {
			if _, ok := md.Brokers[int32(id)]; !ok && c.Broker(id) != nil {
				missing = id
			}
		}
		if missing < 0 && md.Controller.BrokerID >= 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if missing > 0 {
				return fmt.Errorf("broker %d is not registered after %s", missing, c.opts.StartTimeout)
			}
			return fmt.Errorf("no controller elected after %s", c.opts.StartTimeout)
		}
	}
}

// WaitReady polls base's GET /readyz until it answers 200, or ctx ends; the
// error then says what the gateway answered last.
func WaitReady(ctx context.Context, base string) error {
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last answer: %s): %w", base, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartBroker starts broker id (1 to Options.Brokers) on its data directory,
// with a new coordinator session and a new port, and returns once it is
// registered and holds the metadata. Starting a running broker is an error.
func (c *Cluster) StartBroker(ctx context.Context, id int) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	switch {
	case c.closed:
		return errors.New("embedded: the cluster is closed")
	case id < 1 || id > c.opts.Brokers:
		return fmt.Errorf("embedded: no broker %d (1 to %d)", id, c.opts.Brokers)
	case c.Broker(id) != nil:
		return fmt.Errorf("embedded: broker %d is running", id)
	}
	sess := c.store.Session()
	bo := broker.Options{ID: int32(id), Addr: "127.0.0.1:0", DataDir: c.BrokerDir(id),
		Coord: sess, Logger: c.opts.Logger, Bucket: c.bucket}
	if c.opts.Broker != nil {
		c.opts.Broker(id, &bo)
	}
	b, err := broker.New(bo)
	if err != nil {
		_ = sess.Close() // a MemSession's Close never fails
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := b.Start(sctx); err != nil {
		_ = b.Close()
		_ = sess.Close() // a MemSession's Close never fails
		return fmt.Errorf("starting broker %d: %w", id, err)
	}
	c.mu.Lock()
	c.brokers[id-1], c.sessions[id-1] = b, sess
	c.mu.Unlock()
	return nil
}

// StopBroker closes broker id (its logs flushed) and then its coordinator
// session, so the rest of the cluster sees it leave at once, as after a
// session expiry. Stopping a stopped broker does nothing.
func (c *Cluster) StopBroker(id int) error {
	if id < 1 || id > c.opts.Brokers {
		return fmt.Errorf("embedded: no broker %d (1 to %d)", id, c.opts.Brokers)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	return c.stopBrokerLocked(id)
}

// stopBrokerLocked is StopBroker with opMu held.
func (c *Cluster) stopBrokerLocked(id int) error {
	c.mu.Lock()
	b, sess := c.brokers[id-1], c.sessions[id-1]
	c.brokers[id-1], c.sessions[id-1] = nil, nil
	c.mu.Unlock()
	if b == nil {
		return nil
	}
	err := b.Close()
	_ = sess.Close() // a MemSession's Close never fails
	if err != nil {
		return fmt.Errorf("closing broker %d: %w", id, err)
	}
	return nil
}

// Close stops the cluster; it is safe to call more than once. It returns
// the brokers' errors from closing their logs; the gateway's and the
// coordinator's are logged.
func (c *Cluster) Close() error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	// 1. The gateway: it stops taking requests (in-flight ones finish) and
	//    closes its WebSockets, so nothing is routed to a broker that is
	//    already gone.
	if c.gw != nil {
		if err := c.gw.Close(); err != nil {
			c.opts.Logger.Warn("closing the gateway", "err", err)
		}
	}
	// 2. The brokers, in ID order, each before its session: a broker
	//    flushes and closes its logs, then its registration goes.
	var errs []error
	for id := 1; id <= c.opts.Brokers; id++ {
		errs = append(errs, c.stopBrokerLocked(id))
	}
	// 3. The coordinator, with every session left (the gateway's): the
	//    journal of a persisted one is closed.
	if c.store != nil {
		if err := c.store.Close(); err != nil {
			c.opts.Logger.Error("the coordinator's state could not be saved", "err", err)
		}
	}
	// 4. The local object-store directory, then a temporary DataDir.
	if c.ownBucket {
		_ = c.bucket.Close()
	}
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			c.opts.Logger.Warn("removing the data directory", "dir", c.dir, "err", err)
		}
	}
	return errors.Join(errs...)
}

// URL is the gateway's base URL, http://host:port, with the port it got.
func (c *Cluster) URL() string { return c.url }

// Gateway is the cluster's gateway.
func (c *Cluster) Gateway() *gateway.Gateway { return c.gw }

// Broker is broker id (1 to Options.Brokers), or nil while it is stopped.
func (c *Cluster) Broker(id int) *broker.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id < 1 || id > len(c.brokers) {
		return nil
	}
	return c.brokers[id-1]
}

// Brokers is how many brokers the cluster has, running or stopped.
func (c *Cluster) Brokers() int { return c.opts.Brokers }

// Store is the in-process coordinator; Store().Session() opens a session on
// it (a second gateway, a test's own view).
func (c *Cluster) Store() *coord.MemStore { return c.store }

// Bucket is the object store the brokers tier to, or nil for none.
func (c *Cluster) Bucket() tier.Bucket { return c.bucket }

// DataDir is the directory holding the cluster's files.
func (c *Cluster) DataDir() string { return c.dir }

// BrokerDir is broker id's data directory, DataDir/broker-<id>.
func (c *Cluster) BrokerDir(id int) string {
	return filepath.Join(c.dir, "broker-"+strconv.Itoa(id))
}
