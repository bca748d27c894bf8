package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
)

// Idempotent producing. The gateway deduplicates a produce that carries a
// producer id, its epoch and, for every partition it writes, the sequence
// number of its first record there: the brokers remember each producer's last
// five batches per partition, and a batch sent again with the same sequences
// is answered with its first offsets and written nothing more. A Producer
// keeps the sequences, so every retry of a batch, however its earlier
// attempts ended, puts the records in the log once.
//
// Sequences must arrive in order, without gaps: a batch whose sequence skips
// ahead is refused (OUT_OF_ORDER_SEQUENCE). So a Producer has one batch in
// flight, and a batch that failed blocks the next one until it is settled:
// re-sent until acknowledged, or given up. Giving up a batch that may have
// been written leaves the partitions' sequences unknown; the Producer then
// bumps its epoch (POST /v1/producers with its id), which starts every
// partition's sequences at 0 again, as Kafka's producers do (KIP-360).

// ErrBatchAbandoned is returned by SendBatch for a batch prepared before
// the Producer's latest one: a failed batch's sequences may belong to
// another batch now, so sending it again could be mistaken for that one,
// and an acknowledged one may be older than the brokers remember.
var ErrBatchAbandoned = errors.New("client: batch abandoned: a later batch was prepared")

// Producer is an idempotent producer. It is safe for concurrent use, but it
// sends one batch at a time (Prepare and SendBatch wait for the one in
// flight); run several Producers for parallel sends.
type Producer struct {
	c *Client
	// ident is the current identity, readable without waiting for mu.
	ident atomic.Pointer[api.ProducerIdentity]

	// mu serializes Prepare and SendBatch, network calls included: the
	// brokers take a producer's batches to a partition only in sequence
	// order. It guards every field below and the state of every Batch.
	mu sync.Mutex
	// next is each partition's next sequence number in the current epoch.
	next map[api.TopicPartition]int32
	// partitions caches topics' partition counts, for choosing partitions.
	partitions map[string]int
	// sticky picks the partition of each batch's keyless records, round-robin.
	sticky uint32
	// pending is the last prepared batch until it is acknowledged or given up.
	pending *Batch
	// last is the last prepared batch, acknowledged or not: the only one
	// that may be sent again once acknowledged (the brokers remember only
	// a producer's last few batches).
	last *Batch
	// needBump: the sequences are unknown (a batch that may be written was
	// given up, or the broker refused one as out of order); the next
	// Prepare bumps the epoch first.
	needBump bool
	// fatal ends the producer: a newer epoch of its id exists, or the id is unknown.
	fatal error
}

// batchState is where a Batch is in its life.
type batchState int

const (
	batchPending   batchState = iota // prepared, not acknowledged
	batchAcked                       // acknowledged at least once
	batchAbandoned                   // given up; its sequences may be reused
)

// Batch is a prepared produce request of a Producer: records with their
// partitions and sequences fixed. Sending it again, any number of times, is
// answered with the same offsets and writes the records once, until a later
// batch is prepared.
type Batch struct {
	topic string
	ident api.ProducerIdentity
	seqs  map[int32]int32 // first sequence per partition
	count map[int32]int32 // records per partition
	n     int
	req   *request // sent byte for byte on every attempt
	// Guarded by the Producer's mu.
	state batchState
	// maybeWritten: some attempt succeeded or ended without proof that
	// nothing was written.
	maybeWritten bool
}

// Topic is the topic the batch writes to.
func (b *Batch) Topic() string { return b.topic }

// Identity is the producer id and epoch the batch is sent with.
func (b *Batch) Identity() api.ProducerIdentity { return b.ident }

// Sequences is the first sequence number of the batch's records in each
// partition it writes (a copy).
func (b *Batch) Sequences() map[int32]int32 { return maps.Clone(b.seqs) }

// Len is the number of records.
func (b *Batch) Len() int { return b.n }

// NewProducer gets a new producer id at epoch 0 (POST /v1/producers) and
// returns a Producer that uses it. Retried on every retriable failure (a
// lost answer costs an unused id, nothing more).
func (c *Client) NewProducer(ctx context.Context) (*Producer, error) {
	id, err := c.initProducer(ctx, api.InitProducerRequest{})
	if err != nil {
		return nil, err
	}
	return c.newProducer(id), nil
}

// ResumeProducer takes over producer id: it bumps the id's epoch, which
// fences every older instance (their sends fail with PRODUCER_FENCED), and
// returns a Producer at the new epoch, starting every partition at sequence
// 0. UNKNOWN_PRODUCER_ID when the id was never issued.
func (c *Client) ResumeProducer(ctx context.Context, id int64) (*Producer, error) {
	ident, err := c.initProducer(ctx, api.InitProducerRequest{ProducerID: &id})
	if err != nil {
		return nil, err
	}
	return c.newProducer(ident), nil
}

