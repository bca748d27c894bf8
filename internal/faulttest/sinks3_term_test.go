package faulttest

import (
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// TestSinkS3TermFinishesObject: SIGTERM stops `sluice sink s3` without a
// partial write. First with an object's upload held on its way to S3 (by
// a proxy) when the signal comes: the upload is abandoned with the run,
// and the process creates that object again before it exits, so the range
// its fence object reserves is stored. Then at random moments, four times
// under a producer: each process exits 0 and leaves the archive without
// gap or overlap (a reserved range may be left for the next owner: some
// runs do, for a reason not yet pinned down; DESIGN.md, open differences).
// A last process archives the rest; the archive holds the log once.
func TestSinkS3TermFinishesObject(t *testing.T) {
	const partitions = 2
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	c, cl, ctx := sinkCluster(t, partitions, 2*time.Minute)
	s3 := newSinkS3(t, ctx)
	for i := 0; i < 4000; i += 200 {
		recs := make([]client.Record, 0, 200)
		for j := i; j < i+200; j++ {
			recs = append(recs, client.Record{Key: []byte("k" + strconv.Itoa(j%50)), Value: []byte(`{"n":` + strconv.Itoa(j) + `,"pad":"0123456789abcdef0123456789abcdef"}`)})
		}
		if _, err := cl.Produce(ctx, "orders", recs, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	args := func(endpoint string) []string {
		return append([]string{"sink", "s3", "--url", c.URL, "--group", "s3term", "--topics", "orders",
			"--instance-id", "s3-term-sink", "--session-timeout", "5s", "--poll-records", "250",
			"--max-records", "500", "--max-interval", "300ms"}, s3.args(endpoint)...)
	}
	// reservedStored asserts that every partition's reserved range has its
	// object (a SIGTERMed sink stores what it reserved, even a reservation
	// whose answer it never got, and the ranges of partitions it lost just
	// before) and that the archive has no gap or overlap.
	reservedStored := func(when string) {
		t.Helper()
		ends := s3.archivedEnds(t, ctx, "orders", partitions)
		for p := range partitions {
			if f, ok := s3.fence(t, ctx, "orders", p); ok && f.Next >= 0 && f.Next != ends[p] {
				t.Fatalf("%s: orders/%d reserves offsets below %d (fence object %+v), the objects end at %d", when, p, f.Next, f, ends[p])
			}
		}
		if problems := s3.verify(t, ctx, cl, "orders", true); len(problems) > 0 {
			t.Fatalf("%s: %v", when, problems)
		}
	}

	// An object's upload held when SIGTERM comes.
	proxy := startHoldProxyFor(t, s3.cfg.Endpoint, " 412 Precondition Failed")
	proxy.arm(".ndjson.gz HTTP/1.1")
	p := startSluiceProcess(t, "held sink", args(proxy.addr()), s3.env())
	select {
	case <-proxy.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no object upload within 30s")
	}
	held := proxy.heldBytes()
	t.Logf("held: %.120q", held)
	p.signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	proxy.release()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20s after SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("the sink with its upload held, after SIGTERM: %v", p.err)
	}
	reservedStored("after SIGTERM with an upload held")
	t.Logf("after SIGTERM with an upload held: archived to %v", s3.archivedEnds(t, ctx, "orders", partitions))

	// SIGTERM at random moments, under a producer.
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)
	for i := range 4 {
		p := startSluiceProcess(t, "sink "+strconv.Itoa(i), args(s3.cfg.Endpoint), s3.env())
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		p.stop()
		reservedStored("after SIGTERM " + strconv.Itoa(i))
	}
	prod.stop()

	last := startSluiceProcess(t, "last sink", append(args(s3.cfg.Endpoint), "--poll-records", "2000", "--max-records", "5000"), s3.env())
	ends := logEnds(t, ctx, cl, "orders", partitions)
	s3.waitCaughtUp(t, ctx, "orders", ends)
	last.stop()
	s3.checkArchive(t, ctx, cl, "orders", readLog(t, ctx, cl, "orders", partitions))
	t.Logf("log ends %v; the archive holds the log", ends)
}
