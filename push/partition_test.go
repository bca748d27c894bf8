package push

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// loopCluster is one partition's log in memory, for a partition loop
// alone: fetches at its end wait until records are added, commits are
// kept, and each commit is checked against the commit rule with
// acknowledged (the offsets the endpoint answered 2xx for, or that were
// dead-lettered).
type loopCluster struct {
	t *testing.T

	mu      sync.Mutex // guards everything below
	recs    []recordbatch.Record
	grown   chan struct{} // closed when records are added
	waiting chan struct{} // closed when a fetch waits at the end
	commits []api.PartitionOffset
	dlt     []recordbatch.Record
	acked   map[int64]bool
}

func newLoopCluster(t *testing.T) *loopCluster {
	return &loopCluster{t: t, grown: make(chan struct{}), waiting: make(chan struct{}), acked: map[int64]bool{}}
}

// add appends n records (key keyOf(i), or none when keyOf is nil).
func (c *loopCluster) add(n int, keyOf func(i int) string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		o := int64(len(c.recs))
		r := recordbatch.Record{Offset: o, Timestamp: time.Now().UnixMilli(), Value: []byte(fmt.Sprintf(`{"n":%d}`, o))}
		if keyOf != nil {
			r.Key = []byte(keyOf(int(o)))
		}
		c.recs = append(c.recs, r)
	}
	close(c.grown)
	c.grown = make(chan struct{})
}

func (c *loopCluster) ack(offsets ...int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range offsets {
		c.acked[o] = true
	}
}

func (c *loopCluster) Fetch(ctx context.Context, _ api.TopicPartition, offset, maxBytes int64, wait time.Duration) ([]recordbatch.Record, int64, error) {
	for {
		c.mu.Lock()
		if offset < int64(len(c.recs)) {
			out := slices.Clone(c.recs[offset:min(offset+100, int64(len(c.recs)))])
			c.mu.Unlock()
			return out, out[len(out)-1].Offset + 1, nil
		}
		grown := c.grown
		close(c.waiting)
		c.waiting = make(chan struct{})
		c.mu.Unlock()
		select {
		case <-grown:
		case <-ctx.Done():
			return nil, offset, ctx.Err()
		case <-time.After(wait):
			return nil, offset, nil
		}
	}
}

func (c *loopCluster) Commit(_ context.Context, _ string, req api.CommitRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, po := range req.Offsets {
		for o := int64(0); o < po.Offset; o++ {
			if !c.acked[o] {
				c.t.Errorf("a commit of offset %d passes offset %d, which was neither acknowledged nor dead-lettered", po.Offset, o)
			}
		}
		c.commits = append(c.commits, po)
	}
	return nil
}

func (c *loopCluster) Produce(_ context.Context, _ string, rec recordbatch.Record) error {
	off := int64(-1)
	for _, h := range rec.Headers {
		if h.Key == api.DLTHeaderOffset {
			_, _ = fmt.Sscan(string(h.Value), &off)
		}
	}
	c.mu.Lock()
	c.dlt = append(c.dlt, rec)
	c.mu.Unlock()
	c.ack(off)
	return nil
}

// last is the last commit (offset -1 before any).
func (c *loopCluster) last() api.PartitionOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.commits) == 0 {
		return api.PartitionOffset{Offset: -1}
	}
	return c.commits[len(c.commits)-1]
}

func (c *loopCluster) Join(context.Context, string, api.JoinGroupRequest) (api.JoinGroupResponse, error) {
	return api.JoinGroupResponse{}, nil
}
func (c *loopCluster) Heartbeat(context.Context, string, string) (api.HeartbeatResponse, error) {
	return api.HeartbeatResponse{}, nil
}
func (c *loopCluster) Starts(context.Context, string, string) ([]Start, error) { return nil, nil }
func (c *loopCluster) Leave(context.Context, string, string) error             { return nil }
func (c *loopCluster) Resolve(context.Context, api.TopicPartition, string) (int64, error) {
	return 0, nil
}
func (c *loopCluster) Render(r *recordbatch.Record) api.FetchedRecord { return testRender(r) }
func (c *loopCluster) Partitions(string) (int, bool)                  { return 1, true }

// loopRequest is one request the endpoint of a loop test took.
type loopRequest struct {
	offsets []int64
	key     string // of the first record
	attempt string
}

// readLoopRequest reads a json-format request's records.
func readLoopRequest(t *testing.T, r *http.Request) loopRequest {
	body, _ := io.ReadAll(r.Body)
	var recs []api.GroupRecord
	if strings.HasPrefix(string(body), "[") {
		if err := json.Unmarshal(body, &recs); err != nil {
			t.Errorf("a batch body: %v", err)
		}
	} else {
		var one api.GroupRecord
		if err := json.Unmarshal(body, &one); err != nil {
			t.Errorf("a body: %v", err)
		}
		recs = append(recs, one)
	}
	lr := loopRequest{attempt: r.Header.Get(HeaderAttempt)}
	for _, rec := range recs {
		lr.offsets = append(lr.offsets, rec.Offset)
	}
	if len(recs) > 0 && recs[0].Key != nil {
		lr.key = *recs[0].Key
	}
	return lr
}

