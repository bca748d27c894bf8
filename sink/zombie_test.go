package sink_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

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

// cutTransport fails every request while cut: a member cut off from the
// gateways, whose session runs out.
type cutTransport struct{ cut atomic.Bool }

func (c *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("link cut by the test")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestZombieSinkChangesNothing: a sink paused in front of its write and cut
// off from the group past its session; another sink takes the partition,
// claims it with a higher fence and writes. When the first one's write
// finally runs, the store refuses it and Redis is unchanged.
func TestZombieSinkChangesNothing(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c.URL, nil)
	rdb := redisClient(t)
	prefix := uniquePrefix(t, rdb)
	if _, err := cl.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	rs, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: "g", Mode: sink.ModeStream, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	next := func() int64 { return storedNext(t, rdb, rs.OffsetsKey(), "orders", 1)[0] }

	produceKeyed(t, cl, "orders", 0, 100, 10, 0, 50)
	zs := newGatedStore(rs)
	link := &cutTransport{}
	zombie := startSink(t, newClient(t, c.URL, &http.Client{Transport: link}), zs, "zombie", "g", []string{"orders"}, 2*time.Second)
	waitFor(t, "the first sink to write 100 records", 30*time.Second, func() bool { return next() == 100 })

	// Pause the first sink in front of its next write, then cut it off.
	zs.hold()
	produceKeyed(t, cl, "orders", 100, 50, 10, 0, 50)
	waitFor(t, "the first sink to hold a batch", 30*time.Second, func() bool { return zs.waiting.Load() > 0 })
	link.cut.Store(true)

	// The second sink gets the partition once the first one's session
	// expires, claims it with a higher fence and writes.
	heir := startSink(t, newClient(t, c.URL, nil), rs, "heir", "g", []string{"orders"}, 0)
	waitFor(t, "the second sink to write the rest", 30*time.Second, func() bool { return next() == 150 })
	produceKeyed(t, cl, "orders", 150, 20, 10, 0, 20)
	waitFor(t, "the second sink to write the last records", 30*time.Second, func() bool { return next() == 170 })
	before := fmt.Sprint(rdb.XRange(context.Background(), rs.DataKey("orders"), "-", "+").Val(), rdb.HGetAll(context.Background(), rs.OffsetsKey()).Val())

	// The zombie wakes up: its held write runs under its old fence.
	zs.release()
	waitFor(t, "the zombie's write to be refused", 30*time.Second, func() bool { return zs.refused.Load() > 0 })
	after := fmt.Sprint(rdb.XRange(context.Background(), rs.DataKey("orders"), "-", "+").Val(), rdb.HGetAll(context.Background(), rs.OffsetsKey()).Val())
	if before != after {
		t.Fatalf("the zombie's write changed Redis")
	}
	if zombie.Stats().Fenced == 0 {
		t.Fatalf("the zombie does not count a fenced write: %+v", zombie.Stats())
	}
	link.cut.Store(false)
	checkStream(t, rdb, rs.DataKey("orders"), logOf(t, cl, "orders", 1))
	t.Logf("zombie %+v, heir %+v", zombie.Stats(), heir.Stats())
}