func (c *Client) newProducer(id api.ProducerIdentity) *Producer {
	p := &Producer{c: c, next: map[api.TopicPartition]int32{}, partitions: map[string]int{}}
	p.ident.Store(&id)
	return p
}

// initProducer is POST /v1/producers. A retry after a lost answer issues
// another id, or bumps the epoch once more; both are harmless.
func (c *Client) initProducer(ctx context.Context, req api.InitProducerRequest) (api.ProducerIdentity, error) {
	body, err := jsonBody(req)
	if err != nil {
		return api.ProducerIdentity{}, err
	}
	var out api.ProducerIdentity
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: "/v1/producers", body: body, ctype: "application/json"}, &out)
	return out, err
}

// Identity is the producer's current id and epoch. It does not wait for a
// send in flight.
func (p *Producer) Identity() api.ProducerIdentity { return *p.ident.Load() }

// Send prepares records as a batch and sends it (Prepare, then SendBatch),
// returning where each record landed, in order. Records without a partition
// get one here, as the gateway would choose it: murmur2 of the key, else one
// partition for all keyless records of the batch, round-robin from batch to
// batch.
//
// Retriable failures and lost connections are retried with the same
// sequences, following the Client's RetryPolicy, so the records are written
// once. When Send still fails with a retriable error, the records may or may
// not be in the log: SendBatch(ctx, p.Pending()) sends them again, still
// exactly once; the next Send or Prepare gives them up instead. Errors:
// those of Prepare and SendBatch.
func (p *Producer) Send(ctx context.Context, topic string, records []Record, opts ProduceOptions) ([]api.RecordOffset, error) {
	b, err := p.Prepare(ctx, topic, records, opts)
	if err != nil {
		return nil, err
	}
	return p.SendBatch(ctx, b)
}

// Pending is the last prepared batch while it is not acknowledged (after a
// failed Send, the batch to send again), or nil.
func (p *Producer) Pending() *Batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != nil && p.pending.state == batchPending {
		return p.pending
	}
	return nil
}

// Prepare fixes records' partitions and sequences as a Batch without sending
// it. It waits for a send in flight. A pending batch that was never
// acknowledged is given up: its sequences are reused when it certainly was
// not written, else the epoch is bumped first (a request to the gateway).
// It asks the gateway for the topic's partition count the first time a
// record needs a partition chosen.
//
// opts.Acks must not be AcksNone: an unacknowledged write cannot be
// deduplicated. Errors: a fenced or unknown producer id (sticky: every later
// call returns it), the topic's lookup or the epoch bump failing, or a
// record that cannot be encoded.
func (p *Producer) Prepare(ctx context.Context, topic string, records []Record, opts ProduceOptions) (*Batch, error) {
	if opts.Acks == AcksNone {
		return nil, errors.New("client: an idempotent produce needs acks, not AcksNone")
	}
	wire, err := wireRecords(records, opts.Partition)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fatal != nil {
		return nil, p.fatal
	}
	p.settlePendingLocked()
	if p.needBump {
		if err := p.bumpLocked(ctx); err != nil {
			return nil, err
		}
	}
	if err := p.assignPartitionsLocked(ctx, topic, records, wire); err != nil {
		return nil, err
	}
	ident := *p.ident.Load()
	b := &Batch{topic: topic, ident: ident, seqs: map[int32]int32{}, count: map[int32]int32{}, n: len(wire)}
	for i := range wire {
		b.count[*wire[i].Partition]++
	}
	seqs := make(map[string]int32, len(b.count))
	for part, n := range b.count {
		tp := api.TopicPartition{Topic: topic, Partition: part}
		b.seqs[part] = p.next[tp]
		seqs[strconv.Itoa(int(part))] = p.next[tp]
		p.next[tp] += n
	}
	body, err := jsonBody(api.ProduceRequest{Records: wire, ProducerID: &ident.ProducerID, ProducerEpoch: &ident.ProducerEpoch, Sequences: seqs})
	if err == nil {
		b.req, err = p.c.produceRequest(topic, body, opts)
	}
	if err != nil {
		p.rollbackLocked(b)
		return nil, err
	}
	if p.last != nil && p.last.state == batchAcked {
		p.last.state = batchAbandoned
	}
	p.pending, p.last = b, b
	return b, nil
}

