package commitlog

import (
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// producerBatches is how many recent batches per producer are remembered for
// duplicate detection: a retry of any of them is answered with its original
// offsets (Kafka keeps five, its max in-flight requests per connection).
const producerBatches = 5

// producerBatch is one batch an idempotent producer wrote.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is what the log knows of one producer id.
type producerEntry struct {
	epoch   int16
	batches []producerBatch // oldest first, at most producerBatches
	// lastTimestamp is the max timestamp (ms) of its newest batch here;
	// 0 when unknown (a snapshot from before it was kept): never expired
	// by time until a batch sets it.
	lastTimestamp int64
}

// producerState is the idempotent-producer table of a log: derived data,
// rebuilt from batch headers (producer id, epoch, base sequence) when the
// log is opened or truncated, and updated by every append, leader's or
// follower's, so it survives restarts and leader changes. Guarded by the
// owning Log's mutex.
type producerState struct {
	producers map[int64]*producerEntry
}

// dupOrCheck classifies an incoming batch of producer pid: a duplicate of a
// remembered batch (its original offsets are returned), the next batch in
// sequence (nil), or an error: PRODUCER_FENCED for an older epoch,
// OUT_OF_ORDER_SEQUENCE for a gap or a sequence older than what is remembered.
func (ps *producerState) dupOrCheck(h recordbatch.Header) (dup *producerBatch, err error) {
	e := ps.producers[h.ProducerID]
	if e == nil {
		return nil, nil // a producer this log has not seen: its first batch
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return nil, api.Errorf(api.CodeProducerFenced, "producer %d epoch %d is fenced by epoch %d", h.ProducerID, h.ProducerEpoch, e.epoch)
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return nil, api.Errorf(api.CodeOutOfOrderSequence, "producer %d starts epoch %d at sequence %d, want 0", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	last := h.BaseSequence + h.LastOffsetDelta
	for i := range e.batches {
		if b := &e.batches[i]; b.firstSeq == h.BaseSequence && b.lastSeq == last {
			return b, nil
		}
	}
	next := e.batches[len(e.batches)-1].lastSeq + 1
	if h.BaseSequence != next {
		return nil, api.Errorf(api.CodeOutOfOrderSequence, "producer %d epoch %d sent sequence %d, expected %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence, next)
	}
	return nil, nil
}

// record remembers a written batch.
func (ps *producerState) record(h recordbatch.Header) {
	if h.ProducerID < 0 {
		return
	}
	if ps.producers == nil {
		ps.producers = map[int64]*producerEntry{}
	}
	e := ps.producers[h.ProducerID]
	if e == nil || h.ProducerEpoch > e.epoch {
		e = &producerEntry{epoch: h.ProducerEpoch}
		ps.producers[h.ProducerID] = e
	}
	if h.ProducerEpoch < e.epoch {
		return // a follower copying history older than what it knows
	}
	e.batches = append(e.batches, producerBatch{
		firstSeq: h.BaseSequence, lastSeq: h.BaseSequence + h.LastOffsetDelta,
		firstOffset: h.BaseOffset, lastOffset: h.LastOffset(),
	})
	e.lastTimestamp = max(e.lastTimestamp, h.MaxTimestamp)
	if len(e.batches) > producerBatches {
		e.batches = e.batches[len(e.batches)-producerBatches:]
	}
}

// expire forgets producers whose newest batch is older than before (ms).
func (ps *producerState) expire(before int64) int {
	n := 0
	for id, e := range ps.producers {
		if e.lastTimestamp > 0 && e.lastTimestamp < before {
			delete(ps.producers, id)
			n++
		}
	}
	return n
}

// ExpireProducers forgets the idempotent producers whose newest batch in
// this log is older than ProducerIDExpiration, as Kafka does: the table no
// longer grows with every producer id ever seen. It returns how many went.
func (l *Log) ExpireProducers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.producers.expire(l.opts.Now().Add(-l.opts.ProducerIDExpiration).UnixMilli())
}
