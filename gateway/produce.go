package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/recordbatch"
)

const defaultProduceTimeout = 30 * time.Second

// produceParams are a produce request's query parameters.
type produceParams struct {
	acks    string // "all", "1" or "0"
	timeout time.Duration
}

// produceTopic returns the topic's metadata and parsed config.
func (g *Gateway) produceTopic(topic string) (*cluster.TopicMeta, api.TopicConfig, error) {
	tm, ok := g.view.Current().Topics[topic]
	if !ok {
		return nil, api.TopicConfig{}, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic)
	}
	if tm.Partitions() == 0 {
		return nil, api.TopicConfig{}, api.Errorf(api.CodeInternal, "topic %q has no partitions in its record", topic)
	}
	cfg, err := api.ParseTopicConfig(tm.Record.Configs, len(tm.Record.Replicas[0]))
	if err != nil {
		// The controller validated it at creation: this is the server's fault.
		return nil, cfg, api.Errorf(api.CodeInternal, "topic %q has an unusable stored config: %v", topic, err)
	}
	return tm, cfg, nil
}

// handleProduce is POST /v1/topics/{topic}/records. Every byte the request
// makes the gateway hold is taken from the produce memory budget first
// (res), and given back when the request ends, or, for acks=0, when its
// background sends end.
func (g *Gateway) handleProduce(w http.ResponseWriter, r *http.Request) {
	topic := chi.URLParam(r, "topic")
	tm, cfg, err := g.produceTopic(topic)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	pp, err := parseProduceQuery(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	res := &reservation{b: g.mem}
	defer res.release()
	in, err := g.readRecords(r, cfg, tm.Partitions(), res)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer in.releaseBody(res)
	recs := in.recs
	defer func() { putPending(recs) }()
	if err := checkRecords(topic, recs, cfg, time.Now().UnixMilli()); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.assignPartitions(topic, recs, tm.Partitions()); err != nil {
		apihttp.WriteError(w, err)
		return
	}

	parts, order := groupByPartition(recs)
	ctx, cancel := context.WithTimeout(r.Context(), pp.timeout)
	defer cancel()
	seqs, err := g.checkProducer(ctx, in.pf, parts)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	opts := recordbatch.Options{Compression: cfg.Compression}
	retriable := retriableBeforeWrite
	if seqs != nil {
		opts.ProducerID, opts.ProducerEpoch = *in.pf.id, *in.pf.epoch
		// Brokers deduplicate by sequence: even a send whose outcome is
		// unknown can be sent again.
		retriable = retriableIdempotent
	}
	bs := newPartitionBatches(len(parts))
	defer bs.release()
	if err := bs.encode(recs, parts, order, opts, seqs, res); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	// The batches hold copies of the records: the body can go back now.
	in.releaseBody(res)

	if pp.acks == "0" {
		// Fire and forget: nothing is acknowledged, so nothing is promised.
		g.sendAcks0(ctx, topic, parts, bs, pp.timeout, retriable, res)
		offs := make([]api.RecordOffset, len(recs))
		for i := range recs {
			offs[i] = api.RecordOffset{Partition: recs[i].partition, Offset: -1}
		}
		writeOffsets(w, offs)
		return
	}
	var counts []int64 // records per batch: set when the batches may be coalesced
	if seqs == nil {
		counts = make([]int64, len(parts))
		for j, p := range parts {
			counts[j] = int64(len(order[p]))
		}
	}
	results, errs := g.sendAll(ctx, topic, parts, pp.acks, bs.batches, counts, retriable)
	g.answerProduce(w, recs, parts, order, results, errs)
}

// checkRecords applies the topic's per-record rules: max.message.bytes,
// the timestamp window, and a key on compacted topics.
func checkRecords(topic string, recs []pendingRecord, cfg api.TopicConfig, now int64) error {
	for i := range recs {
		if n := recs[i].size(); n > cfg.MaxMessageBytes {
			return api.Errorf(api.CodeRecordTooLarge, "record %d is %d bytes; max.message.bytes is %d", i, n, cfg.MaxMessageBytes)
		}
		if err := cfg.CheckTimestamp(recs[i].timestamp, now); err != nil {
			return api.Errorf(api.CodeInvalidTimestamp, "record %d: %s", i, api.Classify(err).Message)
		}
		// As Kafka: compaction keeps one record per key, so a record without
		// one has no place in a compacted topic.
		if cfg.Compact && recs[i].key == nil {
			return api.Errorf(api.CodeInvalidRecord, "record %d has no key; topic %q is compacted (cleanup.policy=compact)", i, topic)
		}
	}
	return nil
}

// partitionBatches are a request's encoded batches, one per partition it
// writes, in pooled buffers, with the budget bytes each holds.
type partitionBatches struct {
	batches [][]byte
	bufs    []*[]byte
	held    []int64
}

func newPartitionBatches(n int) *partitionBatches {
	return &partitionBatches{batches: make([][]byte, n), bufs: make([]*[]byte, n), held: make([]int64, n)}
}

// encode builds one RecordBatch v2 per partition. Each buffer is sized for
// its own partition's records, and its bytes are taken from res before it
// is built.
func (bs *partitionBatches) encode(recs []pendingRecord, parts []int32, order map[int32][]int, opts recordbatch.Options, seqs map[int32]int32, res *reservation) error {
	rs := getRecords(len(order[parts[0]]))
	defer func() { putRecords(rs) }()
	for j, p := range parts {
		rs = rs[:0]
		// At most what the batch takes: its header, and per record the
		// bytes and their framing (length, attributes, timestamp and offset
		// deltas, key, value and header lengths: at most 36 bytes, and 10 a
		// header).
		payload := int64(recordbatch.HeaderSize)
		for _, i := range order[p] {
			rs = append(rs, recordbatch.Record{Key: recs[i].key, Value: recs[i].value, Headers: recs[i].headers, Timestamp: recs[i].timestamp})
			payload += int64(recs[i].size()) + 36 + 10*int64(len(recs[i].headers))
		}
		// A compressed batch is built in a scratch buffer first.
		need := payload
		if opts.Compression != api.CompressionNone {
			need *= 2
		}
		if err := res.grow(need); err != nil {
			return err
		}
		bs.held[j] = need
		bs.bufs[j] = getBuf(int(payload))
		if seqs != nil {
			opts.BaseSequence = seqs[p]
		}
		b, err := recordbatch.Encode(*bs.bufs[j], rs, opts)
		if err != nil {
			return err
		}
		*bs.bufs[j] = b
		bs.batches[j] = b
		if need > payload {
			// The scratch buffer is back in its pool.
			res.shrink(need - payload)
			bs.held[j] = payload
		}
	}
	return nil
}

// release returns the buffers the request still owns to the pool.
func (bs *partitionBatches) release() {
	for _, bp := range bs.bufs {
		putBuf(bp)
	}
}

// sendAcks0 sends an acks=0 request's batches. Each partition's send runs
// in the background when one of the gateway's acks=0 slots is free, owning
// its batch and its share of res until it ends (Close waits for it and
// cancels its context); the others are sent before the handler answers, so
// a client that sends faster than the brokers take waits for its own sends.
func (g *Gateway) sendAcks0(ctx context.Context, topic string, parts []int32, bs *partitionBatches, timeout time.Duration, retriable func(error) bool, res *reservation) {
	var inline []int
	principal := auth.PrincipalFrom(ctx) // the background sends act for the caller too
	for j, p := range parts {
		if !g.acks0.tryAcquire() {
			inline = append(inline, j)
			continue
		}
		bp, own := bs.bufs[j], res.split(bs.held[j])
		started := g.goFunc(func() {
			defer g.acks0.release()
			defer own.release()
			defer putBuf(bp)
			ctx, cancel := context.WithTimeout(auth.WithPrincipal(g.ctx, principal), timeout)
			defer cancel()
			if _, err := g.produceTo(ctx, topic, p, "1", *bp, retriable); err != nil {
				g.log.Debug("acks=0 produce failed", "topic", topic, "partition", p, "err", err)
			}
		})
		if !started { // the gateway is closing: send it before answering
			g.acks0.release()
			res.join(own)
			inline = append(inline, j)
			continue
		}
		bs.bufs[j] = nil // the goroutine returns it to the pool
	}
	if len(inline) == 0 {
		return
	}
	ps, batches := make([]int32, len(inline)), make([][]byte, len(inline))
	for k, j := range inline {
		ps[k], batches[k] = parts[j], bs.batches[j]
	}
	_, errs := g.sendAll(ctx, topic, ps, "1", batches, nil, retriable)
	for k, err := range errs {
		if err != nil {
			g.log.Debug("acks=0 produce failed", "topic", topic, "partition", ps[k], "err", err)
		}
	}
}

// sendAll sends each partition's batch to its leader, concurrently, and
// waits for every answer. With counts (the records of each batch), the
// batches may share sends with other requests' (coalesce.go); without, as
// for an idempotent producer's, each goes alone.
func (g *Gateway) sendAll(ctx context.Context, topic string, parts []int32, acks string, batches [][]byte, counts []int64, retriable func(error) bool) ([]brokerapi.ProduceResult, []error) {
	results := make([]brokerapi.ProduceResult, len(parts))
	errs := make([]error, len(parts))
	send := func(j int) {
		if counts != nil {
			results[j], errs[j] = g.sends.send(ctx, topic, parts[j], acks, batches[j], counts[j])
		} else {
			results[j], errs[j] = g.produceTo(ctx, topic, parts[j], acks, batches[j], retriable)
		}
	}
	if len(parts) == 1 {
		send(0)
		return results, errs
	}
	var wg sync.WaitGroup
	for j := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(j)
		}()
	}
	wg.Wait()
	return results, errs
}