// SendBatch sends b until it is acknowledged, retrying every retriable
// failure and lost connection with the same body (the brokers deduplicate),
// within the Client's RetryPolicy and ctx. It may be called again for the
// same batch, before or after an acknowledgement, as long as no later batch
// was prepared: the answer carries the same offsets.
//
// Errors: ErrBatchAbandoned for a batch given up by a later Prepare;
// PRODUCER_FENCED when a newer instance took the id over, and
// UNKNOWN_PRODUCER_ID (both end the Producer); OUT_OF_ORDER_SEQUENCE, after
// which the batch is given up and the next Prepare bumps the epoch; any
// other *Error or *TransportError, after which the batch stays pending.
func (p *Producer) SendBatch(ctx context.Context, b *Batch) ([]api.RecordOffset, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fatal != nil {
		return nil, p.fatal
	}
	if b.state == batchAbandoned || b.ident != *p.ident.Load() {
		return nil, ErrBatchAbandoned
	}
	req := *b.req
	req.retryIf = func(_ *response, err error) bool { return IsRetriable(err) }
	req.observe = func(resp *response, err error) {
		if err == nil || !unwritten(resp, err) {
			b.maybeWritten = true
		}
	}
	offsets, err := p.c.sendProduce(ctx, &req, b.n)
	if err == nil {
		b.state = batchAcked
		if p.pending == b {
			p.pending = nil
		}
		return offsets, nil
	}
	switch {
	case errors.Is(err, api.ErrProducerFenced), errors.Is(err, &api.Error{Code: api.CodeUnknownProducer}):
		p.fatal = fmt.Errorf("client: producer %d epoch %d can no longer send: %w", b.ident.ProducerID, b.ident.ProducerEpoch, err)
	case errors.Is(err, api.ErrOutOfOrderSequence):
		b.state = batchAbandoned
		p.needBump = true
		if p.pending == b {
			p.pending = nil
		}
	}
	return offsets, err
}

// settlePendingLocked gives up the pending batch before another is
// prepared: its sequences go back when it certainly was not written; when it
// may have been, the epoch must be bumped.
func (p *Producer) settlePendingLocked() {
	b := p.pending
	if b == nil {
		return
	}
	p.pending = nil
	if b.state != batchPending {
		return
	}
	b.state = batchAbandoned
	if b.maybeWritten {
		p.needBump = true
		return
	}
	p.rollbackLocked(b)
}

// rollbackLocked returns the sequences of b, the last prepared batch.
func (p *Producer) rollbackLocked(b *Batch) {
	for part, n := range b.count {
		p.next[api.TopicPartition{Topic: b.topic, Partition: part}] -= n
	}
}

// bumpLocked takes a new epoch of the producer's id; sequences restart at 0.
func (p *Producer) bumpLocked(ctx context.Context) error {
	cur := *p.ident.Load()
	id, err := p.c.initProducer(ctx, api.InitProducerRequest{ProducerID: &cur.ProducerID})
	if err != nil {
		if errors.Is(err, &api.Error{Code: api.CodeUnknownProducer}) {
			p.fatal = err
		}
		return fmt.Errorf("client: bumping producer %d's epoch: %w", cur.ProducerID, err)
	}
	p.ident.Store(&id)
	clear(p.next)
	p.needBump = false
	return nil
}

// assignPartitionsLocked gives every record a partition, as the gateway's
// partitioner would: murmur2 of the key, else the batch's sticky partition.
// Sequences are per partition, so they are known only once partitions are.
// wire[i] is records[i] converted.
func (p *Producer) assignPartitionsLocked(ctx context.Context, topic string, records []Record, wire []api.ProduceRecord) error {
	sticky := int32(-1)
	for i := range wire {
		r := &wire[i]
		if r.Partition != nil {
			continue
		}
		n, err := p.partitionCountLocked(ctx, topic)
		if err != nil {
			return err
		}
		switch key := records[i].Key; {
		case key != nil:
			r.Partition = Partition(int32(api.KeyPartition(key, n)))
		default:
			if sticky < 0 {
				sticky = int32(p.sticky % uint32(n))
				p.sticky++
			}
			r.Partition = Partition(sticky)
		}
	}
	return nil
}

func (p *Producer) partitionCountLocked(ctx context.Context, topic string) (int, error) {
	if n, ok := p.partitions[topic]; ok {
		return n, nil
	}
	t, err := p.c.GetTopic(ctx, topic)
	if err != nil {
		return 0, err
	}
	if len(t.Partitions) == 0 {
		return 0, fmt.Errorf("client: topic %q has no partitions", topic)
	}
	p.partitions[topic] = len(t.Partitions)
	return len(t.Partitions), nil
}

// unwritten reports whether a failed attempt certainly wrote nothing: it
// was never sent, or every partition it lists failed with a code that is
// answered before writing (a non-retriable refusal, or a retriable code that
// proves no leader acted).
func unwritten(resp *response, err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return !te.Sent
	}
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	var pr api.ProduceResponse
	if resp != nil && json.Unmarshal(resp.body, &pr) == nil && len(pr.Offsets) > 0 {
		for _, o := range pr.Offsets {
			if o.Offset >= 0 || o.Error == "" || !unwrittenCode(o.Error) {
				return false
			}
		}
		return true
	}
	return unwrittenCode(e.Code)
}

func unwrittenCode(c api.Code) bool { return !api.Lookup(c).Retriable || unappliedCodes[c] }
