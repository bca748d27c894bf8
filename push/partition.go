package push

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Timing of a partition's loop.
const (
	// commitInterval spaces a partition's commits: a commit carries every
	// record acknowledged since the last one, so at most this much is
	// delivered again after a takeover.
	commitInterval = 200 * time.Millisecond
	// fetchWait is a fetch's long poll at the partition's end.
	fetchWait = 5 * time.Second
	// windowRecords (or two batches, if more) and windowBytes bound the
	// records a partition holds fetched and not yet done: with two
	// batches, the next one is fetched while one is out.
	windowRecords = 1000
	windowBytes   = 4 << 20
	// dltRetry spaces dead-letter writes that failed, fetchRetry fetches.
	dltRetry   = time.Second
	dltTimeout = 10 * time.Second // one dead-letter write, its retries included
	fetchRetry = 250 * time.Millisecond
)

type slotState int

const (
	pending       slotState = iota // may be sent
	sending                        // a request carries it
	waiting                        // refused: sent again at due
	deadLettering                  // being written to the dead-letter topic
	dltWaiting                     // the dead-letter write failed: again at due
	done                           // acknowledged or dead-lettered
)

// slot is a fetched record not yet committed past.
type slot struct {
	rec      recordbatch.Record
	attempts int   // counted against it, across owners
	tries    int   // requests that carried it from this owner
	firstMs  int64 // its first counted attempt
	state    slotState
	due      time.Time
	last     outcome // the last answer, for the dead-letter headers
	seq      int64   // its place in the window: window[seq-base]
}

// result is what a partition's goroutines report to its loop.
type result struct {
	kind   int // resSend, resFetch, resDLT
	slots  []*slot
	out    outcome
	counts bool
	recs   []recordbatch.Record
	next   int64
	err    error
}

const (
	resSend = iota
	resFetch
	resDLT
)

// partition delivers one partition the group granted this pusher. Its run
// goroutine owns every field; sends (on sender goroutines, up to
// max_in_flight), the fetch and dead-letter writes run on goroutines it
// starts and waits for, which report on results.
type partition struct {
	sub   *subscriptionRun
	tp    api.TopicPartition
	fence int64

	committed     int64
	committedMeta string
	lastCommit    time.Time
	commitFailed  bool // the last commit failed: the next waits commitInterval
	fetchPos      int64
	history       map[int64]attemptState // from the commit metadata, for records not yet fetched
	window        []*slot
	windowSize    int64
	inFlight      int // requests out
	fetching      bool
	fetchAfter    time.Time // after a failed fetch: the next one waits until then
	results       chan result
	ctx           context.Context // run's; its goroutines end with it
	wg            sync.WaitGroup
	stopped       bool           // the subscription was disabled: send nothing more
	lastErr       *api.PushError // the last failed attempt or dead-letter write
	live          livePublisher  // inFlight and lastErr as of the last turn, for the status

	// What the loop keeps beside the window so that a turn costs what
	// changed in it, not its length.
	base       int64    // window[0]'s seq
	ready      slotHeap // ordering key and none: pending slots that may go, by offset (entries no longer pending are skipped)
	retries    slotHeap // waiting slots, by due
	dltRetries slotHeap // dltWaiting slots, by due
	// keys (ordering key) holds each key's slots not yet done, in offset
	// order; only the first of each may go.
	keys      map[string]*keyQueue
	meta      string // the attempts metadata, while metaStale is false
	metaStale bool
	sends     chan sendJob // to the senders
	senders   int          // sender goroutines started
}

func newPartition(sub *subscriptionRun, start Start, fence int64) *partition {
	n := sub.cfg.MaxInFlight
	return &partition{sub: sub, tp: start.TopicPartition, fence: fence, committed: start.Offset, committedMeta: start.Metadata,
		fetchPos: start.Offset, history: decodeAttempts(start.Metadata),
		results: make(chan result, 2*n+2),
		ready:   slotHeap{less: byOffset}, retries: slotHeap{less: byDue}, dltRetries: slotHeap{less: byDue},
		keys: map[string]*keyQueue{}, metaStale: true, sends: make(chan sendJob, n)}
}

