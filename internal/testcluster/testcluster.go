// Package testcluster starts an in-process Sluice cluster for tests: an
// in-process coordinator, brokers with their real internal HTTP APIs on
// loopback ports, and a gateway. Logs go to t.Log.
package testcluster

import (
	"context"
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
)

// Cluster is a running in-process cluster.
type Cluster struct {
	Store   *coord.MemStore
	Brokers []*broker.Broker
	Gateway *gateway.Gateway
	// URL is the gateway's base URL, http://127.0.0.1:PORT.
	URL string
}

// Options tune Start.
type Options struct {
	Brokers int    // default 1
	DataDir string // default t.TempDir()
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
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store, err := coord.NewMemStore(coord.MemOptions{Path: filepath.Join(opts.DataDir, "coord.json")})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Store: store}
	t.Cleanup(func() { c.Stop(t) })
	for i := 1; i <= opts.Brokers; i++ {
		b, err := broker.New(broker.Options{
			ID: int32(i), DataDir: filepath.Join(opts.DataDir, "broker-"+strconv.Itoa(i)),
			Coord: store.Session(), Logger: log,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Brokers = append(c.Brokers, b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = b.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	gw, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: store.Session(), Version: "test", OpenAPI: sluice.OpenAPI, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	c.Gateway = gw
	c.URL = "http://" + gw.Addr()
	WaitReady(t, c.URL, 10*time.Second)
	return c
}

// Stop closes the gateway, the brokers (flushing their logs) and the
// coordinator. It is safe to call more than once.
func (c *Cluster) Stop(t testing.TB) {
	if c.Gateway != nil {
		c.Gateway.Close()
		c.Gateway = nil
	}
	for _, b := range c.Brokers {
		if err := b.Close(); err != nil {
			t.Errorf("closing broker %d: %v", b.ID(), err)
		}
	}
	c.Brokers = nil
	if c.Store != nil {
		c.Store.Close()
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