// answerProduce writes the offsets in request order, or, when a partition
// failed, a ProduceErrorBody with the first failure's status.
func (g *Gateway) answerProduce(w http.ResponseWriter, recs []pendingRecord, parts []int32, order map[int32][]int, results []brokerapi.ProduceResult, errs []error) {
	resp := api.ProduceResponse{Offsets: make([]api.RecordOffset, len(recs))}
	for i := range recs {
		resp.Offsets[i] = api.RecordOffset{Partition: recs[i].partition, Offset: -1}
	}
	var first *api.Error
	for j, p := range parts {
		if errs[j] != nil {
			e := api.Classify(errs[j])
			if first == nil {
				first = e
			}
			for _, i := range order[p] {
				resp.Offsets[i].Error = e.Code
			}
			continue
		}
		for k, i := range order[p] {
			resp.Offsets[i].Offset = results[j].BaseOffset + int64(k)
		}
	}
	if first != nil {
		g.metrics.produceRequests.WithLabelValues(string(first.Code)).Inc()
		resp.Error = &api.ErrorDetail{Code: first.Code, Message: first.Message, Retriable: first.Retriable()}
		w.Header().Set(api.HeaderErrorCode, string(first.Code))
		if first.Throttle > 0 {
			apihttp.SetThrottle(w.Header(), first.Throttle)
		}
		apihttp.WriteJSON(w, first.Status(), resp)
		return
	}
	g.metrics.produceRequests.WithLabelValues("ok").Inc()
	g.metrics.producedRecords.Add(float64(len(recs)))
	var debt time.Duration
	for _, res := range results {
		debt = max(debt, res.Throttle)
	}
	setDebt(w.Header(), debt)
	writeOffsets(w, resp.Offsets)
}