// run delivers until ctx ends or the group takes the partition away (a
// fenced commit). It commits what was delivered before it returns.
func (p *partition) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	p.ctx = ctx
	defer func() {
		cancel()
		p.wg.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	disabled := p.sub.disabled
	for {
		now := time.Now()
		// The attempts metadata, once per turn: dispatch changes no
		// attempt count, and the commit and the wake-up read the same.
		meta := p.metadata()
		p.dispatch(ctx, now, meta)
		if !p.fetching && !p.stopped && len(p.window) < max(windowRecords, 2*p.sub.cfg.Batch.MaxRecords) && p.windowSize < windowBytes && !now.Before(p.fetchAfter) {
			p.startFetch(ctx)
		}
		if err := p.maybeCommit(ctx, now, meta, false); err != nil {
			return err
		}
		if p.live.publish(p.inFlight, p.lastErr) {
			p.sub.statusChanged()
		}
		timer.Reset(p.nextWake(now, meta))
		select {
		case <-ctx.Done():
			cancel()
			p.wg.Wait()
			p.drain()
			fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer fcancel()
			_ = p.maybeCommit(fctx, time.Now(), p.metadata(), true)
			return ctx.Err()
		case r := <-p.results:
			p.apply(ctx, r)
		case <-timer.C:
		case <-disabled:
			p.stopped, disabled = true, nil // once: a closed channel is always ready
		}
	}
}

// drain applies what the stopped goroutines reported.
func (p *partition) drain() {
	for {
		select {
		case r := <-p.results:
			p.apply(context.Background(), r)
		default:
			return
		}
	}
}

// nextWake is when the loop must look again without news: a retry or a
// dead-letter write coming due, or a commit to send.
func (p *partition) nextWake(now time.Time, meta string) time.Duration {
	wake := now.Add(time.Hour)
	if !p.fetching && p.fetchAfter.After(now) {
		wake = p.fetchAfter
	}
	if s := p.retries.peek(); s != nil && !p.stopped && s.due.Before(wake) {
		wake = s.due
	}
	if s := p.dltRetries.peek(); s != nil && s.due.Before(wake) {
		wake = s.due
	}
	if p.commitPoint() != p.committed || meta != p.committedMeta {
		if c := p.lastCommit.Add(commitInterval); c.Before(wake) {
			wake = c
		}
	}
	if d := wake.Sub(now); d > time.Millisecond {
		return d
	}
	return time.Millisecond
}

func (p *partition) startFetch(ctx context.Context) {
	p.fetching = true
	pos := p.fetchPos
	maxBytes := int64(windowBytes) - p.windowSize
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		recs, next, err := p.sub.cluster.Fetch(ctx, p.tp, pos, maxBytes, fetchWait)
		p.report(result{kind: resFetch, recs: recs, next: next, err: err})
	}()
}

// report hands a goroutine's result to the loop, or drops it once the
// loop is stopping (it no longer reads).
func (p *partition) report(r result) {
	select {
	case p.results <- r:
	case <-p.ctx.Done():
	}
}

// apply takes one goroutine's report.
func (p *partition) apply(ctx context.Context, r result) {
	switch r.kind {
	case resFetch:
		p.fetching = false
		p.fetched(ctx, r)
	case resSend:
		p.inFlight--
		p.answered(r)
	case resDLT:
		p.deadLettered(r)
	}
}

