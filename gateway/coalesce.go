package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// Coalescing concurrent produce requests. Many small producers (curl,
// browsers, serverless functions) each send a few records; sent one by
// one, every request costs the partition's leader an HTTP exchange, an
// append and a wake-up of every follower, and acks=all waits on that
// replication round trip for each of them.
//
// A request's batch for a partition goes to its leader at once when fewer
// than maxSendsInFlight sends to that partition are under way: an idle
// partition adds no delay (no linger). Otherwise it waits in the
// partition's queue, and when a send ends, everything queued (up to
// maxCoalescedBytes) goes out as one body of back-to-back batches. The
// broker appends a body's batches in order under one lock, so batch i's
// first offset is the body's first plus the records of the batches before
// it; one replication round trip commits them all.
//
// Only batches that may share an append share a send: those of one topic
// partition, acks setting, principal and client id (the broker checks the
// principal's ACLs and charges its quotas per request), and never an
// idempotent producer's (the log takes those alone, to check sequences).
// A request whose context ends while its batch is still queued takes it
// out: nothing of it is written. A body the broker refuses whole with an
// error that is not retriable is sent again batch by batch, so only the
// request at fault gets the error.

// maxSendsInFlight is how many sends to one partition (per acks,
// principal and client id) run at once before batches queue.
const maxSendsInFlight = 2

// maxCoalescedBytes bounds a coalesced body; a larger single batch goes alone.
const maxCoalescedBytes = 1 << 20

type sendKey struct {
	topic     string
	partition int32
	acks      string
	principal string
	clientID  string
}

// sendQueue is one key's sends under way and batches waiting for one.
type sendQueue struct {
	inFlight int
	waiting  []*queuedBatch
}

// queuedBatch is one request's batch waiting in a queue, and its outcome.
type queuedBatch struct {
	batch    []byte
	records  int64
	deadline time.Time
	taken    bool          // a send has it (guarded by coalescer.mu)
	done     chan struct{} // closed when res and err are set
	res      brokerapi.ProduceResult
	err      error
}

// coalescer owns the queues. Its lock is a leaf: nothing is called under it.
type coalescer struct {
	// produce sends one body to the partition's leader (Gateway.produceTo
	// with retriableBeforeWrite).
	produce func(ctx context.Context, topic string, p int32, acks string, body []byte) (brokerapi.ProduceResult, error)
	mem     *memBudget        // a coalesced body's copy is taken from it
	ctx     context.Context   // the gateway's: ends at Close
	goFunc  func(func()) bool // the gateway's: Close waits for the send goroutines
	sends   prometheus.Counter
	batches prometheus.Counter

	mu     sync.Mutex
	queues map[sendKey]*sendQueue
}

func newCoalescer(g *Gateway) *coalescer {
	return &coalescer{
		produce: func(ctx context.Context, topic string, p int32, acks string, body []byte) (brokerapi.ProduceResult, error) {
			return g.produceTo(ctx, topic, p, acks, body, retriableBeforeWrite)
		},
		mem: g.mem, ctx: g.ctx, goFunc: g.goFunc, sends: g.metrics.produceSends, batches: g.metrics.produceSendBatches,
		queues: map[sendKey]*sendQueue{},
	}
}

