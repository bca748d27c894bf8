// Package embedtest starts an in-process Sluice cluster for tests: the
// cluster of package embedded (an in-process coordinator, brokers with their
// real internal HTTP APIs on loopback ports, a gateway) in t.TempDir(), with
// its logs in t.Log, brokers that crash the test binary on a panic in a
// background loop, and a Close when the test ends. Tests of real processes
// are in internal/faulttest.
package embedtest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/commitlog/faultfs"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/embedded"
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

	t  testing.TB
	cl *embedded.Cluster
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
	// Kafka makes every broker serve Kafka's protocol on a loopback port
	// of its own (Broker.KafkaAddr). Default false: no Kafka listener.
	Kafka bool
	// LogTo, when set, receives the cluster's log lines too (tests that
	// check what is logged).
	LogTo io.Writer
	// TuneBroker, when set, changes each broker's options last (a broker's
	// filesystem with injected faults).
	TuneBroker func(id int, o *broker.Options)
}

// startTimeout bounds each broker's start and the wait for readiness.
const startTimeout = 10 * time.Second

// Start starts a cluster and stops it when the test ends. The coordinator's
// state is kept in DataDir, so a second Start on the same DataDir finds the
// first one's topics.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	var logw io.Writer = tWriter{t}
	if opts.LogTo != nil {
		logw = io.MultiWriter(logw, opts.LogTo)
	}
	cl, err := embedded.Start(context.Background(), embedded.Options{
		Brokers:      opts.Brokers,
		DataDir:      opts.DataDir,
		PersistCoord: true,
		Bucket:       opts.Bucket,
		Logger:       slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})),
		StartTimeout: startTimeout,
		Broker: func(id int, o *broker.Options) {
			o.CrashOnPanic = true
			o.ReplicaLagTimeMax, o.LeaderRebalanceInterval = opts.ReplicaLagTimeMax, opts.LeaderRebalanceInterval
			o.TierInterval, o.OrphanGrace = opts.TierInterval, opts.OrphanGrace
			o.GroupLagInterval, o.CleanerInterval = opts.GroupLagInterval, opts.CleanerInterval
			o.MaxPartitionsPerBroker = opts.MaxPartitionsPerBroker
			o.ClusterSecret = opts.ClusterSecret
			o.Auth = opts.BrokerAuth
			if opts.Kafka {
				o.Kafka.Addr = "127.0.0.1:0"
			}
			o.OffsetsTopicPartitions = 4 // as the gateway's
			if opts.WrapCoord != nil {
				o.Coord = opts.WrapCoord(id, o.Coord)
			}
			if opts.TuneBroker != nil {
				opts.TuneBroker(id, o)
			}
		},
		Gateway: func(o *gateway.Options) {
			o.Version = "test"
			o.OffsetsTopicPartitions = 4
			o.Auth = opts.GatewayAuth
			o.ClusterSecret = opts.ClusterSecret
			if opts.TuneGateway != nil {
				opts.TuneGateway(o)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Store: cl.Store(), Gateway: cl.Gateway(), URL: cl.URL(), t: t, cl: cl,
		Brokers: make([]*broker.Broker, cl.Brokers())}
	for i := range c.Brokers {
		c.Brokers[i] = cl.Broker(i + 1)
	}
	t.Cleanup(func() { c.Stop(t) })
	return c
}

// StartBroker starts broker id (1-based) on its data directory, with a new
// coordinator session and a new port.
func (c *Cluster) StartBroker(id int) {
	c.t.Helper()
	if err := c.cl.StartBroker(context.Background(), id); err != nil {
		c.t.Fatal(err)
	}
	c.Brokers[id-1] = c.cl.Broker(id)
}

// StopBroker closes broker id and its coordinator session, so the cluster
// sees it leave at once (as after a session expiry).
func (c *Cluster) StopBroker(id int) {
	c.t.Helper()
	if err := c.cl.StopBroker(id); err != nil {
		c.t.Error(err)
	}
	c.Brokers[id-1] = nil
}

// Stop closes the gateway, the brokers (flushing their logs) and the
// coordinator. It is safe to call more than once.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.cl.Close(); err != nil {
		t.Error(err)
	}
	c.Gateway, c.Store = nil, nil
	clear(c.Brokers)
}

// WaitReady polls GET /readyz until it answers 200 or the timeout passes.
func WaitReady(t testing.TB, base string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := embedded.WaitReady(ctx, base); err != nil {
		t.Fatal(err)
	}
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// FaultFS puts a broker's data directory behind commitlog/faultfs (call it
// from Options.TuneBroker) and returns it, so that a test can fail the
// broker's writes and fsyncs; the directory is closed when the test ends.
func FaultFS(t testing.TB, o *broker.Options) *faultfs.FS {
	t.Helper()
	osfs, err := commitlog.NewOSFS(o.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = osfs.Close() })
	ffs := faultfs.New(osfs)
	o.FS = ffs
	return ffs
}
