package gateway

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/gogroup"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// fakeLeader is a partition leader for the coalescer: it appends each
// body's batches in order, holds every send until released while hold is
// set, and refuses a body that holds a batch marked bad.
type fakeLeader struct {
	mu     sync.Mutex
	next   int64
	bodies [][]byte // every body received, in order
	hold   chan struct{}
	held   chan struct{} // gets a value when a send starts being held
	who    []string      // the principal of each send
}

func (f *fakeLeader) produce(ctx context.Context, topic string, p int32, acks string, body []byte) (brokerapi.ProduceResult, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		f.held <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.who = append(f.who, auth.PrincipalFrom(ctx))
	f.bodies = append(f.bodies, bytes.Clone(body))
	var n int64
	_, err := recordbatch.Scan(body, true, func(h recordbatch.Header, b []byte) error {
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if string(r.Value) == "bad" {
				return api.Errorf(api.CodeInvalidTimestamp, "a bad record")
			}
		}
		n += int64(h.LastOffsetDelta) + 1
		return nil
	})
	if err != nil {
		return brokerapi.ProduceResult{}, err
	}
	base := f.next
	f.next += n
	return brokerapi.ProduceResult{BaseOffset: base, LastOffset: base + n - 1, HighWatermark: f.next}, nil
}

func testCoalescer(f *fakeLeader, budget int64) (*coalescer, *gogroup.Group) {
	wg := &gogroup.Group{}
	return &coalescer{
		produce: f.produce, mem: &memBudget{limit: budget}, ctx: context.Background(), goFunc: wg.Go,
		sends:   prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}),
		queues:  map[sendKey]*sendQueue{},
	}, wg
}