func (p *partition) fetched(ctx context.Context, r result) {
	if r.err != nil {
		if errors.Is(r.err, api.ErrOffsetOutOfRange) {
			// Retention removed records never delivered: nothing can bring
			// them back; go on from the log's start and say so.
			if off, err := p.sub.cluster.Resolve(ctx, p.tp, api.ResetEarliest); err == nil && off > p.fetchPos {
				p.sub.log.Warn("records were removed by retention before they were pushed", "subscription", p.sub.cfg.Name,
					"topic", p.tp.Topic, "partition", p.tp.Partition, "from", p.fetchPos, "to", off)
				p.fetchPos = off
			}
			return
		}
		if ctx.Err() == nil {
			p.sub.log.Debug("push fetch failed", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", r.err)
			p.fetchAfter = time.Now().Add(fetchRetry) // the cluster retried already; do not spin
		}
		return
	}
	for i := range r.recs {
		rec := r.recs[i]
		if rec.Offset < p.fetchPos {
			continue
		}
		s := &slot{rec: rec, seq: p.base + int64(len(p.window))}
		if h, ok := p.history[rec.Offset]; ok {
			s.attempts, s.firstMs = h.attempts, h.firstMs
			delete(p.history, rec.Offset)
			p.metaStale = true
		}
		p.window = append(p.window, s)
		p.windowSize += recordSize(&rec)
		if p.sub.cfg.Ordering == api.PushOrderKey {
			q := p.keys[string(rec.Key)]
			if q == nil {
				q = &keyQueue{}
				p.keys[string(rec.Key)] = q
			}
			q.slots = append(q.slots, s)
		}
		p.pended(s)
	}
	if r.next > p.fetchPos {
		p.fetchPos = r.next
	}
}

func recordSize(r *recordbatch.Record) int64 {
	n := int64(len(r.Key) + len(r.Value) + 64)
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// dispatch starts requests for the slots that may go now, and dead-letter
// writes for the slots that ran out of attempts.
func (p *partition) dispatch(ctx context.Context, now time.Time, meta string) {
	for s := p.dltRetries.peek(); s != nil && !now.Before(s.due); s = p.dltRetries.peek() {
		p.dltRetries.pop()
		p.startDLT(ctx, s)
	}
	if p.stopped {
		return
	}
	// A retry goes out only once the attempts counted so far are
	// committed: a new owner then continues the count.
	if meta == p.committedMeta {
		for s := p.retries.peek(); s != nil && !now.Before(s.due); s = p.retries.peek() {
			p.retries.pop()
			s.state = pending
			p.pended(s)
		}
	}
	if p.sub.cfg.Ordering == api.PushOrderPartition {
		// Nothing after the first record not done: one request at a time,
		// from the window's head.
		i := 0
		for i < len(p.window) && p.window[i].state == done {
			i++
		}
		if i < len(p.window) && p.window[i].state == pending && p.inFlight < p.sub.cfg.MaxInFlight {
			p.sendFrom(ctx, now, i)
		}
		return
	}
	for p.inFlight < p.sub.cfg.MaxInFlight {
		s := p.ready.peek()
		if s == nil {
			return
		}
		if s.state != pending {
			p.ready.pop() // sent, or done, since it was queued
			continue
		}
		if !p.sendFrom(ctx, now, int(s.seq-p.base)) {
			return
		}
		p.ready.pop()
	}
}

// sendFrom sends the pending slot at i with the pending slots right after
// it, up to a batch; false when the batch is to wait for more records.
func (p *partition) sendFrom(ctx context.Context, now time.Time, i int) bool {
	cfg := &p.sub.cfg
	s := p.window[i]
	batch := []*slot{s}
	size := recordSize(&s.rec)
	for j := i + 1; j < len(p.window) && len(batch) < cfg.Batch.MaxRecords; j++ {
		n := p.window[j]
		if n.state != pending || size+recordSize(&n.rec) > cfg.Batch.MaxBytes {
			break
		}
		batch = append(batch, n)
		size += recordSize(&n.rec)
	}
	if len(batch) < cfg.Batch.MaxRecords && cfg.Batch.MaxWaitMs > 0 && p.fetching &&
		now.Sub(time.UnixMilli(s.rec.Timestamp)) < time.Duration(cfg.Batch.MaxWaitMs)*time.Millisecond {
		return false // wait for the batch to fill (the fetch's arrival wakes the loop)
	}
	p.send(ctx, batch)
	return true
}

// pended takes note that s became pending: with ordering key or none it
// joins the ready slots if nothing before it holds it back.
func (p *partition) pended(s *slot) {
	switch p.sub.cfg.Ordering {
	case api.PushOrderPartition:
		return // the head is all dispatch looks at
	case api.PushOrderKey:
		if q := p.keys[string(s.rec.Key)]; q == nil || q.slots[0] != s {
			return // an earlier record of its key is not done: that one's done brings it in
		}
	}
	p.ready.push(s)
}

// finished takes note that s is done: the next record of its key (ordering
// key) may go.
func (p *partition) finished(s *slot) {
	if s.attempts > 0 {
		p.metaStale = true
	}
	if p.sub.cfg.Ordering != api.PushOrderKey {
		return
	}
	k := string(s.rec.Key)
	q := p.keys[k]
	if q == nil {
		return
	}
	for len(q.slots) > 0 && q.slots[0].state == done {
		q.slots[0] = nil
		q.slots = q.slots[1:]
	}
	if len(q.slots) == 0 {
		delete(p.keys, k)
		return
	}
	if q.slots[0].state == pending {
		p.ready.push(q.slots[0])
	}
}

// keyQueue is one key's slots not yet done (ordering key).
type keyQueue struct{ slots []*slot }

func (p *partition) send(ctx context.Context, slots []*slot) {
	for _, s := range slots {
		s.state = sending
	}
	p.inFlight++
	recs := make([]*recordbatch.Record, len(slots))
	for i, s := range slots {
		recs[i] = &s.rec
	}
	d := &delivery{tp: p.tp, recs: recs, attempt: slots[0].attempts + 1, fence: p.fence}
	if p.senders < p.inFlight {
		p.startSender(ctx)
	}
	p.sends <- sendJob{d: d, slots: slots} // never blocks: it holds max_in_flight
}

// sendJob is one request for a sender.
type sendJob struct {
	d     *delivery
	slots []*slot
}

// startSender starts one more sender goroutine: it sends the requests
// send hands it, one at a time, until ctx ends. A partition has as many as
// it ever had requests out at once (at most max_in_flight); they outlive
// each request so that the HTTP client's stack is grown once, not once a
// request.
func (p *partition) startSender(ctx context.Context) {
	p.senders++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case j := <-p.sends:
				out, counts := p.sub.deliver(ctx, j.d)
				p.report(result{kind: resSend, slots: j.slots, out: out, counts: counts})
			}
		}
	}()
}

