package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/embedded"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/testwait"
)

// tLogger sends the cluster's log lines to t.Log.
func tLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func start(t *testing.T, opts embedded.Options) *embedded.Cluster {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = tLogger(t)
	}
	c, err := embedded.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Start returns when the gateway sees every broker and a controller, so a
// topic created at once gets the full default replication factor; the
// tuning hooks reach every broker and the gateway.
func TestStartIsReadyWithEveryBroker(t *testing.T) {
	tuned := map[int]bool{}
	c := start(t, embedded.Options{
		Brokers: 3,
		Broker:  func(id int, o *broker.Options) { tuned[id] = o.ID == int32(id) && o.Coord != nil },
		Gateway: func(o *gateway.Options) { o.Version = "embedded-test" },
	})
	if !strings.HasPrefix(c.URL(), "http://127.0.0.1:") || strings.HasSuffix(c.URL(), ":0") {
		t.Fatalf("URL %q: want the port the gateway got on loopback", c.URL())
	}
	if len(tuned) != 3 || !tuned[1] || !tuned[2] || !tuned[3] {
		t.Fatalf("broker hook saw %v, want brokers 1 to 3 with their ID and session", tuned)
	}
	cl := newClient(t, c.URL())
	ctx := context.Background()
	ci, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, b := range ci.Brokers {
		if b.Alive {
			alive++
		}
	}
	if alive != 3 || ci.Controller < 1 || ci.Version != "embedded-test" {
		t.Fatalf("cluster right after Start: %d alive, controller %d, version %q; want 3, a broker, embedded-test", alive, ci.Controller, ci.Version)
	}
	tp, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "t", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tp.Partitions {
		if len(p.Replicas) != 3 {
			t.Fatalf("partition %d has replicas %v, want the default factor 3", p.Partition, p.Replicas)
		}
	}
	for id := 1; id <= 3; id++ {
		if b := c.Broker(id); b == nil || b.ID() != int32(id) {
			t.Fatalf("Broker(%d) = %v", id, b)
		}
		if c.BrokerDir(id) != filepath.Join(c.DataDir(), fmt.Sprintf("broker-%d", id)) {
			t.Fatalf("BrokerDir(%d) = %s", id, c.BrokerDir(id))
		}
	}
	if c.Broker(0) != nil || c.Broker(4) != nil || c.Brokers() != 3 {
		t.Fatal("brokers outside 1 to 3")
	}
}

// A stopped broker leaves the cluster at once; started again on its data
// directory it registers again with a new port.
func TestStopAndStartBroker(t *testing.T) {
	c := start(t, embedded.Options{Brokers: 2})
	cl := newClient(t, c.URL())
	ctx := context.Background()
	old := c.Broker(2).Addr()
	if err := c.StopBroker(2); err != nil {
		t.Fatal(err)
	}
	if c.Broker(2) != nil {
		t.Fatal("Broker(2) after StopBroker is not nil")
	}
	if err := c.StopBroker(2); err != nil {
		t.Fatalf("stopping a stopped broker: %v", err)
	}
	liveBrokers := func() int {
		ci, err := cl.Cluster(ctx)
		if err != nil {
			return -1
		}
		n := 0
		for _, b := range ci.Brokers {
			if b.Alive {
				n++
			}
		}
		return n
	}
	testwait.For(t, 10*time.Second, "broker 2 gone from the cluster", func() bool { return liveBrokers() == 1 })
	if err := c.StartBroker(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBroker(ctx, 2); err == nil {
		t.Fatal("starting a running broker: no error")
	}
	if err := c.StartBroker(ctx, 3); err == nil {
		t.Fatal("starting broker 3 of 2: no error")
	}
	if c.Broker(2).Addr() == old {
		t.Logf("broker 2 got its old port %s again", old)
	}
	testwait.For(t, 10*time.Second, "broker 2 back in the cluster", func() bool { return liveBrokers() == 2 })
}

// With PersistCoord a cluster started again on the same DataDir finds its
// topics and records; a temporary DataDir goes with Close.
func TestPersistedDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, err := embedded.Start(ctx, embedded.Options{DataDir: dir, PersistCoord: true, LocalBucket: true, Logger: tLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c.URL())
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "kept", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Produce(ctx, "kept", []client.Record{{JSON: json.RawMessage(`"v"`)}}, client.ProduceOptions{Acks: client.AcksAll}); err != nil {
		t.Fatal(err)
	}
	if c.Bucket() == nil {
		t.Fatal("LocalBucket: no bucket")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, pattern := range []string{"coord.json*", "broker-1", "tier"} {
		if m, err := filepath.Glob(filepath.Join(dir, pattern)); err != nil || len(m) == 0 {
			t.Fatalf("no %s in the DataDir after Close", pattern)
		}
	}

	c = start(t, embedded.Options{DataDir: dir, PersistCoord: true})
	cl = newClient(t, c.URL())
	// The restarted broker hands back the leadership it finds recorded for
	// itself (its log may have lost an unsynced tail), so the partition is
	// leaderless until the controller elects it again.
	testwait.Check(t, 30*time.Second, "the record after the restart", func() error {
		tp, err := cl.GetTopic(ctx, "kept")
		if err != nil {
			return err
		}
		if hw := tp.Partitions[0].HighWatermark; hw != 1 {
			return fmt.Errorf("high watermark %d (leader %d), want 1", hw, tp.Partitions[0].Leader)
		}
		return nil
	})

	tmp := start(t, embedded.Options{})
	tmpDir := tmp.DataDir()
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmpDir); !os.IsNotExist(err) {
		t.Fatalf("temporary DataDir %s after Close: %v", tmpDir, err)
	}
}

// A Start that fails stops what it started; options it cannot honour are
// refused.
func TestStartRefuses(t *testing.T) {
	ctx := context.Background()
	if _, err := embedded.Start(ctx, embedded.Options{Brokers: -1}); err == nil {
		t.Fatal("negative Brokers: no error")
	}
	_, err := embedded.Start(ctx, embedded.Options{Logger: tLogger(t), Gateway: func(o *gateway.Options) { o.TLS = &gateway.TLSOptions{} }})
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("gateway TLS: %v, want it refused", err)
	}
	busy := start(t, embedded.Options{})
	addr := strings.TrimPrefix(busy.URL(), "http://")
	if _, err := embedded.Start(ctx, embedded.Options{Addr: addr, Logger: tLogger(t)}); err == nil {
		t.Fatalf("a gateway on the taken address %s: no error", addr)
	}
	resp, err := http.Get(busy.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first cluster after the second failed: %s", resp.Status)
	}
}

// WaitReady reports what the gateway answered when ctx ends first.
func TestWaitReadyTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := embedded.WaitReady(ctx, "http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("WaitReady on a closed port: %v", err)
	}
}