// groupByPartition lists the partitions a request writes, in order of first
// appearance, and each one's record indexes in request order. Most requests
// go to one partition (one key, or keyless and sticky): that case allocates
// almost nothing.
func groupByPartition(recs []pendingRecord) ([]int32, map[int32][]int) {
	first := recs[0].partition
	same := true
	for i := range recs {
		if recs[i].partition != first {
			same = false
			break
		}
	}
	if same {
		idx := make([]int, len(recs))
		for i := range idx {
			idx[i] = i
		}
		return []int32{first}, map[int32][]int{first: idx}
	}
	order := map[int32][]int{}
	var parts []int32
	for i := range recs {
		p := recs[i].partition
		if _, ok := order[p]; !ok {
			parts = append(parts, p)
		}
		order[p] = append(order[p], i)
	}
	return parts, order
}

// produceInput is a produce request's parsed body. The records alias the
// pooled body, which goes back (with its budget bytes) at releaseBody, once
// they are encoded.
type produceInput struct {
	recs     []pendingRecord
	pf       producerFields // only a JSON body can carry idempotent-producer fields
	body     *[]byte
	bodyHeld int64 // budget bytes the body holds
}

func (in *produceInput) releaseBody(res *reservation) {
	if in.body != nil {
		putBuf(in.body)
		res.shrink(in.bodyHeld)
		in.body, in.bodyHeld = nil, 0
	}
}

