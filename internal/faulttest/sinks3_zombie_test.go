package faulttest

import (
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fencePut matches a conditional replacement of a partition's fence
// object (an S3 PUT with If-Match: a range reserved), and names the
// partition.
var fencePut = regexp.MustCompile(`^PUT /[^ ]*/orders/(\d+)/fence\.json[? ]`)

// TestSinkS3ZombieProcessRefused: a `sluice sink s3` process (the zombie)
// is caught with a range reservation on its way to S3 (held by a proxy)
// and SIGSTOPped there, past its group session. A second process takes
// its partitions over, claims them with higher fences and archives an
// object of that partition past the zombie's; its next reservation is
// held too, so the bucket stands still. Then the zombie's request reaches
// S3: it is refused (412), and the bucket is unchanged. The zombie is
// resumed; its metrics count the refused write. Both then run to the end
// of the log, which the archive holds once, with nothing else.
func TestSinkS3ZombieProcessRefused(t *testing.T) {
	const partitions = 3
	c, cl, ctx := sinkCluster(t, partitions, 2*time.Minute)
	s3 := newSinkS3(t, ctx)
	prod := startKeyedProducer(t, ctx, cl, "orders", 50, false)

	args := func(proxy *holdProxy, metrics string) []string {
		return append([]string{"sink", "s3", "--url", c.URL, "--group", "s3zombie", "--topics", "orders",
			"--session-timeout", "2s", "--poll-records", "100", "--max-records", "200", "--max-interval", "200ms",
			"--metrics-addr", metrics}, s3.args(proxy.addr())...)
	}
	wait := func(what string, ch <-chan struct{}, d time.Duration) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(d):
			t.Fatalf("%s: not within %s", what, d)
		}
	}

	// The zombie archives every partition for a while.
	zProxy := startHoldProxyFor(t, s3.cfg.Endpoint, " 412 Precondition Failed")
	zMetrics := freeAddr(t)
	zombie := startSluiceProcess(t, "zombie", args(zProxy, zMetrics), s3.env())
	for {
		ends := s3.archivedEnds(t, ctx, "orders", partitions)
		if ends[0] > 0 && ends[1] > 0 && ends[2] > 0 {
			t.Logf("the zombie archived every partition: to %v", ends)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the zombie never archived every partition: %v", ends)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Its next reservation is held on the way, and the process stopped at
	// once (the held request cannot time out in a stopped process).
	zProxy.arm("If-Match:")
	wait("a zombie reservation", zProxy.held, 15*time.Second)
	zombie.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	time.Sleep(100 * time.Millisecond) // the rest of the request, if it came in pieces
	m := fencePut.FindSubmatch(zProxy.heldBytes())
	if m == nil {
		t.Fatalf("the held bytes are not a fence object's PUT: %.300q", zProxy.heldBytes())
	}
	p, _ := strconv.Atoi(string(m[1]))
	zf, _ := s3.fence(t, ctx, "orders", p)
	zEnd := s3.archivedEnds(t, ctx, "orders", partitions)[p]
	t.Logf("zombie stopped with a reservation of orders/%d on its way; the fence object holds %+v; archived to %d", p, zf, zEnd)

	// The successor takes over once the zombie's session has expired,
	// claims the partition above the zombie's fence and archives past it;
	// then its next reservation is held.
	bProxy := startHoldProxyFor(t, s3.cfg.Endpoint, " 412 Precondition Failed")
	bMetrics := freeAddr(t)
	successor := startSluiceProcess(t, "successor", args(bProxy, bMetrics), s3.env())
	for {
		f, _ := s3.fence(t, ctx, "orders", p)
		end := s3.archivedEnds(t, ctx, "orders", partitions)[p]
		if f.Fence > zf.Fence && end > zEnd {
			t.Logf("the successor holds orders/%d at fence %d and archived it to %d, %s after the zombie stopped",
				p, f.Fence, end, time.Since(stoppedAt).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("orders/%d: the successor never archived above the zombie's fence %d (fence object %+v, archived to %d)", p, zf.Fence, f, end)
		}
		time.Sleep(20 * time.Millisecond)
	}
	bProxy.arm("If-Match:")
	wait("the successor's next reservation", bProxy.held, 15*time.Second)
	time.Sleep(100 * time.Millisecond)
	before := s3.bucketState(t, ctx)

	// The zombie's reservation lands; the zombie wakes up.
	zProxy.release()
	wait("S3 refusing the zombie's reservation", zProxy.fenced, 10*time.Second)
	if after := s3.bucketState(t, ctx); after != before {
		t.Fatalf("the zombie's refused reservation changed the bucket:\nbefore\n%s\nafter\n%s", before, after)
	}
	zombie.signal(syscall.SIGCONT)
	var (
		refused float64
		err     error
	)
	for {
		refused, err = scrapeMetric(zMetrics, `sluice_sink_batches_total{result="fenced"}`)
		if err == nil && refused >= 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the zombie's metrics never counted the refused write (last %v, %v)", refused, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the bucket is unchanged by the zombie's reservation; the zombie counts %v fenced write(s)", refused)

	// Both run on; the archive ends up holding the log once.
	bProxy.release()
	time.Sleep(time.Second)
	prod.stop()
	ends := logEnds(t, ctx, cl, "orders", partitions)
	s3.waitCaughtUp(t, ctx, "orders", ends)
	s3.checkArchive(t, ctx, cl, "orders", readLog(t, ctx, cl, "orders", partitions))
	zObjects, _ := scrapeMetric(zMetrics, `sluice_sink_objects_total{topic="orders"}`)
	bObjects, _ := scrapeMetric(bMetrics, `sluice_sink_objects_total{topic="orders"}`)
	zombie.stop()
	successor.stop()
	t.Logf("%d records produced; log ends %v; objects created: zombie %v, successor %v", prod.produced.Load(), ends, zObjects, bObjects)
}
