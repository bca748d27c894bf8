package faulttest

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/sink"
)

// TestSinkS3CrashLoop: `sluice sink s3` processes, one after another under
// a producer, each SIGKILLed at a random moment or killing itself at a
// failpoint: every step in turn (after a poll, a claim, a range reserved
// in the fence object, an object created, a batch handed over, a group
// commit), at its first to third pass. Each takes the partitions over from
// the last with the same instance id, against the real S3 server. After
// every death the archive has no gap or overlap; at the end a last process
// catches up and stops on SIGTERM, and the archive holds every record of
// the log once, in offset order, with the log's keys and values.
func TestSinkS3CrashLoop(t *testing.T) {
	const partitions, iterations = 3, 35
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	c, cl, ctx := sinkCluster(t, partitions, 3*time.Minute)
	s3 := newSinkS3(t, ctx)
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)

	steps := []string{"", sink.StepAfterPoll, sink.StepAfterClaim, sink.StepAfterReserve, sink.StepAfterUpload, sink.StepAfterWrite, sink.StepAfterCommit}
	args := append([]string{"sink", "s3", "--url", c.URL, "--group", "s3crash", "--topics", "orders",
		"--instance-id", "s3-crash-sink", "--session-timeout", "5s", "--poll-records", "40",
		"--max-records", "30", "--max-interval", "150ms"}, s3.args(s3.cfg.Endpoint)...)
	storeTotal := func() int64 {
		var sum int64
		for _, e := range s3.archivedEnds(t, ctx, "orders", partitions) {
			sum += e
		}
		return sum
	}
	deadline := time.Now().Add(100 * time.Second)
	selfKilled, advanced, last, ran := 0, 0, int64(0), 0
	for i := 0; i < iterations && time.Now().Before(deadline); i++ {
		env := []string{s3.env()}
		fp := "none"
		if step := steps[i%len(steps)]; step != "" {
			fp = step + ":" + strconv.Itoa(1+rng.IntN(3))
			env = append(env, failpointEnv(t, fp))
		}
		before := s3.maxFence(t, ctx, "orders", partitions)
		p := startSluiceProcess(t, "sink "+strconv.Itoa(i), args, env...)
		p.untilClaimed(func() bool { return s3.maxFence(t, ctx, "orders", partitions) > before })
		how := "killed by the test"
		select {
		case <-p.exited:
			if !p.killedBySignal() {
				t.Fatalf("sink %d (failpoint %s) exited on its own: %v", i, fp, p.err)
			}
			selfKilled++
			how = "at its failpoint"
		case <-time.After(time.Duration(50+rng.IntN(700)) * time.Millisecond):
			p.kill()
		}
		ran++
		// Whatever the moment of death, the objects meet: no gap, no overlap.
		if problems := s3.verify(t, ctx, cl, "orders", false); len(problems) > 0 {
			t.Fatalf("after sink %d (failpoint %s) died %s: %v", i, fp, how, problems)
		}
		if now := storeTotal(); now > last {
			advanced, last = advanced+1, now
		}
	}
	prod.stop()
	t.Logf("%d records produced; %d processes, %d stopped at their failpoint; %d archived more before they died (%d records archived)",
		prod.produced.Load(), ran, selfKilled, advanced, last)
	if ran < 30 {
		t.Errorf("only %d processes ran before the deadline, want at least 30", ran)
	}
	if advanced < ran/4 {
		t.Errorf("only %d of %d processes archived anything before they died: the loop tests little", advanced, ran)
	}

	// A last process, rolling larger objects, catches up and stops cleanly.
	start := time.Now()
	p := startSluiceProcess(t, "last sink", append(args, "--poll-records", "500", "--max-records", "2000"), s3.env())
	ends := logEnds(t, ctx, cl, "orders", partitions)
	s3.waitCaughtUp(t, ctx, "orders", ends)
	p.stop()
	s3.checkArchive(t, ctx, cl, "orders", readLog(t, ctx, cl, "orders", partitions))
	t.Logf("log ends %v; the last process caught up in %s; the archive holds the log", ends, time.Since(start).Round(time.Millisecond))
}
