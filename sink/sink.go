package sink

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// Options configure a Sink. Group, Topics and Store are required; other
// zero fields take the defaults stated.
type Options struct {
	Group  string
	Topics []string
	// Store takes the writes and holds the offsets.
	Store Store
	// JSONPolls makes the sink poll the group's JSON records instead of its
	// raw batches (client.GroupConsumerOptions.Raw), which cost the gateway
	// a render and the sink a decode of every record. Default off.
	JSONPolls bool
	// InstanceID makes the member static (a restarted process takes its
	// partitions back without a rebalance). Default none.
	InstanceID string
	// SessionTimeout is the group session. Default: the server's 30 s.
	SessionTimeout time.Duration
	// MaxRecords bounds a poll. Default 500.
	MaxRecords int
	// MaxWait is how long a poll waits for records. Default 1 s.
	MaxWait time.Duration
	// ParallelWrites bounds how many partitions of one poll answer are
	// written to the store at once (each partition's batches stay in
	// order: one at a time, answer after answer). Default 8.
	ParallelWrites int
	// MinBackoff and MaxBackoff bound the waits between retries of a store
	// call or a poll that failed. Defaults 50 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// LagInterval is how often the lag gauges are read from the group's
	// description. Default 10 s; negative: never.
	LagInterval time.Duration
	// FinishTimeout bounds, at shutdown, the completion of a write the
	// store began (see Finisher). Default 10 s.
	FinishTimeout time.Duration
	// Metrics receive the sink's series. Default: a registry nobody serves.
	Metrics *Metrics
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) validate() error {
	switch {
	case o.Group == "":
		return errors.New("sink: a group is required")
	case len(o.Topics) == 0:
		return errors.New("sink: topics are required")
	case o.Store == nil:
		return errors.New("sink: a store is required")
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 500
	}
	if o.MaxWait == 0 {
		o.MaxWait = time.Second
	}
	if o.ParallelWrites <= 0 {
		o.ParallelWrites = 8
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.LagInterval == 0 {
		o.LagInterval = 10 * time.Second
	}
	if o.FinishTimeout == 0 {
		o.FinishTimeout = 10 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// partState is what the sink knows of one granted partition.
type partState struct {
	fence int64
	// next is the store's next offset as of the last claim or write; -1
	// while the store has none (the group's position is read).
	next int64
	// refused: the store holds a higher fence; nothing is written until
	// the group grants the partition again with a higher one.
	refused bool
	// first is the first offset handed to a Flusher store while next is
	// -1, to count records once they are durable.
	first int64
	// seekGen is the seek generation of the last Seek that moved this
	// partition's reads (0: none): records of it in answers polled before
	// that generation were read from the old position and are dropped.
	seekGen uint64
}

// Stats are a sink's running totals.
type Stats struct {
	Written    int64 // records written
	Batches    int64 // partition batches written
	Fenced     int64 // claims and writes refused by a higher fence
	Partitions int64 // partitions held and writable
}

// Sink is one member of a group that writes its partitions' records to a
// Store exactly once. Run drives it: the Run goroutine claims and writes
// (it alone owns the partition states); a poller goroutine keeps the next
// poll in flight while the current answer is written, handing answers over
// one at a time, in order; a committer goroutine sends the group commits.
// Both are started and waited for by Run. Within one answer, up to
// ParallelWrites partitions are written at once, each by one store call.
//
// Per poll answer: partitions no longer granted are forgotten; each grant
// that is new, or carries a higher fence than the one claimed, is claimed
// in the store, which returns the partition's next offset; the group
// consumer's cursor is moved there (Seek) and the answer's records of that
// partition are dropped, since they were read from wherever the group
// stood; the next poll reads from the store's position. The other
// partitions' records are written, one store call per partition, and their
// new next offsets go to the committer.
type Sink struct {
	c    *client.Client
	opts Options
	log  *slog.Logger

	// owned is touched only by the Run goroutine (and, during a write,
	// each partition's state by the one goroutine writing it).
	owned map[api.TopicPartition]*partState

	// seekMu orders Seeks against polls: the poller holds it from reading
	// seekGen until its poll has answered (the poll sent the cursor as of
	// that generation); the Run goroutine holds it to Seek and bump seekGen,
	// so no poll is in flight while the cursor is rewritten.
	seekMu  sync.Mutex
	seekGen uint64

	// joined is closed once Run has joined the group (see Joined).
	joined     chan struct{}
	joinedOnce sync.Once

	written, batches, fenced, partitions atomic.Int64
}

// New returns a sink that has not joined yet.
func New(c *client.Client, opts Options) (*Sink, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Sink{c: c, opts: opts, log: opts.Logger.With("group", opts.Group), owned: map[api.TopicPartition]*partState{}, joined: make(chan struct{})}, nil
}

// Joined is closed once Run has joined the group, the first time: from
// then on the sink polls, claims and writes until Run returns. A sink
// whose Run ends before it joined never closes it.
func (s *Sink) Joined() <-chan struct{} { return s.joined }

// Stats returns the running totals; safe to call from any goroutine.
func (s *Sink) Stats() Stats {
	return Stats{Written: s.written.Load(), Batches: s.batches.Load(), Fenced: s.fenced.Load(), Partitions: s.partitions.Load()}
}

// Run joins the group and writes until ctx ends, then leaves the group and
// returns nil. A store call under way when ctx ends is abandoned: each is
// atomic, so it happened entirely or not at all, and the next owner finds
// the store's offsets either way. Errors: a join that keeps failing past
// ctx, FENCED_INSTANCE_ID (a newer process took this instance id), a batch
// the store refuses as malformed (ErrBadBatch).
func (s *Sink) Run(ctx context.Context) error {
	gc := s.c.NewGroupConsumer(s.opts.Group, client.GroupConsumerOptions{
		Topics: s.opts.Topics, InstanceID: s.opts.InstanceID, SessionTimeout: s.opts.SessionTimeout,
		MaxRecords: s.opts.MaxRecords, MaxWait: s.opts.MaxWait, Rejoin: true,
		Raw: !s.opts.JSONPolls,
	})
	if err := s.join(ctx, gc); err != nil {
		_ = gc.Close(context.Background())
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s.log.Info("sink: joined", "member", gc.MemberID())
	s.joinedOnce.Do(func() { close(s.joined) })
	cctx, stopCommits := context.WithCancel(context.Background())
	cm := newCommitter(gc, s.c, s.opts, s.log)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); cm.run(cctx) }()
	pctx, stopPolls := context.WithCancel(ctx)
	polls := make(chan polled)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); s.pollLoop(pctx, gc, polls) }()

	err := s.loop(ctx, gc, cm, polls)
	// The poller ends with its poll (cancelled) and sends nothing more.
	stopPolls()
	pwg.Wait()

	// Shutdown: complete what the store began (a Finisher: the S3
	// archive's reserved object), within FinishTimeout, while the
	// partitions are still ours; stop the committer, which sends what is
	// pending first (a commit is for lag only, so it is bounded and may
	// fail); then leave, so the partitions move to the other members at once.
	if f, ok := s.opts.Store.(Finisher); ok {
		fctx, cancel := context.WithTimeout(context.Background(), s.opts.FinishTimeout)
		if ferr := f.Finish(fctx); ferr != nil {
			s.log.Warn("sink: stopping with a write unfinished; the next owner completes it", "err", ferr)
		}
		cancel()
	}
	stopCommits()
	wg.Wait()
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cerr := gc.Close(lctx); cerr != nil {
		s.log.Warn("sink: leaving the group", "err", cerr)
	}
	s.partitions.Store(0)
	s.opts.Metrics.owned.Set(0)
	return err
}

