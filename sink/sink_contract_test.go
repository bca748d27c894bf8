package sink_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

// TestSinkOverStores runs sinks over every Store against an in-process
// cluster: the in-memory reference, the Redis store in stream and hash
// mode and the S3 archive, against the real Redis and S3 server of `make
// test`. What holds for each: a group of sinks writes every record once
// while members come and go, and a member paused past its session changes
// nothing when it wakes up.
func TestSinkOverStores(t *testing.T) {
	for _, f := range storeFixtures(true) {
		t.Run(f.name, func(t *testing.T) {
			t.Run("TwoSinksOneStopsMidway", func(t *testing.T) { sinkTwoOneStops(t, f.new(t)) })
			t.Run("ZombieSinkChangesNothing", func(t *testing.T) { sinkZombie(t, f.new(t)) })
		})
	}
}

// TwoSinksOneStopsMidway: two members of a group share a topic; one stops
// while records keep coming; the survivor finishes. The store holds the
// log: every record once, in partition order (or the log's fold by key).
func sinkTwoOneStops(t *testing.T, fx storeFixture) {
	const partitions, total = 4, 2000
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "orders", Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	var sinks []*runningSink
	for _, name := range []string{"first", "survivor"} {
		sinks = append(sinks, startSink(t, newClient(t, c.URL, nil), fx.open(t, sink.ClientLog(cl)), name, "two", []string{"orders"}, 0))
	}
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i += 200 {
			produceKeyed(t, cl, "orders", i, 200, 37, 11, 50)
			produced.Add(200)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Stop the first member once it has written something and about half
	// the records are produced.
	waitFor(t, "the first member to write", 30*time.Second, func() bool {
		return sinks[0].Stats().Written > 0 && produced.Load() >= total/2
	})
	sinks[0].stop(t)
	wg.Wait()

	log := logOf(t, cl, "orders", partitions)
	hw := make([]int64, partitions)
	for p := range log {
		hw[p] = int64(len(log[p]))
	}
	waitFor(t, "the store to reach the log end", 60*time.Second, func() bool {
		return slices.Equal(fx.ends(t, "orders", partitions), hw)
	})
	fx.holds(t, cl, "orders", log)
	t.Logf("stopped %+v, survivor %+v", sinks[0].Stats(), sinks[1].Stats())
}

// ZombieSinkChangesNothing: a sink paused in front of its write and cut
// off from the group past its session; another sink takes the partition,
// claims it with a higher fence and writes. When the first one's write
// finally runs, the store refuses it and is unchanged.
func sinkZombie(t *testing.T, fx storeFixture) {
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	next := func() int64 { return fx.ends(t, "orders", 1)[0] }

	produceKeyed(t, cl, "orders", 0, 100, 10, 0, 50)
	zs := newGatedStore(fx.open(t, sink.ClientLog(cl)))
	link := &cutTransport{}
	zombie := startSink(t, newClient(t, c.URL, &http.Client{Transport: link}), zs.store(), "zombie", "g", []string{"orders"}, 2*time.Second)
	waitFor(t, "the first sink to write 100 records", 30*time.Second, func() bool { return next() == 100 })

	// Pause the first sink in front of its next write, then cut it off.
	zs.hold()
	produceKeyed(t, cl, "orders", 100, 50, 10, 0, 50)
	waitFor(t, "the first sink to hold a batch", 30*time.Second, func() bool { return zs.waiting.Load() > 0 })
	link.cut.Store(true)

	// The second sink gets the partition once the first one's session
	// expires, claims it with a higher fence and writes.
	heir := startSink(t, newClient(t, c.URL, nil), fx.open(t, sink.ClientLog(cl)), "heir", "g", []string{"orders"}, 0)
	waitFor(t, "the second sink to write the rest", 30*time.Second, func() bool { return next() == 150 })
	produceKeyed(t, cl, "orders", 150, 20, 10, 0, 20)
	waitFor(t, "the second sink to write the last records", 30*time.Second, func() bool { return next() == 170 })
	before := fx.state(t)

	// The zombie wakes up: its held write runs under its old fence.
	zs.release()
	waitFor(t, "the zombie's write to be refused", 30*time.Second, func() bool { return zs.refused.Load() > 0 })
	wantUnchanged(t, fx, "the zombie's write", before)
	// The store answers before the sink counts the refusal.
	waitFor(t, "the zombie to count its fenced write", 30*time.Second, func() bool { return zombie.Stats().Fenced > 0 })
	link.cut.Store(false)
	fx.holds(t, cl, "orders", logOf(t, cl, "orders", 1))
	t.Logf("zombie %+v, heir %+v", zombie.Stats(), heir.Stats())
}

// gatedStore holds Write calls while its gate is closed: a sink paused
// between its poll and its write.
type gatedStore struct {
	sink.Store
	mu      sync.Mutex
	gate    chan struct{} // closed: writes pass
	waiting atomic.Int32
	refused atomic.Int32
}

func newGatedStore(s sink.Store) *gatedStore {
	g := &gatedStore{Store: s, gate: make(chan struct{})}
	close(g.gate)
	return g
}

// store is what the sink is given: g, with the Flusher's and Finisher's
// methods of a store that has them.
func (g *gatedStore) store() sink.Store {
	if _, ok := g.Store.(sink.Flusher); ok {
		return gatedFlusher{g}
	}
	return g
}

func (g *gatedStore) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) release() {
	g.mu.Lock()
	close(g.gate)
	g.mu.Unlock()
}

func (g *gatedStore) Write(ctx context.Context, tp api.TopicPartition, fence int64, recs []sink.Record) (int64, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	g.waiting.Add(1)
	<-gate
	g.waiting.Add(-1)
	n, err := g.Store.Write(context.WithoutCancel(ctx), tp, fence, recs)
	if errors.Is(err, sink.ErrFenced) {
		g.refused.Add(1)
	}
	return n, err
}

// gatedFlusher is a gatedStore over a Flusher: flushes pass (a paused sink
// polls no more, so it flushes no more), and their refusals count.
type gatedFlusher struct{ *gatedStore }

func (g gatedFlusher) Flush(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	n, err := g.Store.(sink.Flusher).Flush(ctx, tp, fence)
	if errors.Is(err, sink.ErrFenced) {
		g.refused.Add(1)
	}
	return n, err
}

func (g gatedFlusher) Forget(tp api.TopicPartition) { g.Store.(sink.Flusher).Forget(tp) }

func (g gatedFlusher) Finish(ctx context.Context) error {
	if f, ok := g.Store.(sink.Finisher); ok {
		return f.Finish(ctx)
	}
	return nil
}

// cutTransport fails every request while cut: a member cut off from the
// gateways, whose session runs out.
type cutTransport struct{ cut atomic.Bool }

func (c *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("link cut by the test")
	}
	return http.DefaultTransport.RoundTrip(r)
}