// answered applies a request's outcome to its slots.
func (p *partition) answered(r result) {
	cfg := &p.sub.cfg
	now := time.Now()
	for _, s := range r.slots {
		if s.state != sending {
			continue
		}
		s.last = r.out
		verdict, counts := r.out.verdict, r.counts
		if verdict == delivered && r.out.failed[s.rec.Offset] {
			verdict, counts = refused, true // a batch item the endpoint reported failed
		}
		if verdict != delivered {
			p.sub.dlog.record(p.sub.cfg.Name, p.tp, s.rec.Offset, s.attempts+1, r.out, api.DeliveryFailed)
			p.lastErr = newPushError(s.rec.Offset, s.attempts+1, r.out, now)
		} else if s.attempts > 0 || s.tries > 0 {
			p.sub.dlog.record(p.sub.cfg.Name, p.tp, s.rec.Offset, s.attempts+1, r.out, api.DeliveryDelivered)
		}
		s.tries++
		switch {
		case verdict == delivered:
			s.state = done
			p.finished(s)
			continue
		case verdict == gone:
			s.state = pending
			p.pended(s)
			p.sub.disable("the endpoint answered 410 Gone")
			continue
		case !counts:
			s.state = pending // the gate holds the next request back
			p.pended(s)
			continue
		}
		s.attempts++
		p.metaStale = true
		if s.firstMs == 0 {
			s.firstMs = now.UnixMilli()
		}
		p.sub.stats.attemptFailed()
		if s.attempts >= cfg.Retry.MaxAttempts {
			s.state = deadLettering
			p.startDLT(p.ctx, s)
			continue
		}
		s.state = waiting
		s.due = now.Add(retryBackoff(time.Duration(cfg.Retry.MinBackoffMs)*time.Millisecond, time.Duration(cfg.Retry.MaxBackoffMs)*time.Millisecond, s.attempts))
		p.retries.push(s)
	}
	p.trim()
}

// startDLT writes s to the dead-letter topic (acks=all).
func (p *partition) startDLT(ctx context.Context, s *slot) {
	if ctx.Err() != nil {
		return
	}
	s.state = deadLettering
	rec := deadLetterRecord(p.sub.cfg.Name, p.tp, s)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		dctx, cancel := context.WithTimeout(ctx, dltTimeout)
		defer cancel()
		err := p.sub.cluster.Produce(dctx, p.sub.cfg.DeadLetter.Topic, rec)
		p.report(result{kind: resDLT, slots: []*slot{s}, err: err})
	}()
}

func (p *partition) deadLettered(r result) {
	s := r.slots[0]
	if r.err != nil {
		p.sub.log.Warn("a record could not be written to the dead-letter topic; its partition waits", "subscription", p.sub.cfg.Name,
			"topic", p.tp.Topic, "partition", p.tp.Partition, "offset", s.rec.Offset, "dead_letter", p.sub.cfg.DeadLetter.Topic, "err", r.err)
		s.state, s.due = dltWaiting, time.Now().Add(dltRetry)
		p.lastErr = newPushError(s.rec.Offset, s.attempts, outcome{excerpt: "the dead-letter write failed: " + r.err.Error()}, time.Now())
		p.dltRetries.push(s)
		return
	}
	s.state = done
	p.finished(s)
	p.sub.stats.deadLettered()
	p.sub.dlog.record(p.sub.cfg.Name, p.tp, s.rec.Offset, s.attempts, s.last, api.DeliveryDead)
	p.trim()
}

