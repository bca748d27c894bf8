package faulttest

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/sink"
)

// TestSinkTwoGatewaysOneKilled: two `sluice sink redis` processes in one
// group, each through its own gateway, under a producer (acks=all). In
// each of three rounds a new process joins through one gateway and dies
// mid-batch: it kills itself at a failpoint chosen at random (after a
// claim, or after a batch's write and before its group commit, at a
// random pass), or is SIGKILLed if it never reaches it. The other process
// runs throughout; in the end it holds every partition and the stream holds
// every record of the log (every acknowledged record) once, in partition
// order.
func TestSinkTwoGatewaysOneKilled(t *testing.T) {
	const partitions, rounds = 4, 3
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	c, urls := twoGatewayCluster(t)
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	r := newSinkRedis(t, ctx, "pair", sink.ModeStream)
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)

	args := func(url, metrics string) []string {
		return []string{"--url", url, "--group", "pair", "--topics", "orders",
			"--redis", "redis://" + r.addr + "/0", "--prefix", r.prefix,
			"--session-timeout", "2s", "--max-records", "100", "--metrics-addr", metrics}
	}
	survivorGW := rng.IntN(2)
	sMetrics := freeAddr(t)
	survivor := startSinkProcess(t, "survivor", args(urls[survivorGW], sMetrics))
	for round := range rounds {
		fp := sink.StepAfterClaim + ":1"
		if rng.IntN(3) > 0 {
			fp = sink.StepAfterWrite + ":" + strconv.Itoa(1+rng.IntN(15))
		}
		victim := startSinkProcess(t, "victim "+strconv.Itoa(round), args(urls[1-survivorGW], freeAddr(t)), failpointEnv(t, fp))
		how := "at its failpoint"
		select {
		case <-victim.exited:
			if !victim.killedBySignal() {
				t.Fatalf("victim %d (%s) exited on its own: %v", round, fp, victim.err)
			}
		case <-time.After(8 * time.Second):
			victim.kill()
			how = "by the test (failpoint not reached in 8s)"
		}
		t.Logf("round %d: victim through gateway %d with %s=%s died %s", round, 2-survivorGW, sink.FailpointEnv, fp, how)
		select {
		case <-survivor.exited:
			t.Fatalf("the survivor exited: %v", survivor.err)
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
	}
	prod.stop()

	// The survivor takes every partition back once the last victim's
	// session has run out, and writes each to the log's end.
	ends := logEnds(t, ctx, cl, "orders", partitions)
	var sum int64
	for _, e := range ends {
		sum += e
	}
	if sum != prod.produced.Load() {
		t.Errorf("the log holds %d records, %d were acknowledged", sum, prod.produced.Load())
	}
	start := time.Now()
	r.waitCaughtUp(t, ctx, "orders", ends)
	owned, _ := scrapeMetric(sMetrics, "sluice_sink_partitions")
	written, _ := scrapeMetric(sMetrics, `sluice_sink_records_written_total{topic="orders"}`)
	survivor.stop()
	checkStream(t, ctx, r, "orders", readLog(t, ctx, cl, "orders", partitions))
	if owned != partitions {
		t.Errorf("the survivor holds %v partitions at the end, want %d", owned, partitions)
	}
	t.Logf("%d records acknowledged; log ends %v; the survivor (gateway %d) caught up %s after the producer stopped, holding %v partitions, having written %v records",
		prod.produced.Load(), ends, survivorGW+1, time.Since(start).Round(time.Millisecond), owned, written)
}

// twoGatewayCluster starts a one-broker in-process cluster with a second
// gateway of its own; urls are the two gateways' base URLs.
func twoGatewayCluster(t *testing.T) (*embedtest.Cluster, []string) {
	t.Helper()
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	sess := c.Store.Session()
	gw2, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: sess, Version: "test", OpenAPI: sluice.OpenAPI,
		Logger: slog.New(slog.NewTextHandler(LogWriter(t, "gateway 2: "), &slog.HandlerOptions{Level: slog.LevelWarn})), OffsetsTopicPartitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	gw2.Start()
	t.Cleanup(func() { _ = gw2.Close(); _ = sess.Close() })
	urls := []string{c.URL, "http://" + gw2.Addr()}
	embedtest.WaitReady(t, urls[1], 10*time.Second)
	return c, urls
}
