// Package testcluster starts an in-process Sluice cluster for tests: an
// in-process coordinator, brokers with their real internal HTTP APIs on
// loopback ports, and a gateway. Logs go to t.Log.
package testcluster

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/tier"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	Store *coord.MemStore
	// Brokers[i] is broker i+1, nil while stopped.
	Brokers []*broker.Broker
	Gateway *gateway.Gateway
	// URL is the gateway's base URL, http://127.0.0.1:PORT.
	URL string

	t        testing.TB
	opts     Options
	log      *slog.Logger
	sessions []*coord.MemSession
}

// Options tune Start.
type Options struct {
	Brokers int    // default 1
	DataDir string // default t.TempDir()
	// ReplicaLagTimeMax and LeaderRebalanceInterval go to every broker
	// (zero: the broker defaults).
	ReplicaLagTimeMax       time.Duration
	LeaderRebalanceInterval time.Duration
	// Bucket, TierInterval and OrphanGrace go to every broker (tiered storage).
	Bucket       tier.Bucket
	TierInterval time.Duration
	OrphanGrace  time.Duration
	// GroupLagInterval and CleanerInterval go to every broker (zero: the
	// broker defaults).
	GroupLagInterval time.Duration
	CleanerInterval  time.Duration
	// MaxPartitionsPerBroker goes to every broker (zero: the default).
	MaxPartitionsPerBroker int
	// WrapCoord, when set, wraps each broker's coordinator session (fault
	// injection: a session whose events the test drives). Default none.
	WrapCoord func(brokerID int, c coord.Coordinator) coord.Coordinator
	// ClusterSecret goes to every broker and the gateway (nil: none).
	ClusterSecret []byte
	// GatewayAuth goes to the gateway (zero: no authentication).
	GatewayAuth gateway.AuthOptions
	// TuneGateway, when set, changes the gateway's options last.
	TuneGateway func(*gateway.Options)
	// BrokerAuth goes to every broker (zero: brokers check no ACLs).
	BrokerAuth broker.AuthOptions
	// LogTo, when set, receives the cluster's log lines too (tests that
	// check what is logged).
	LogTo io.Writer
}

// Start starts a cluster and stops it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Brokers == 0 {
		opts.Brokers = 1
	}
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	var logw io.Writer = tWriter{t}
	if opts.LogTo != nil {
		logw = io.MultiWriter(logw, opts.LogTo)
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store, err := coord.NewMemStore(coord.MemOptions{Path: filepath.Join(opts.DataDir, "coord.json")})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Store: store, t: t, opts: opts, log: log,
		Brokers: make([]*broker.Broker, opts.Brokers), sessions: make([]*coord.MemSession, opts.Brokers)}
	t.Cleanup(func() { c.Stop(t) })
	for i := 1; i <= opts.Brokers; i++ {
		c.StartBroker(i)
	}
	gwOpts := gateway.Options{Addr: "127.0.0.1:0", Coord: store.Session(), Version: "test", OpenAPI: sluice.OpenAPI, Logger: log, OffsetsTopicPartitions: 4,
		Auth: opts.GatewayAuth, ClusterSecret: opts.ClusterSecret}
	if opts.TuneGateway != nil {
		opts.TuneGateway(&gwOpts)
	}
	gw, err := gateway.New(gwOpts)
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	c.Gateway = gw
	c.URL = "http://" + gw.Addr()
	WaitReady(t, c.URL, 10*time.Second)
	return c
}

// StartBroker starts broker id (1-based) on its data directory, with a new
// coordinator session and a new port.
func (c *Cluster) StartBroker(id int) {
	c.t.Helper()
	sess := c.Store.Session()
	var bc coord.Coordinator = sess
	if c.opts.WrapCoord != nil {
		bc = c.opts.WrapCoord(id, sess)
	}
	b, err := broker.New(broker.Options{
		ID: int32(id), DataDir: filepath.Join(c.opts.DataDir, "broker-"+strconv.Itoa(id)),
		Coord: bc, Logger: c.log, CrashOnPanic: true,
		ReplicaLagTimeMax: c.opts.ReplicaLagTimeMax, LeaderRebalanceInterval: c.opts.LeaderRebalanceInterval,
		Bucket: c.opts.Bucket, TierInterval: c.opts.TierInterval, OrphanGrace: c.opts.OrphanGrace,
		GroupLagInterval: c.opts.GroupLagInterval, CleanerInterval: c.opts.CleanerInterval,
		MaxPartitionsPerBroker: c.opts.MaxPartitionsPerBroker,
		ClusterSecret:          c.opts.ClusterSecret,
		Auth:                   c.opts.BrokerAuth,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		c.t.Fatal(err)
	}
	c.Brokers[id-1], c.sessions[id-1] = b, sess
}

// StopBroker closes broker id and its coordinator session, so the cluster
// sees it leave at once (as after a session expiry).
func (c *Cluster) StopBroker(id int) {
	c.t.Helper()
	if b := c.Brokers[id-1]; b != nil {
		if err := b.Close(); err != nil {
			c.t.Errorf("closing broker %d: %v", id, err)
		}
		_ = c.sessions[id-1].Close() // a session's Close never fails
		c.Brokers[id-1], c.sessions[id-1] = nil, nil
	}
}

// Stop closes the gateway, the brokers (flushing their logs) and the
// coordinator. It is safe to call more than once.
func (c *Cluster) Stop(t testing.TB) {
	// A gateway that could not drain in time (a client still polling) or a
	// coordinator that turned read-only is worth seeing, but is for the
	// test's own checks to judge.
	if c.Gateway != nil {
		if err := c.Gateway.Close(); err != nil {
			t.Logf("closing the gateway: %v", err)
		}
		c.Gateway = nil
	}
	for i := range c.Brokers {
		c.StopBroker(i + 1)
	}
	if c.Store != nil {
		if err := c.Store.Close(); err != nil {
			t.Logf("closing the coordinator: %v", err)
		}
		c.Store = nil
	}
}

// WaitReady polls GET /readyz until it answers 200 or the timeout passes.
func WaitReady(t testing.TB, base string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s (last error %v)", base, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}