// deadLetterRecord keeps the record's key, value and headers, and adds
// where it came from and why it is here.
func deadLetterRecord(sub string, tp api.TopicPartition, s *slot) recordbatch.Record {
	h := append([]recordbatch.RecordHeader(nil), s.rec.Headers...)
	add := func(k, v string) { h = append(h, recordbatch.RecordHeader{Key: k, Value: []byte(v)}) }
	add(api.DLTHeaderTopic, tp.Topic)
	add(api.DLTHeaderPartition, strconv.Itoa(int(tp.Partition)))
	add(api.DLTHeaderOffset, strconv.FormatInt(s.rec.Offset, 10))
	add(api.DLTHeaderSubscription, sub)
	add(api.DLTHeaderAttempts, strconv.Itoa(s.attempts))
	add(api.DLTHeaderStatus, strconv.Itoa(s.last.status))
	add(api.DLTHeaderResponse, s.last.excerpt)
	return recordbatch.Record{Timestamp: time.Now().UnixMilli(), Key: s.rec.Key, Value: s.rec.Value, Headers: h}
}

// trim drops the done slots at the window's head; the commit point is
// the first slot left.
func (p *partition) trim() {
	n := 0
	for n < len(p.window) && p.window[n].state == done {
		p.windowSize -= recordSize(&p.window[n].rec)
		p.window[n] = nil // the array outlives the slot until an append reallocates it
		n++
	}
	if n > 0 {
		p.sub.stats.delivered(n)
		p.window = p.window[n:] // appends reallocate as the window refills
		p.base += int64(n)
	}
}

// commitPoint is the offset the partition may commit: the first record not
// done, or everything fetched.
func (p *partition) commitPoint() int64 {
	if len(p.window) > 0 {
		return p.window[0].rec.Offset
	}
	return p.fetchPos
}

// metadata is the attempts counted against the records not yet done. It
// is worked out again only after an attempt count or the set of records
// with one changed.
func (p *partition) metadata() string {
	if p.metaStale {
		p.meta, p.metaStale = p.attemptsMetadata(), false
	}
	return p.meta
}

func (p *partition) attemptsMetadata() string {
	m := map[int64]attemptState{}
	for _, s := range p.window {
		if s.state != done && s.attempts > 0 {
			m[s.rec.Offset] = attemptState{attempts: s.attempts, firstMs: s.firstMs}
		}
	}
	for o, h := range p.history {
		m[o] = h
	}
	return encodeAttempts(m)
}

// maybeCommit commits the commit point and attempts when they changed and
// the last commit is commitInterval old (or force). A fenced commit means
// the partition was taken away: run stops.
func (p *partition) maybeCommit(ctx context.Context, now time.Time, meta string, force bool) error {
	point := p.commitPoint()
	if point == p.committed && meta == p.committedMeta {
		return nil
	}
	// Attempts are committed at once (they change at most once a backoff
	// per record); progress every commitInterval.
	if !force && (meta == p.committedMeta || p.commitFailed) && now.Sub(p.lastCommit) < commitInterval {
		return nil
	}
	p.lastCommit = now
	err := p.sub.commit(ctx, api.PartitionOffset{Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: point, Metadata: meta})
	p.commitFailed = err != nil
	if err == nil {
		p.committed, p.committedMeta = point, meta
		return nil
	}
	switch api.Classify(err).Code {
	case api.CodeFencedMemberEpoch, api.CodeUnknownMemberID, api.CodeFencedInstanceID:
		return err
	}
	if ctx.Err() == nil {
		p.sub.log.Warn("a push commit failed; it is retried", "subscription", p.sub.cfg.Name, "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
	}
	return nil
}

// slotHeap is a binary min-heap of slots under less.
type slotHeap struct {
	s    []*slot
	less func(a, b *slot) bool
}

func byOffset(a, b *slot) bool { return a.rec.Offset < b.rec.Offset }
func byDue(a, b *slot) bool    { return a.due.Before(b.due) }

// peek is the least slot, or nil.
func (h *slotHeap) peek() *slot {
	if len(h.s) == 0 {
		return nil
	}
	return h.s[0]
}

func (h *slotHeap) push(x *slot) {
	h.s = append(h.s, x)
	for i := len(h.s) - 1; i > 0; {
		up := (i - 1) / 2
		if !h.less(h.s[i], h.s[up]) {
			break
		}
		h.s[i], h.s[up] = h.s[up], h.s[i]
		i = up
	}
}

// pop removes the least slot.
func (h *slotHeap) pop() {
	n := len(h.s) - 1
	h.s[0] = h.s[n]
	h.s[n] = nil
	h.s = h.s[:n]
	for i := 0; ; {
		l, least := 2*i+1, i
		if l < n && h.less(h.s[l], h.s[least]) {
			least = l
		}
		if r := l + 1; r < n && h.less(h.s[r], h.s[least]) {
			least = r
		}
		if least == i {
			return
		}
		h.s[i], h.s[least] = h.s[least], h.s[i]
		i = least
	}
}