// polled is one poll's outcome as the poller hands it over: an answer
// and the seek generation its cursor was sent at, or an error that
// retrying cannot mend.
type polled struct {
	b   client.GroupBatch
	gen uint64
	err error
}

// pollLoop polls until ctx ends or a poll fails for good, handing each
// answer to the Run goroutine over out (unbuffered: one answer waits
// while the one before is written, and one poll is in flight). Failures
// that may pass are retried here with backoff.
func (s *Sink) pollLoop(ctx context.Context, gc *client.GroupConsumer, out chan<- polled) {
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		s.seekMu.Lock()
		gen := s.seekGen
		b, err := gc.Poll(ctx)
		s.seekMu.Unlock()
		switch {
		case err == nil:
			backoff = s.opts.MinBackoff
			select {
			case out <- polled{b: b, gen: gen}:
			case <-ctx.Done():
				return
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, &api.Error{Code: api.CodeFencedInstanceID}):
			select {
			case out <- polled{err: err}:
			case <-ctx.Done():
			}
			return
		default:
			s.log.Warn("sink: poll failed; retrying", "err", err, "backoff", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, s.opts.MaxBackoff)
		}
	}
}

// loop writes the poller's answers until ctx ends or an error that
// retrying cannot mend.
func (s *Sink) loop(ctx context.Context, gc *client.GroupConsumer, cm *committer, polls <-chan polled) error {
	for {
		var p polled
		select {
		case <-ctx.Done():
			return nil
		case p = <-polls:
		}
		if p.err != nil {
			return p.err
		}
		failpoint(StepAfterPoll)
		if err := s.handle(ctx, gc, cm, p.b, p.gen); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// handle takes one poll answer, polled at seek generation gen: grants
// first (forget, claim, seek), then the records of the partitions claimed
// before, up to ParallelWrites partitions at once.
func (s *Sink) handle(ctx context.Context, gc *client.GroupConsumer, cm *committer, b client.GroupBatch, gen uint64) error {
	if err := s.claimGrants(ctx, gc, b.Grants); err != nil {
		return err
	}
	type job struct {
		tp   api.TopicPartition
		st   *partState
		recs []Record
	}
	var jobs []job
	for _, part := range polledParts(b) {
		tp := part.tp
		st := s.owned[tp]
		switch {
		case st == nil:
			// Not among the answer's grants: cannot happen with a
			// coordinator that keeps its word; never written ungranted.
			s.log.Warn("sink: records of a partition without a grant; dropped", "topic", tp.Topic, "partition", tp.Partition)
			continue
		case st.refused || st.seekGen > gen:
			// Refused, or read from where the group stood before the
			// store's position was sought: the answers polled since the
			// seek read from there.
			continue
		}
		recs, err := part.records(st.next)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			jobs = append(jobs, job{tp: tp, st: st, recs: recs})
		}
	}
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, s.opts.ParallelWrites)
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if errs[i] = s.write(ctx, j.tp, j.st, j.recs); errs[i] == nil && !j.st.refused {
				failpoint(StepAfterWrite)
				cm.add(j.tp, j.st.next, b.MemberEpoch)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := s.flush(ctx, cm, gen, b.MemberEpoch); err != nil {
		return err
	}
	s.partitions.Store(int64(s.writable()))
	s.opts.Metrics.owned.Set(float64(s.writable()))
	return nil
}

// claimGrants brings the partition states in line with a poll's grants;
// the partitions whose reads it moved to the store's position get the
// new seek generation.
func (s *Sink) claimGrants(ctx context.Context, gc *client.GroupConsumer, grants []api.PartitionGrant) error {
	granted := make(map[api.TopicPartition]int64, len(grants))
	for _, g := range grants {
		granted[api.TopicPartition{Topic: g.Topic, Partition: g.Partition}] = g.Fence
	}
	for tp := range s.owned {
		if _, ok := granted[tp]; !ok {
			delete(s.owned, tp)
			if f, ok := s.opts.Store.(Flusher); ok {
				f.Forget(tp)
			}
			s.opts.Metrics.lag.DeleteLabelValues(tp.Topic, partLabel(tp.Partition))
		}
	}
	var seeks []api.PartitionOffset
	claimed := false
	for _, g := range grants {
		tp := api.TopicPartition{Topic: g.Topic, Partition: g.Partition}
		if st := s.owned[tp]; st != nil && st.fence >= g.Fence {
			continue
		}
		var next int64
		err := s.retry(ctx, func() (err error) {
			next, err = s.opts.Store.Claim(ctx, tp, g.Fence)
			return err
		})
		claimed = true
		switch {
		case errors.Is(err, ErrFenced):
			s.log.Info("sink: claim refused: the store holds a higher fence", "topic", tp.Topic, "partition", tp.Partition, "fence", g.Fence, "err", err)
			s.owned[tp] = &partState{fence: g.Fence, next: -1, refused: true}
			s.fenced.Add(1)
			s.opts.Metrics.claims.WithLabelValues("fenced").Inc()
			continue
		case err != nil:
			return fmt.Errorf("claiming %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		s.opts.Metrics.claims.WithLabelValues("ok").Inc()
		s.log.Info("sink: claimed", "topic", tp.Topic, "partition", tp.Partition, "fence", g.Fence, "next", next)
		s.owned[tp] = &partState{fence: g.Fence, next: next, first: -1}
		if next >= 0 {
			seeks = append(seeks, api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: next})
		}
	}
	if claimed {
		failpoint(StepAfterClaim)
	}
	if len(seeks) == 0 {
		return nil
	}
	// Between polls: the poll in flight, if any, answers first (its
	// records of these partitions are then dropped by generation).
	s.seekMu.Lock()
	err := gc.Seek(seeks)
	s.seekGen++
	gen := s.seekGen
	s.seekMu.Unlock()
	if err != nil {
		return err
	}
	for _, p := range seeks {
		s.owned[api.TopicPartition{Topic: p.Topic, Partition: p.Partition}].seekGen = gen
	}
	return nil
}

// flush calls a Flusher store's Flush for every partition held, writable
// and not moved by a seek since the answer at generation gen was polled,
// and queues the commits of those whose durable next moved.
func (s *Sink) flush(ctx context.Context, cm *committer, gen uint64, epoch int32) error {
	if _, ok := s.opts.Store.(Flusher); !ok {
		return nil
	}
	for tp, st := range s.owned {
		if st.refused || st.seekGen > gen {
			continue
		}
		before := st.next
		if err := s.write(ctx, tp, st, nil); err != nil {
			return err
		}
		if !st.refused && st.next != before {
			cm.add(tp, st.next, epoch)
		}
	}
	return nil
}

// write sends one partition's batch (nil: a Flusher store's Flush),
// retrying what may succeed later, and updates st: its next offset, or
// refused when the store holds a higher fence.
func (s *Sink) write(ctx context.Context, tp api.TopicPartition, st *partState, recs []Record) error {
	start := time.Now()
	flusher, buffered := s.opts.Store.(Flusher)
	if buffered && st.next < 0 && st.first < 0 && len(recs) > 0 {
		st.first = recs[0].Offset
	}
	var next int64
	err := s.retry(ctx, func() (err error) {
		if recs == nil {
			next, err = flusher.Flush(ctx, tp, st.fence)
		} else {
			next, err = s.opts.Store.Write(ctx, tp, st.fence, recs)
		}
		return err
	})
	switch {
	case errors.Is(err, ErrFenced):
		s.log.Info("sink: write refused: the store holds a higher fence; the partition waits for a new grant",
			"topic", tp.Topic, "partition", tp.Partition, "fence", st.fence, "err", err)
		st.refused = true
		s.fenced.Add(1)
		s.opts.Metrics.batches.WithLabelValues("fenced").Inc()
		return nil
	case err != nil:
		s.opts.Metrics.batches.WithLabelValues("error").Inc()
		if len(recs) == 0 {
			return fmt.Errorf("flushing %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		return fmt.Errorf("writing %s/%d offsets %d-%d: %w", tp.Topic, tp.Partition, recs[0].Offset, recs[len(recs)-1].Offset, err)
	}
	var n int64
	switch {
	case !buffered:
		n = int64(len(recs))
		if st.next >= 0 {
			n = min(n, next-st.next)
		}
	case next < 0 || next == st.next:
		return nil // gathered, nothing new is durable
	case st.next >= 0:
		n = next - st.next // offsets now durable (records, on a topic that is not compacted)
	case st.first >= 0:
		n = next - st.first
	}
	st.next = next
	s.written.Add(n)
	s.batches.Add(1)
	s.opts.Metrics.written.WithLabelValues(tp.Topic).Add(float64(n))
	s.opts.Metrics.batches.WithLabelValues("ok").Inc()
	s.opts.Metrics.batchTime.Observe(time.Since(start).Seconds())
	return nil
}

func (s *Sink) writable() int {
	n := 0
	for _, st := range s.owned {
		if !st.refused {
			n++
		}
	}
	return n
}

// retry calls f until it succeeds, fails in a way Retriable says is final,
// or ctx ends, waiting MinBackoff doubling to MaxBackoff between calls.
func (s *Sink) retry(ctx context.Context, f func() error) error {
	backoff := s.opts.MinBackoff
	for {
		err := f()
		if !Retriable(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.opts.Metrics.storeRetry.Inc()
		s.log.Warn("sink: retrying", "err", err, "backoff", backoff)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

// join joins the group, retrying retriable failures (the client has
// retried them already) with backoff until ctx ends. A topic that does not
// exist yet is waited for too: a sink started with the rest of a stack may
// come up before whoever creates its topics.
func (s *Sink) join(ctx context.Context, gc *client.GroupConsumer) error {
	backoff := s.opts.MinBackoff
	for {
		err := gc.Join(ctx)
		if err == nil || ctx.Err() != nil || (!client.IsRetriable(err) && !errors.Is(err, api.ErrUnknownTopic)) {
			return err
		}
		s.log.Warn("sink: join failed; retrying", "err", err, "backoff", backoff)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// polledPart is one partition's share of a poll: its JSON records, or a
// raw poll's batches.
type polledPart struct {
	tp   api.TopicPartition
	json []api.GroupRecord
	raw  *client.PartitionBatches
}

// polledParts splits a poll's answer by partition.
func polledParts(b client.GroupBatch) []polledPart {
	var out []polledPart
	for _, part := range byPartition(b.Records) {
		out = append(out, polledPart{tp: api.TopicPartition{Topic: part[0].Topic, Partition: part[0].Partition}, json: part})
	}
	for i := range b.Partitions {
		p := &b.Partitions[i]
		out = append(out, polledPart{tp: api.TopicPartition{Topic: p.Topic, Partition: p.Partition}, raw: p})
	}
	return out
}

// records converts the part's records to the bytes the producer sent,
// dropping those below next (already in the store).
func (p polledPart) records(next int64) ([]Record, error) {
	if p.raw == nil {
		return storeRecords(p.json, next)
	}
	recs, err := p.raw.Records()
	if err != nil {
		return nil, fmt.Errorf("%s/%d: %w", p.tp.Topic, p.tp.Partition, err)
	}
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		if next >= 0 && r.Offset < next {
			continue
		}
		rec := Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			rec.Headers = make(map[string]string, len(r.Headers))
			for _, h := range r.Headers {
				rec.Headers[h.Key] = string(h.Value)
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// byPartition splits a poll's records by partition, each in offset order.
func byPartition(recs []api.GroupRecord) [][]api.GroupRecord {
	idx := map[api.TopicPartition]int{}
	var out [][]api.GroupRecord
	for _, r := range recs {
		tp := api.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		i, ok := idx[tp]
		if !ok {
			i = len(out)
			idx[tp] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	for _, p := range out {
		slices.SortStableFunc(p, func(a, b api.GroupRecord) int { return cmp.Compare(a.Offset, b.Offset) })
	}
	return out
}

// storeRecords converts a partition's polled records to the bytes the
// producer sent, dropping those below next (already in the store).
func storeRecords(part []api.GroupRecord, next int64) ([]Record, error) {
	out := make([]Record, 0, len(part))
	for _, r := range part {
		if next >= 0 && r.Offset < next {
			continue
		}
		rec, err := fromFetched(r.FetchedRecord)
		if err != nil {
			return nil, fmt.Errorf("%s/%d %w", r.Topic, r.Partition, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// fromFetched converts a record as the gateway renders it to its bytes.
func fromFetched(r api.FetchedRecord) (Record, error) {
	rec := Record{Offset: r.Offset, Timestamp: r.Timestamp, Headers: r.Headers}
	var err error
	switch {
	case r.Key != nil:
		rec.Key = []byte(*r.Key)
	case r.KeyB64 != nil:
		if rec.Key, err = base64.StdEncoding.DecodeString(*r.KeyB64); err != nil {
			return Record{}, fmt.Errorf("offset %d: key_b64: %w", r.Offset, err)
		}
	}
	switch {
	case r.Value != nil:
		rec.Value = []byte(r.Value)
	case r.ValueB64 != nil:
		if rec.Value, err = base64.StdEncoding.DecodeString(*r.ValueB64); err != nil {
			return Record{}, fmt.Errorf("offset %d: value_b64: %w", r.Offset, err)
		}
	}
	return rec, nil
}

// ClientLog is a ReadLogFunc that fetches through c (any gateway; a range
// below the brokers' local data is read from tiered storage by the
// brokers).
func ClientLog(c *client.Client) ReadLogFunc {
	return func(ctx context.Context, tp api.TopicPartition, first, last int64) ([]Record, error) {
		var out []Record
		for next := first; next <= last; {
			fr, err := c.Fetch(ctx, tp.Topic, tp.Partition, client.At(next), client.FetchOptions{MaxRecords: int(min(last-next+1, 10000))})
			if err != nil {
				return nil, err
			}
			for _, r := range fr.Records {
				if r.Offset < next || r.Offset > last {
					continue
				}
				rec, err := fromFetched(r)
				if err != nil {
					return nil, err
				}
				out = append(out, rec)
				next = r.Offset + 1
			}
			if fr.NextOffset > next {
				next = fr.NextOffset
			}
			if len(fr.Records) == 0 && fr.NextOffset <= next && next <= last {
				if fr.HighWatermark <= last {
					return nil, fmt.Errorf("%s/%d: the log ends at %d, before %d", tp.Topic, tp.Partition, fr.HighWatermark, last+1)
				}
				return nil, fmt.Errorf("%s/%d: no progress reading at %d", tp.Topic, tp.Partition, next)
			}
		}
		return out, nil
	}
}