// readRecords reads and parses the body by its media type, within the
// body, record and header limits, taking what it holds from res.
func (g *Gateway) readRecords(r *http.Request, cfg api.TopicConfig, partitions int, res *reservation) (produceInput, error) {
	mt := mediaType(r)
	if mt != mediaCloudEvent && mt != mediaCloudEventBatch && isBinaryCloudEvent(r.Header) {
		return g.readBinaryCloudEvent(r, cfg, res)
	}
	switch mt {
	case mediaOctet:
		bp, held, err := g.readBody(r, int64(cfg.MaxMessageBytes), api.CodeRecordTooLarge, res)
		if err != nil {
			return produceInput{}, err
		}
		oq, err := parseOctetQuery(r.URL.Query())
		if err != nil {
			putBuf(bp)
			return produceInput{}, err
		}
		pr := pendingRecord{partition: oq.partition, key: oq.key, value: *bp}
		recs := append(getPending(1), pr)
		return produceInput{recs: recs, body: bp, bodyHeld: held}, nil
	case mediaJSON, mediaNDJSON, mediaCloudEvent, mediaCloudEventBatch:
		bp, held, err := g.readBody(r, g.opts.MaxBodyBytes, api.CodeRequestTooLarge, res)
		if err != nil {
			return produceInput{}, err
		}
		in := produceInput{body: bp, bodyHeld: held}
		lim := &parseLimits{maxRecords: g.limits.MaxRecordsPerRequest, maxHeaders: g.limits.MaxHeadersPerRecord,
			maxSequences: partitions, mem: res}
		switch mt {
		case mediaNDJSON:
			in.recs, err = parseNDJSON(*bp, lim)
		case mediaCloudEvent:
			in.recs, err = parseCloudEvent(*bp, lim)
		case mediaCloudEventBatch:
			in.recs, err = parseCloudEventBatch(*bp, lim)
		default:
			in.recs, in.pf, err = parseJSONBody(*bp, lim)
		}
		if err != nil {
			in.releaseBody(res)
			return produceInput{}, err
		}
		return in, nil
	case "":
		return produceInput{}, api.Errorf(api.CodeUnsupportedMediaType, "set Content-Type to %s (or send a CloudEvent in binary mode, with ce-* headers)", produceMediaTypes)
	default:
		return produceInput{}, api.Errorf(api.CodeUnsupportedMediaType, "Content-Type %q: want %s (or a CloudEvent in binary mode, with ce-* headers)", mt, produceMediaTypes)
	}
}

// produceMediaTypes lists the media types of a produce body, for errors.
const produceMediaTypes = mediaJSON + ", " + mediaNDJSON + ", " + mediaOctet + ", " + mediaCloudEvent + " or " + mediaCloudEventBatch

// readBinaryCloudEvent reads a CloudEvent in binary mode: its body is the
// record's value, within max.message.bytes as an application/octet-stream
// body is, and its ce-* headers (and Content-Type) the attributes. An
// empty body is an event without data: a null value.
func (g *Gateway) readBinaryCloudEvent(r *http.Request, cfg api.TopicConfig, res *reservation) (produceInput, error) {
	bp, held, err := g.readBody(r, int64(cfg.MaxMessageBytes), api.CodeRecordTooLarge, res)
	if err != nil {
		return produceInput{}, err
	}
	in := produceInput{body: bp, bodyHeld: held}
	lim := &parseLimits{maxRecords: 1, maxHeaders: g.limits.MaxHeadersPerRecord, mem: res}
	pr, err := binaryCloudEvent(r.Header, lim)
	if err != nil {
		in.releaseBody(res)
		return produceInput{}, err
	}
	if len(*bp) > 0 {
		pr.value = *bp
	}
	in.recs = append(getPending(1), pr)
	return in, nil
}