// runLoop runs one partition loop of a subscription cfg (normalized here)
// against c and an endpoint answering with handler, until every one of n
// records is committed; then it stops the loop.
func runLoop(t *testing.T, c *loopCluster, cfg api.PushConfig, n int64, handler http.HandlerFunc) {
	t.Helper()
	srv := httptest.NewServer(handler)
	defer srv.Close()
	cfg.Name, cfg.Topics, cfg.Endpoint, cfg.Format = "loop", []string{"t"}, srv.URL, api.PushFormatJSON
	cfg, err := Normalize(cfg)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := NewSecret()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := newSubscriptionRun(&Subscription{Config: cfg, Secrets: []Secret{{Key: secret}}}, "i", "c", c, nil, NewHTTPClient(true), log,
		NewMetrics(nil).forSubscription(cfg.Name), nil, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	r.member.Store(&memberInfo{id: "m", epoch: 1})
	p := newPartition(r, Start{TopicPartition: api.TopicPartition{Topic: "t"}}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for c.last().Offset < n || c.last().Metadata != "" {
		if time.Now().After(deadline) {
			t.Errorf("after a minute the last commit is %+v, want offset %d", c.last(), n)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("the loop ended with %v", err)
	}
}

// Ordering none: up to max_in_flight batches at once, a refused record
// sent again on its own after its backoff while the others go on, and
// commits that never pass a record not acknowledged.
func TestPartitionLoopOrderingNone(t *testing.T) {
	c := newLoopCluster(t)
	c.add(300, nil)
	var (
		mu       sync.Mutex
		inFlight int
		most     int
		reqs     []loopRequest
		refused  = map[int64]bool{}
		second   = make(chan struct{})
		once     sync.Once
	)
	runLoop(t, c, api.PushConfig{Ordering: api.PushOrderNone, MaxInFlight: 8, Batch: api.PushBatch{MaxRecords: 5},
		Retry: api.PushRetry{MinBackoffMs: 5, MaxBackoffMs: 20}}, 300, func(w http.ResponseWriter, r *http.Request) {
		lr := readLoopRequest(t, r)
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		n := len(reqs)
		reqs = append(reqs, lr)
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		switch n {
		case 0: // the first request waits for a second one beside it
			select {
			case <-second:
			case <-time.After(30 * time.Second):
				t.Error("no second request came while the first was in flight (max_in_flight 8)")
			}
		case 1:
			once.Do(func() { close(second) })
		}
		mu.Lock()
		var ok []int64
		for _, o := range lr.offsets {
			if (o == 17 || o == 123) && !refused[o] {
				refused[o] = true
				mu.Unlock()
				w.WriteHeader(http.StatusUnprocessableEntity)
				return
			}
			ok = append(ok, o)
		}
		mu.Unlock()
		c.ack(ok...)
		w.WriteHeader(http.StatusNoContent)
	})
	mu.Lock()
	defer mu.Unlock()
	if most > 8 {
		t.Errorf("%d requests in flight at once, max_in_flight 8", most)
	}
	sent := map[int64]int{}
	for _, r := range reqs {
		if len(r.offsets) > 5 {
			t.Errorf("a batch of %d", len(r.offsets))
		}
		for _, o := range r.offsets {
			sent[o]++
		}
	}
	for o := range int64(300) {
		want := 1
		if o == 17 || o == 123 {
			want = 2
		}
		if sent[o] < want {
			t.Errorf("offset %d sent %d times, want at least %d", o, sent[o], want)
		}
	}
}

// Ordering key: one request per key at a time, in offset order per key; a
// key held up by a slow answer, or by a refusal and its backoff, holds up
// no other key.
func TestPartitionLoopOrderingKey(t *testing.T) {
	c := newLoopCluster(t)
	keyOf := func(i int) string { return fmt.Sprintf("k%d", i%5) }
	c.add(200, keyOf)
	var (
		mu        sync.Mutex
		busy      = map[string]bool{}
		next      = map[string]int64{}
		progress  = make(chan struct{}, 1000) // a record of another key than k1 acknowledged
		refusedK3 bool
	)
	runLoop(t, c, api.PushConfig{Ordering: api.PushOrderKey, MaxInFlight: 4, Retry: api.PushRetry{MinBackoffMs: 5, MaxBackoffMs: 20}}, 200,
		func(w http.ResponseWriter, r *http.Request) {
			lr := readLoopRequest(t, r)
			if len(lr.offsets) != 1 {
				t.Errorf("a request of %d records with ordering key", len(lr.offsets))
				return
			}
			o := lr.offsets[0]
			mu.Lock()
			if busy[lr.key] {
				t.Errorf("key %s: offset %d sent while another of its records is in flight", lr.key, o)
			}
			busy[lr.key] = true
			mu.Unlock()
			if o == 1 { // k1's first: held until 20 records of other keys went through
				deadline := time.After(30 * time.Second)
				for n := 0; n < 20; {
					select {
					case <-progress:
						n++
					case <-deadline:
						t.Error("other keys did not progress while k1 was held")
						n = 20
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			busy[lr.key] = false
			if lr.key == "k3" && !refusedK3 {
				refusedK3 = true
				w.WriteHeader(http.StatusUnprocessableEntity)
				return
			}
			if o != next[lr.key]*5+int64(lr.key[1]-'0') {
				t.Errorf("key %s: offset %d acknowledged, want %d", lr.key, o, next[lr.key]*5+int64(lr.key[1]-'0'))
			}
			next[lr.key]++
			if lr.key != "k1" {
				progress <- struct{}{}
			}
			c.ack(o)
			w.WriteHeader(http.StatusOK)
		})
	mu.Lock()
	defer mu.Unlock()
	for k := range 5 {
		if n := next[fmt.Sprintf("k%d", k)]; n != 40 {
			t.Errorf("key k%d: %d records acknowledged, want 40", k, n)
		}
	}
}

// Ordering partition: strictly in order; a poison record is tried
// max_attempts times, its count committed before each retry, then
// dead-lettered, and the partition goes on.
func TestPartitionLoopPoisonRecord(t *testing.T) {
	c := newLoopCluster(t)
	c.add(30, nil)
	var (
		mu       sync.Mutex
		acked    []int64
		attempts []string
	)
	runLoop(t, c, api.PushConfig{Retry: api.PushRetry{MinBackoffMs: 2, MaxBackoffMs: 10, MaxAttempts: 3}}, 30,
		func(w http.ResponseWriter, r *http.Request) {
			lr := readLoopRequest(t, r)
			o := lr.offsets[0]
			if o == 5 {
				mu.Lock()
				attempts = append(attempts, lr.attempt)
				mu.Unlock()
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			acked = append(acked, o)
			mu.Unlock()
			c.ack(o)
			w.WriteHeader(http.StatusOK)
		})
	mu.Lock()
	defer mu.Unlock()
	want := []int64{0, 1, 2, 3, 4}
	for o := int64(6); o < 30; o++ {
		want = append(want, o)
	}
	if !slices.Equal(acked, want) {
		t.Errorf("acknowledged %v, want %v", acked, want)
	}
	if !slices.Equal(attempts, []string{"1", "2", "3"}) {
		t.Errorf("offset 5 was tried with sluice-attempt %v, want 1, 2, 3", attempts)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dlt) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(c.dlt))
	}
	counted := map[int]bool{}
	for _, po := range c.commits {
		if po.Offset == 5 {
			counted[HeadAttempts(po.Metadata, 5)] = true
		}
	}
	if !counted[1] || !counted[2] {
		t.Errorf("the commits at offset 5 carried attempts %v, want 1 and 2 among them", counted)
	}
}

// batch.max_wait_ms: records left over once a request is answered wait
// while the fetch is out, and go as one full batch when more come.
func TestPartitionLoopBatchWaits(t *testing.T) {
	c := newLoopCluster(t)
	waitingAt := func() <-chan struct{} {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waiting
	}
	release := make(chan struct{})
	w := waitingAt()
	c.add(3, nil)
	go func() {
		<-w // the loop sent 0..2 and waits for more
		w = waitingAt()
		c.add(2, nil)
		<-w // it fetched 3..4, which wait for the request out
		close(release)
		for c.last().Offset != 3 { // the answer was taken (the commit follows it in the same turn)
			time.Sleep(time.Millisecond)
		}
		c.add(8, nil)
	}()
	var (
		mu    sync.Mutex
		sizes []int
	)
	runLoop(t, c, api.PushConfig{Ordering: api.PushOrderNone, MaxInFlight: 1, Batch: api.PushBatch{MaxRecords: 10, MaxWaitMs: 60_000}}, 13,
		func(w http.ResponseWriter, r *http.Request) {
			lr := readLoopRequest(t, r)
			mu.Lock()
			sizes = append(sizes, len(lr.offsets))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-release
			}
			c.ack(lr.offsets...)
			w.WriteHeader(http.StatusOK)
		})
	if !slices.Equal(sizes, []int{3, 10}) {
		t.Errorf("batches of %v, want 3 then 10", sizes)
	}
}

// The heap gives back what it holds least first.
func TestSlotHeap(t *testing.T) {
	h := slotHeap{less: byOffset}
	offs := []int64{5, 3, 9, 1, 1, 7, 0, 12, 4}
	for _, o := range offs {
		h.push(&slot{rec: recordbatch.Record{Offset: o}})
	}
	var got []int64
	for h.peek() != nil {
		got = append(got, h.peek().rec.Offset)
		h.pop()
	}
	slices.Sort(offs)
	if !slices.Equal(got, offs) {
		t.Errorf("popped %v, want %v", got, offs)
	}
}
