package faulttest

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/sink"
)

// TestSinkRedisHashCrashLoop: `sluice sink redis --mode hash` processes, one
// after another under a producer of keyed records and tombstones, each
// SIGKILLed at a random moment or killing itself at a failpoint (every
// step in turn, at its first to third pass), each taking the partitions
// over from the last with the same instance id. Afterwards a last process
// catches up and stops on SIGTERM; the hash equals the fold of the log:
// each key's latest value, keys whose latest record is a tombstone absent.
func TestSinkRedisHashCrashLoop(t *testing.T) {
	const partitions, iterations, keys = 3, 30, 40
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	c, cl, ctx := sinkCluster(t, partitions, 2*time.Minute)
	r := newSinkRedis(t, ctx, "hashcrash", sink.ModeHash)
	prod := startKeyedProducer(t, ctx, cl, "orders", keys, true)

	steps := []string{"", sink.StepAfterPoll, sink.StepAfterClaim, sink.StepAfterWrite, sink.StepAfterCommit}
	args := []string{"--url", c.URL, "--group", "hashcrash", "--topics", "orders", "--mode", sink.ModeHash,
		"--redis", "redis://" + r.addr + "/0", "--prefix", r.prefix, "--instance-id", "hash-sink",
		"--session-timeout", "5s", "--max-records", "40"}
	storeTotal := func() int64 {
		var sum int64
		for p := range partitions {
			if next, _ := r.partitionState(ctx, "orders", p); next > 0 {
				sum += next
			}
		}
		return sum
	}
	deadline := time.Now().Add(60 * time.Second)
	selfKilled, advanced, last, ran := 0, 0, int64(0), 0
	for i := 0; i < iterations && time.Now().Before(deadline); i++ {
		var env []string
		if step := steps[i%len(steps)]; step != "" {
			env = append(env, failpointEnv(t, step+":"+strconv.Itoa(1+rng.IntN(3))))
		}
		before := maxFence(ctx, r.rdb, r.store.OffsetsKey())
		p := startSinkProcess(t, "sink "+strconv.Itoa(i), args, env...)
		p.untilClaimed(func() bool { return maxFence(ctx, r.rdb, r.store.OffsetsKey()) > before })
		select {
		case <-p.exited:
			if !p.killedBySignal() {
				t.Fatalf("sink %d (%v) exited on its own: %v", i, env, p.err)
			}
			selfKilled++
		case <-time.After(time.Duration(50+rng.IntN(600)) * time.Millisecond):
			p.kill()
		}
		ran++
		if now := storeTotal(); now > last {
			advanced, last = advanced+1, now
		}
	}
	prod.stop()
	t.Logf("%d records produced; %d processes, %d stopped at their failpoint; %d wrote before they died (%d records in the store)",
		prod.produced.Load(), ran, selfKilled, advanced, last)
	if ran < iterations {
		t.Errorf("only %d of %d processes ran before the deadline", ran, iterations)
	}
	if advanced < ran/4 {
		t.Errorf("only %d of %d processes wrote anything before they died: the loop tests little", advanced, ran)
	}

	// A last process catches up and stops cleanly.
	p := startSinkProcess(t, "last sink", args)
	ends := logEnds(t, ctx, cl, "orders", partitions)
	r.waitCaughtUp(t, ctx, "orders", ends)
	p.stop()

	// The hash is the fold of the log.
	want := map[string]string{}
	tombstones := 0
	for _, part := range readLog(t, ctx, cl, "orders", partitions) {
		for _, rec := range part {
			switch {
			case rec.key == nil:
			case rec.value == nil:
				delete(want, string(rec.key))
				tombstones++
			default:
				want[string(rec.key)] = string(rec.value)
			}
		}
	}
	got, err := r.rdb.HGetAll(ctx, r.store.DataKey("orders")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got[k] != v {
			g, ok := got[k]
			t.Errorf("key %s: hash holds %q (present %v), the log's latest value is %q", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s: hash holds %q, the log's latest record for it is a tombstone", k, v)
		}
	}
	t.Logf("log ends %v, %d tombstones; the hash holds %d keys, the fold %d", ends, tombstones, len(got), len(want))
}