// readBody reads a request body of at most limit bytes (else code) into a
// pooled buffer, refusing by Content-Length before reading when it is
// declared. The buffer is not sized from Content-Length: it starts at 64
// KiB and doubles as bytes arrive, each step taken from res first, so a
// client that declares 32 MiB and sends nothing holds 64 KiB. It returns
// the budget bytes the body holds.
func (g *Gateway) readBody(r *http.Request, limit int64, code api.Code, res *reservation) (*[]byte, int64, error) {
	declared := r.ContentLength
	if declared > limit {
		return nil, 0, api.Errorf(code, "body of %d bytes; the limit is %d", declared, limit)
	}
	if declared > g.mem.limit {
		return nil, 0, api.Errorf(api.CodeRequestTooLarge, "body of %d bytes; the gateway's %s is %d", declared, api.LimitProduceMemoryBytes, g.mem.limit)
	}
	if declared > 0 && !g.mem.fits(declared) {
		// Refuse without holding the body. It is still read, into
		// nothing (a small pooled buffer; bounded by its declared size,
		// within the limit, and by the read timeout): a client that is
		// still sending when the answer comes and the connection closes
		// would see a reset instead of the 429 and its Retry-After.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, declared))
		return nil, 0, g.mem.busy()
	}
	// One byte past the end (limit or Content-Length) lets the last read
	// see EOF, or a body longer than the limit.
	ceiling := limit + 1
	if declared >= 0 {
		ceiling = declared + 1
	}
	return readGrowing(r.Body, limit, code, ceiling, res)
}

// readGrowing reads body into a pooled buffer that doubles from 64 KiB up
// to ceiling, taking each step from res before it is used.
func readGrowing(body io.Reader, limit int64, code api.Code, ceiling int64, res *reservation) (*[]byte, int64, error) {
	held := min(64<<10, ceiling)
	if err := res.grow(held); err != nil {
		return nil, 0, err
	}
	bp := getBuf(int(held))
	b := *bp
	fail := func(err error) (*[]byte, int64, error) {
		*bp = b
		putBuf(bp)
		res.shrink(held)
		return nil, 0, err
	}
	r := io.LimitReader(body, limit+1)
	for {
		if int64(len(b)) == held {
			next := min(2*held, ceiling)
			if next == held {
				// Only a body past limit fills the ceiling.
				return fail(api.Errorf(code, "body exceeds %d bytes", limit))
			}
			if err := res.grow(next - held); err != nil {
				return fail(err)
			}
			held = next
			if int64(cap(b)) < held {
				// The outgrown buffer is left to the collector: pooled, it
				// would be the next request's first buffer, and be outgrown
				// again.
				nbp := getBuf(int(held))
				bp, b = nbp, append(*nbp, b...)
			}
		}
		m, err := r.Read(b[len(b):held])
		b = b[:len(b)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				return fail(api.Errorf(api.CodeInvalidRequest, "the body did not arrive within %s", api.LimitReadTimeoutMs))
			}
			return fail(api.Errorf(api.CodeInvalidRequest, "reading body: %v", err))
		}
	}
	*bp = b
	if int64(len(b)) > limit {
		return fail(api.Errorf(code, "body exceeds %d bytes", limit))
	}
	return bp, held, nil
}