func encode(t *testing.T, values ...string) []byte {
	t.Helper()
	rs := make([]recordbatch.Record, len(values))
	for i, v := range values {
		rs[i] = recordbatch.Record{Value: []byte(v), Timestamp: 1}
	}
	b, err := recordbatch.Encode(nil, rs, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type sendOutcome struct {
	res brokerapi.ProduceResult
	err error
}

// fill holds the leader, starts maxSendsInFlight sends that it holds and
// then n more requests of two records each, which queue; it returns their
// outcomes, in the order of the requests.
func fill(t *testing.T, c *coalescer, f *fakeLeader, ctx context.Context, n int, value func(i int) string) []chan sendOutcome {
	t.Helper()
	f.hold, f.held = make(chan struct{}), make(chan struct{}, maxSendsInFlight)
	var outs []chan sendOutcome
	start := func(ctx context.Context, b []byte, records int64) chan sendOutcome {
		out := make(chan sendOutcome, 1)
		go func() {
			res, err := c.send(ctx, "t", 0, "all", b, records)
			out <- sendOutcome{res, err}
		}()
		return out
	}
	for i := 0; i < maxSendsInFlight; i++ {
		outs = append(outs, start(ctx, encode(t, "first", "first"), 2))
		<-f.held
	}
	for i := 0; i < n; i++ {
		outs = append(outs, start(ctx, encode(t, value(i), value(i)), 2))
		waitFor(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			q := c.queues[sendKey{topic: "t", acks: "all", principal: auth.PrincipalFrom(ctx)}]
			return q != nil && len(q.waiting) == i+1
		})
	}
	return outs
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the condition", cond)
}

// Requests that arrive while a partition's sends are all under way go out
// together in one body when one ends, and each gets the offsets its own
// records were written at.
func TestCoalescedSendsGiveEachRequestItsOffsets(t *testing.T) {
	f := &fakeLeader{}
	c, wg := testCoalescer(f, 64<<20)
	ctx := auth.WithPrincipal(context.Background(), "User:alice")
	outs := fill(t, c, f, ctx, 10, func(i int) string { return fmt.Sprintf("v%d", i) })
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	got := map[int64]string{}
	for i, out := range outs {
		o := <-out
		if o.err != nil {
			t.Fatalf("request %d: %v", i, o.err)
		}
		if o.res.LastOffset != o.res.BaseOffset+1 {
			t.Fatalf("request %d: offsets %d-%d for two records", i, o.res.BaseOffset, o.res.LastOffset)
		}
		want := "first"
		if i >= maxSendsInFlight {
			want = fmt.Sprintf("v%d", i-maxSendsInFlight)
		}
		got[o.res.BaseOffset], got[o.res.LastOffset] = want, want
	}
	wg.Close()
	// What the leader wrote at each offset is what the request given that
	// offset sent.
	var off int64
	for _, body := range f.bodies {
		_, err := recordbatch.Scan(body, true, func(h recordbatch.Header, b []byte) error {
			_, recs, _ := recordbatch.Decode(b)
			for _, r := range recs {
				if got[off] != string(r.Value) {
					t.Errorf("offset %d holds %q, its request sent %q", off, r.Value, got[off])
				}
				off++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(f.bodies) != maxSendsInFlight+1 {
		t.Fatalf("%d sends, want %d (the queued ten in one)", len(f.bodies), maxSendsInFlight+1)
	}
	if s, b := counterValue(c.sends), counterValue(c.batches); s != 3 || b != 12 {
		t.Fatalf("metrics: %v sends of %v batches, want 3 of 12", s, b)
	}
	for _, p := range f.who {
		if p != "User:alice" {
			t.Fatalf("a send acted for %q, want User:alice", p)
		}
	}
	if len(c.queues) != 0 {
		t.Fatalf("%d queues left after the sends", len(c.queues))
	}
}

// A body refused whole for one request's batch is sent again batch by
// batch: only that request gets the error.
func TestCoalescedSendRefusedWholeIsRetriedAlone(t *testing.T) {
	f := &fakeLeader{}
	c, wg := testCoalescer(f, 64<<20)
	outs := fill(t, c, f, context.Background(), 4, func(i int) string {
		if i == 2 {
			return "bad"
		}
		return "ok"
	})
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	for i, out := range outs {
		o := <-out
		bad := i == maxSendsInFlight+2
		if bad != (o.err != nil) {
			t.Fatalf("request %d (bad %v): %v", i, bad, o.err)
		}
		if bad && api.Classify(o.err).Code != api.CodeInvalidTimestamp {
			t.Fatalf("the bad request got %v", o.err)
		}
	}
	wg.Close()
	if f.next != 2*(maxSendsInFlight+3) {
		t.Fatalf("the leader holds %d records, want %d", f.next, 2*(maxSendsInFlight+3))
	}
}

// A queued request whose context ends leaves the queue: it is never sent,
// and says so.
func TestQueuedRequestThatGivesUpIsNotSent(t *testing.T) {
	f := &fakeLeader{}
	c, wg := testCoalescer(f, 64<<20)
	ctx, cancel := context.WithCancel(context.Background())
	outs := fill(t, c, f, ctx, 1, func(int) string { return "late" })
	cancel()
	o := <-outs[maxSendsInFlight]
	if e := api.Classify(o.err); e.Code != api.CodeRequestTimedOut {
		t.Fatalf("the request that gave up got %v", o.err)
	}
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	for _, out := range outs[:maxSendsInFlight] {
		<-out
	}
	wg.Close()
	for _, body := range f.bodies {
		if bytes.Contains(body, []byte("late")) {
			t.Fatal("the request that gave up was sent")
		}
	}
}

// With no room in the produce memory budget for a coalesced body's copy,
// the queued batches go one by one: nothing waits on memory, nothing is
// lost.
func TestCoalescingWithoutBudgetSendsOneByOne(t *testing.T) {
	f := &fakeLeader{}
	c, wg := testCoalescer(f, 1)
	outs := fill(t, c, f, context.Background(), 3, func(int) string { return "x" })
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	for i, out := range outs {
		if o := <-out; o.err != nil {
			t.Fatalf("request %d: %v", i, o.err)
		}
	}
	wg.Close()
	if len(f.bodies) != maxSendsInFlight+3 {
		t.Fatalf("%d sends, want %d", len(f.bodies), maxSendsInFlight+3)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