// send delivers one non-idempotent batch of records to the partition's
// leader, alone or with other requests' batches, and returns its own
// offsets. ctx is the request's.
func (c *coalescer) send(ctx context.Context, topic string, p int32, acks string, batch []byte, records int64) (brokerapi.ProduceResult, error) {
	key := sendKey{topic: topic, partition: p, acks: acks, principal: auth.PrincipalFrom(ctx), clientID: brokerapi.ClientIDFrom(ctx)}
	c.mu.Lock()
	q := c.queues[key]
	if q == nil {
		q = &sendQueue{}
		c.queues[key] = q
	}
	if q.inFlight < maxSendsInFlight {
		q.inFlight++
		c.mu.Unlock()
		c.sends.Inc()
		c.batches.Inc()
		res, err := c.produce(ctx, topic, p, acks, batch)
		c.release(key, q)
		return res, err
	}
	qb := &queuedBatch{batch: batch, records: records, done: make(chan struct{})}
	qb.deadline, _ = ctx.Deadline()
	q.waiting = append(q.waiting, qb)
	c.mu.Unlock()
	select {
	case <-qb.done:
		return qb.res, qb.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !qb.taken {
		for i, w := range q.waiting {
			if w == qb {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return brokerapi.ProduceResult{}, api.Errorf(api.CodeRequestTimedOut, "%s/%d: timed out waiting to be sent; nothing was written", topic, p)
	}
	c.mu.Unlock()
	// Sent, outcome unknown: as any send cut off by its deadline.
	return brokerapi.ProduceResult{}, api.Errorf(api.CodeRequestTimedOut, "%s/%d: timed out waiting for the leader's answer", topic, p)
}

// release ends a send of key's queue. When batches wait, the send's slot
// passes to a goroutine that sends them (owned by the gateway: Close
// cancels and waits for it); otherwise the slot is freed.
func (c *coalescer) release(key sendKey, q *sendQueue) {
	c.mu.Lock()
	group := c.takeLocked(q)
	if group == nil {
		q.inFlight--
		if q.inFlight == 0 && len(q.waiting) == 0 {
			delete(c.queues, key)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	drain := func() {
		for group != nil {
			c.flush(key, group)
			c.mu.Lock()
			group = c.takeLocked(q)
			if group == nil {
				q.inFlight--
				if q.inFlight == 0 && len(q.waiting) == 0 {
					delete(c.queues, key)
				}
			}
			c.mu.Unlock()
		}
	}
	if !c.goFunc(drain) {
		drain() // the gateway is closing: its context has ended, so the sends fail fast and their requests get an answer
	}
}

// takeLocked removes the batches that go in the next send from q.
func (c *coalescer) takeLocked(q *sendQueue) []*queuedBatch {
	n, size := 0, 0
	for n < len(q.waiting) && (n == 0 || size+len(q.waiting[n].batch) <= maxCoalescedBytes) {
		size += len(q.waiting[n].batch)
		q.waiting[n].taken = true
		n++
	}
	if n == 0 {
		return nil
	}
	group := make([]*queuedBatch, n)
	copy(group, q.waiting)
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	return group
}

// flush sends a group's batches as one body and gives each its offsets.
// The send acts for the group's principal and client id, and lasts until
// the latest of its requests' deadlines.
func (c *coalescer) flush(key sendKey, group []*queuedBatch) {
	deadline := time.Now().Add(defaultProduceTimeout)
	var latest time.Time
	for _, qb := range group {
		if qb.deadline.After(latest) {
			latest = qb.deadline
		}
	}
	if !latest.IsZero() {
		deadline = latest
	}
	ctx := auth.WithPrincipal(brokerapi.WithClientID(c.ctx, key.clientID), key.principal)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	// The body is a copy of the batches, taken from the produce memory
	// budget like every byte a request makes the gateway hold; when the
	// budget has no room, the batches go one by one instead.
	res := &reservation{b: c.mem}
	defer res.release()
	size := 0
	for _, qb := range group {
		size += len(qb.batch)
	}
	if len(group) > 1 && res.grow(int64(size)) != nil {
		c.sendEach(ctx, key, group)
		return
	}
	body := group[0].batch
	var bp *[]byte
	if len(group) > 1 {
		bp = getBuf(size)
		b := (*bp)[:0]
		for _, qb := range group {
			b = append(b, qb.batch...)
		}
		*bp, body = b, b
	}
	c.sends.Inc()
	c.batches.Add(float64(len(group)))
	sent, err := c.produce(ctx, key.topic, key.partition, key.acks, body)
	putBuf(bp)
	if err != nil && len(group) > 1 && !api.Classify(err).Retriable() {
		// Refused whole, so nothing of it was written: each batch on its
		// own, so that only the one at fault is refused.
		c.sendEach(ctx, key, group)
		return
	}
	base := sent.BaseOffset
	for _, qb := range group {
		if err != nil {
			qb.err = err
		} else {
			qb.res = brokerapi.ProduceResult{BaseOffset: base, LastOffset: base + qb.records - 1, HighWatermark: sent.HighWatermark,
				Throttle: sent.Throttle} // one principal and client id per send: its debt is each request's
			base += qb.records
		}
		close(qb.done)
	}
}

// sendEach sends a group's batches one at a time.
func (c *coalescer) sendEach(ctx context.Context, key sendKey, group []*queuedBatch) {
	for _, qb := range group {
		c.sends.Inc()
		c.batches.Inc()
		qb.res, qb.err = c.produce(ctx, key.topic, key.partition, key.acks, qb.batch)
		close(qb.done)
	}
}