// writeOffsets writes a successful ProduceResponse. It is encoded by hand: a
// thousand-record request would otherwise spend more time in reflection
// than in the broker.
func writeOffsets(w http.ResponseWriter, offs []api.RecordOffset) {
	bp := getBuf(16 + 36*len(offs))
	defer putBuf(bp)
	b := append(*bp, `{"offsets":[`...)
	for i, o := range offs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = strconv.AppendInt(b, int64(o.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, o.Offset, 10)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	*bp = b
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// retriableBeforeWrite reports whether a produce failed in a way that proves
// nothing was written, so sending it again cannot duplicate records.
func retriableBeforeWrite(err error) bool {
	if brokerapi.NotSent(err) {
		return true
	}
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case api.CodeNotLeader, api.CodeLeaderNotAvailable, api.CodeNotEnoughReplicas, api.CodeUnknownTopic, api.CodeUnknownPartition,
		api.CodeFencedLeaderEpoch, api.CodeUnknownLeaderEpoch:
		return true
	}
	return false
}

// retriableIdempotent: for a batch with a producer id and sequence, every
// retriable failure may be retried, including those after which the batch may
// have been written (the broker answers a duplicate with its first offsets),
// but THROTTLED, which goes back to the client to wait off.
func retriableIdempotent(err error) bool {
	if retriableBeforeWrite(err) {
		return true
	}
	e := api.Classify(err)
	return e.Retriable() && e.Code != api.CodeThrottled
}

// produceTo sends one partition's batch to its leader, following leadership
// changes and retrying failures that wrote nothing until ctx ends.
//
// Between attempts it waits for the view to name another leader or epoch
// than the one tried, at most the backoff: a leadership that moves (a
// controlled shutdown, a failover) is written to as soon as the gateway
// learns of the move, not a backoff later.
func (g *Gateway) produceTo(ctx context.Context, topic string, p int32, acks string, batch []byte, retriable func(error) bool) (brokerapi.ProduceResult, error) {
	tried := api.PartitionState{Leader: -1, LeaderEpoch: -1}
	pause := func(ctx context.Context, d time.Duration) { g.awaitLeaderChange(ctx, topic, p, tried, d) }
	res, err := retryPaced(ctx, retriable, pause, func() (brokerapi.ProduceResult, error) {
		addr, st, err := g.view.Current().Leader(topic, p)
		if err != nil {
			tried = api.PartitionState{Leader: -1, LeaderEpoch: -1} // any live leader is worth an attempt
			return brokerapi.ProduceResult{}, err
		}
		tried = st
		return g.brokers.Produce(ctx, addr, topic, p, acks, leaderTimeout(ctx), st.LeaderEpoch, batch)
	})
	if err != nil && brokerapi.NotSent(err) {
		// Never reached a leader: say so with a code that means nothing
		// was written, so the client knows a retry is safe.
		return res, api.Errorf(api.CodeLeaderNotAvailable, "%s/%d: could not reach the leader: %v", topic, p, err)
	}
	return res, err
}

// leaderTimeout is the wait a produce asks of its leader: what is left of
// ctx, at least a millisecond (a deadline that passed since the retry
// looked is a timeout at the leader, not a malformed request: the broker
// refuses a negative timeout_ms with INVALID_REQUEST); 0, the leader's
// default, without a deadline.
func leaderTimeout(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(dl), time.Millisecond)
}

// awaitLeaderChange waits until the view names a live leader of topic/p
// other than tried's leader or epoch, d passes, or ctx ends.
func (g *Gateway) awaitLeaderChange(ctx context.Context, topic string, p int32, tried api.PartitionState, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		published := g.view.Published() // before Current: no snapshot in between goes unseen
		if _, st, err := g.view.Current().Leader(topic, p); err == nil && (st.Leader != tried.Leader || st.LeaderEpoch != tried.LeaderEpoch) {
			return
		}
		select {
		case <-published:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// retry calls f until it succeeds, fails in a way ok says is not worth
// retrying, or ctx ends; then it returns the last error.
func retry[T any](ctx context.Context, ok func(error) bool, f func() (T, error)) (T, error) {
	return retryPaced(ctx, ok, sleepCtx, f)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retryPaced is retry with pause between attempts: it waits at most the
// backoff, which grows from 10 ms to 250 ms, and may end earlier when
// something worth another attempt happened.
func retryPaced[T any](ctx context.Context, ok func(error) bool, pause func(context.Context, time.Duration), f func() (T, error)) (T, error) {
	backoff := 10 * time.Millisecond
	for {
		v, err := f()
		if err == nil || !ok(err) {
			return v, err
		}
		pause(ctx, backoff)
		if ctx.Err() != nil {
			// Ended while waiting: the last answer stands, rather than an
			// attempt with no time left.
			return v, err
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}
