package faulttest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/sink"
)

// TestSinkS3TwoGatewaysOneKilled: two `sluice sink s3` processes in one
// group, each through its own gateway, under a producer. In each of three
// rounds a new process joins through one gateway and dies mid-batch: it
// kills itself at a failpoint chosen at random (after its claim, after a
// range is reserved and before its object is created, after an object is
// created, or after records are handed to the store, at one of its first
// passes),
// or is SIGKILLed if it never reaches it. The other process runs
// throughout; in the end it holds every partition and the archive holds
// every record of the log once, with nothing else.
func TestSinkS3TwoGatewaysOneKilled(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	s3 := newSinkS3(t, ctx)
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)

	args := func(url, metrics string) []string {
		return append([]string{"sink", "s3", "--url", url, "--group", "s3pair", "--topics", "orders",
			"--session-timeout", "2s", "--poll-records", "100", "--max-records", "150", "--max-interval", "200ms",
			"--metrics-addr", metrics}, s3.args(s3.cfg.Endpoint)...)
	}
	survivorGW := rng.IntN(2)
	sMetrics := freeAddr(t)
	survivor := startSluiceProcess(t, "survivor", args(urls[survivorGW], sMetrics), s3.env())
	failpoints := []string{sink.StepAfterClaim, sink.StepAfterReserve, sink.StepAfterUpload, sink.StepAfterWrite}
	for round := range rounds {
		// A victim claims once (its first poll's grants); it reserves,
		// uploads and writes again and again.
		fp := failpoints[rng.IntN(len(failpoints))]
		if fp == sink.StepAfterClaim {
			fp += ":1"
		} else {
			fp += ":" + strconv.Itoa(1+rng.IntN(4))
		}
		victim := startSluiceProcess(t, "victim "+strconv.Itoa(round), args(urls[1-survivorGW], freeAddr(t)), s3.env(), failpointEnv(t, fp))
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
		if problems := s3.verify(t, ctx, cl, "orders", false); len(problems) > 0 {
			t.Fatalf("after victim %d died: %v", round, problems)
		}
		select {
		case <-survivor.exited:
			t.Fatalf("the survivor exited: %v", survivor.err)
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
	}
	prod.stop()

	// The survivor takes every partition back once the last victim's
	// session has run out, and archives each to the log's end.
	ends := logEnds(t, ctx, cl, "orders", partitions)
	var sum int64
	for _, e := range ends {
		sum += e
	}
	if sum != prod.produced.Load() {
		t.Errorf("the log holds %d records, %d were acknowledged", sum, prod.produced.Load())
	}
	start := time.Now()
	s3.waitCaughtUp(t, ctx, "orders", ends)
	owned, _ := scrapeMetric(sMetrics, "sluice_sink_partitions")
	objects, _ := scrapeMetric(sMetrics, `sluice_sink_objects_total{topic="orders"}`)
	objBytes, _ := scrapeMetric(sMetrics, `sluice_sink_object_bytes_total{topic="orders"}`)
	written, _ := scrapeMetric(sMetrics, `sluice_sink_records_written_total{topic="orders"}`)
	survivor.stop()
	if objects < 1 || objBytes < 1 || written < 1 {
		t.Errorf("the survivor's metrics: %v objects, %v bytes, %v records written; want each above 0", objects, objBytes, written)
	}
	s3.checkArchive(t, ctx, cl, "orders", readLog(t, ctx, cl, "orders", partitions))
	if owned != partitions {
		t.Errorf("the survivor holds %v partitions at the end, want %d", owned, partitions)
	}
	t.Logf("%d records acknowledged; log ends %v; the survivor (gateway %d) caught up %s after the producer stopped, holding %v partitions, having created %v objects (%v bytes) of %v records",
		prod.produced.Load(), ends, survivorGW+1, time.Since(start).Round(time.Millisecond), owned, objects, objBytes, written)
}
