package faulttest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/sink"
)

// TestSinkRedisCrashLoop: `sluice sink redis` processes, one after another
// under a producer, each SIGKILLed at a random moment or killing itself at
// a failpoint (every step in turn, at its first to third pass). Each takes
// the partitions over from the last with the same instance id. Afterwards a
// last process catches up and stops on SIGTERM; the stream holds every
// record of the log once, in partition order.
func TestSinkRedisCrashLoop(t *testing.T) {
	const partitions, iterations = 3, 36
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	c, cl, ctx := sinkCluster(t, partitions, 2*time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	defer rdb.Close()
	n, err := rdb.Incr(ctx, "test:unique").Result()
	if err != nil {
		t.Fatalf("redis at %s: %v", testsvc.Redis(t), err)
	}
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), n)
	store, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: "crash", Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}

	// The producer: keyed records in small requests until told to stop.
	var produced atomic.Int64
	stopProducing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i += 20 {
			select {
			case <-stopProducing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var recs []client.Record
			for j := i; j < i+20; j++ {
				recs = append(recs, client.Record{Key: []byte("k" + strconv.Itoa(j%50)), Value: []byte("v" + strconv.Itoa(j))})
			}
			if _, err := cl.Produce(ctx, "orders", recs, client.ProduceOptions{}); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			produced.Add(20)
		}
	}()

	steps := []string{"", sink.StepAfterPoll, sink.StepAfterClaim, sink.StepAfterWrite, sink.StepAfterCommit}
	args := []string{"sink", "redis", "--url", c.URL, "--group", "crash", "--topics", "orders",
		"--redis", "redis://" + testsvc.Redis(t) + "/0", "--prefix", prefix, "--instance-id", "crash-sink",
		"--session-timeout", "5s", "--max-records", "40"}
	start := func(failpoint string) *exec.Cmd {
		cmd := exec.Command(Binary(t), args...)
		cmd.Env = append(os.Environ(), failpointEnv(t, failpoint))
		cmd.Stderr = LogWriter(t, "sluice sink: ")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	// storeTotal is the sum of the partitions' next offsets in the store.
	storeTotal := func() int64 {
		var sum int64
		for _, v := range rdb.HGetAll(ctx, store.OffsetsKey()).Val() {
			var next, fence int64
			if _, err := fmt.Sscanf(v, `{"next":%d,"fence":%d}`, &next, &fence); err == nil && next > 0 {
				sum += next
			}
		}
		return sum
	}
	deadline := time.Now().Add(90 * time.Second)
	selfKilled, advanced, last := 0, 0, int64(0)
	for i := 0; i < iterations && time.Now().Before(deadline); i++ {
		fp := ""
		if step := steps[i%len(steps)]; step != "" {
			fp = step + ":" + strconv.Itoa(1+rng.IntN(3))
		}
		before := maxFence(ctx, rdb, store.OffsetsKey())
		cmd := start(fp)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// Until it claimed (see sinkProcess.untilClaimed), or 5 s.
	claim:
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && maxFence(ctx, rdb, store.OffsetsKey()) <= before; {
			select {
			case err := <-exited:
				exited <- err
				break claim
			case <-time.After(20 * time.Millisecond):
			}
		}
		select {
		case _ = <-exited: // it stopped itself at a failpoint
			selfKilled++
		case <-time.After(time.Duration(50+rng.IntN(600)) * time.Millisecond):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = <-exited // killed: its exit status says only that
		}
		if now := storeTotal(); now > last {
			advanced, last = advanced+1, now
		}
	}
	close(stopProducing)
	wg.Wait()
	t.Logf("%d records produced; %d of %d processes stopped at their failpoint; %d wrote before they died (%d records in the store)",
		produced.Load(), selfKilled, iterations, advanced, last)
	if advanced < iterations/4 {
		t.Errorf("only %d of %d processes wrote anything before they died: the loop tests little", advanced, iterations)
	}

	// A last process catches up and stops cleanly: SIGTERM once it has
	// joined (the store may be complete before it starts).
	final := startSinkProcess(t, "the last sink", args[2:])
	hw := make([]int64, partitions)
	for p := range partitions {
		fr, err := cl.Fetch(ctx, "orders", int32(p), client.At(0), client.FetchOptions{MaxRecords: 1})
		if err != nil {
			t.Fatal(err)
		}
		hw[p] = fr.HighWatermark
	}
	for p := range partitions {
		for {
			v, _ := rdb.HGet(ctx, store.OffsetsKey(), "orders/"+strconv.Itoa(p)).Result()
			var next, fence int64
			_, _ = fmt.Sscanf(v, `{"next":%d,"fence":%d}`, &next, &fence) // none yet: next stays 0
			if next == hw[p] {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("partition %d: store at %q, log end %d", p, v, hw[p])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	final.stop()

	// Every record once, in partition order.
	es, err := rdb.XRange(ctx, store.DataKey("orders"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, partitions)
	for _, e := range es {
		p, _ := strconv.Atoi(fmt.Sprint(e.Values["partition"]))
		off, _ := strconv.ParseInt(fmt.Sprint(e.Values["offset"]), 10, 64)
		if off != want[p] {
			t.Fatalf("partition %d: entry %s has offset %d, want %d (a record lost, doubled or out of order)", p, e.ID, off, want[p])
		}
		want[p]++
	}
	for p := range partitions {
		if want[p] != hw[p] {
			t.Errorf("partition %d: stream holds offsets below %d, the log ends at %d", p, want[p], hw[p])
		}
	}
	t.Logf("stream holds %d entries; log ends %v", len(es), hw)
}
