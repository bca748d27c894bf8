package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
)

const defaultProduceTimeout = 30 * time.Second

// handleProduce is POST /v1/topics/{topic}/records.
func (g *Gateway) handleProduce(w http.ResponseWriter, r *http.Request) {
	topic := chi.URLParam(r, "topic")
	tm, ok := g.view.Current().Topics[topic]
	if !ok {
		api.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic))
		return
	}
	if tm.Partitions() == 0 {
		api.WriteError(w, api.Errorf(api.CodeInternal, "topic %q has no partitions in its record", topic))
		return
	}
	cfg, err := api.ParseTopicConfig(tm.Record.Configs, len(tm.Record.Replicas[0]))
	if err != nil {
		// The controller validated it at creation: this is the server's fault.
		api.WriteError(w, api.Errorf(api.CodeInternal, "topic %q has an unusable stored config: %v", topic, err))
		return
	}
	q := r.URL.Query()
	acks := q.Get("acks")
	switch acks {
	case "":
		acks = "all"
	case "all", "1", "0":
	case "-1":
		acks = "all"
	default:
		api.WriteError(w, api.Errorf(api.CodeInvalidRequest, "acks=%q: want 0, 1 or all", acks))
		return
	}
	timeout := defaultProduceTimeout
	if s := q.Get("timeout_ms"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > 300_000 {
			api.WriteError(w, api.Errorf(api.CodeInvalidRequest, "timeout_ms=%q: want 1 to 300000", s))
			return
		}
		timeout = time.Duration(n) * time.Millisecond
	}

	recs, body, pf, err := g.readRecords(r, cfg)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	bodyReleased := false
	releaseBody := func() {
		if !bodyReleased {
			bodyReleased = true
			putBuf(body)
		}
	}
	defer releaseBody()
	defer func() { putPending(recs) }()
	for i := range recs {
		if n := recs[i].size(); n > cfg.MaxMessageBytes {
			api.WriteError(w, api.Errorf(api.CodeRecordTooLarge, "record %d is %d bytes; max.message.bytes is %d", i, n, cfg.MaxMessageBytes))
			return
		}
		// As Kafka: compaction keeps one record per key, so a record without
		// one has no place in a compacted topic.
		if cfg.Compact && recs[i].key == nil {
			api.WriteError(w, api.Errorf(api.CodeInvalidRecord, "record %d has no key; topic %q is compacted (cleanup.policy=compact)", i, topic))
			return
		}
	}
	if err := g.assignPartitions(topic, recs, tm.Partitions()); err != nil {
		api.WriteError(w, err)
		return
	}

	parts, order := groupByPartition(recs)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	seqs, err := g.checkProducer(ctx, pf, parts)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	opts := api.BatchOptions{Compression: cfg.Compression}
	retriable := retriableBeforeWrite
	if seqs != nil {
		opts.ProducerID, opts.ProducerEpoch = *pf.id, *pf.epoch
		// Brokers deduplicate by sequence: even a send whose outcome is
		// unknown can be sent again.
		retriable = retriableIdempotent
	}
	batches := make([][]byte, len(parts))
	bufs := make([]*[]byte, len(parts))
	defer func() {
		for _, bp := range bufs {
			putBuf(bp)
		}
	}()
	rs := getRecords(len(recs))
	defer func() { putRecords(rs) }()
	for j, p := range parts {
		rs = rs[:0]
		for _, i := range order[p] {
			rs = append(rs, api.Record{Key: recs[i].key, Value: recs[i].value, Headers: recs[i].headers, Timestamp: recs[i].timestamp})
		}
		bufs[j] = getBuf(len(*body) + 512)
		if seqs != nil {
			opts.BaseSequence = seqs[p]
		}
		b, err := api.EncodeBatch(*bufs[j], rs, opts)
		if err != nil {
			api.WriteError(w, err)
			return
		}
		*bufs[j] = b
		batches[j] = b
	}
	// The batches hold copies of the records: the body can go back now.
	releaseBody()

	resp := api.ProduceResponse{Offsets: make([]api.RecordOffset, len(recs))}
	for i := range recs {
		resp.Offsets[i] = api.RecordOffset{Partition: recs[i].partition, Offset: -1}
	}
	if acks == "0" {
		// Fire and forget: nothing is acknowledged, so nothing is promised.
		for j, p := range parts {
			g.wg.Add(1)
			go func(p int32, b []byte) { // b is a copy: the pooled buffer goes back when the handler returns
				defer g.wg.Done()
				ctx, cancel := context.WithTimeout(g.ctx, timeout)
				defer cancel()
				if _, err := g.produceTo(ctx, topic, p, "1", b, retriable); err != nil {
					g.log.Debug("acks=0 produce failed", "topic", topic, "partition", p, "err", err)
				}
			}(p, bytes.Clone(batches[j]))
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}

	results := make([]brokerapi.ProduceResult, len(parts))
	errs := make([]error, len(parts))
	if len(parts) == 1 {
		results[0], errs[0] = g.produceTo(ctx, topic, parts[0], acks, batches[0], retriable)
	} else {
		var wg sync.WaitGroup
		for j, p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[j], errs[j] = g.produceTo(ctx, topic, p, acks, batches[j], retriable)
			}()
		}
		wg.Wait()
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
		writeJSON(w, first.Status(), resp)
		return
	}
	g.metrics.produceRequests.WithLabelValues("ok").Inc()
	g.metrics.producedRecords.Add(float64(len(recs)))
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

// readRecords reads and parses the body by its media type, refusing oversized
// bodies before buffering them. The records alias the returned pooled body,
// which the caller releases with putBuf once they are encoded. Only a JSON
// body can carry idempotent-producer fields.
func (g *Gateway) readRecords(r *http.Request, cfg api.TopicConfig) ([]pendingRecord, *[]byte, producerFields, error) {
	var none producerFields
	mt := mediaType(r)
	switch mt {
	case mediaOctet:
		if r.ContentLength > int64(cfg.MaxMessageBytes) {
			return nil, nil, none, api.Errorf(api.CodeRecordTooLarge, "record of %d bytes; max.message.bytes is %d", r.ContentLength, cfg.MaxMessageBytes)
		}
		bp, err := readLimited(r.Body, int64(cfg.MaxMessageBytes), api.CodeRecordTooLarge, r.ContentLength)
		if err != nil {
			return nil, nil, none, err
		}
		q := r.URL.Query()
		pr := pendingRecord{partition: -1, value: *bp}
		if q.Has("key") {
			pr.key = []byte(q.Get("key"))
		}
		if s := q.Get("partition"); s != "" {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil || n < 0 {
				putBuf(bp)
				return nil, nil, none, api.Errorf(api.CodeInvalidRequest, "partition=%q is not a partition number", s)
			}
			pr.partition = int32(n)
		}
		return []pendingRecord{pr}, bp, none, nil
	case mediaJSON, mediaNDJSON:
		if r.ContentLength > g.opts.MaxBodyBytes {
			return nil, nil, none, api.Errorf(api.CodeRequestTooLarge, "body of %d bytes; the gateway takes at most %d", r.ContentLength, g.opts.MaxBodyBytes)
		}
		bp, err := readLimited(r.Body, g.opts.MaxBodyBytes, api.CodeRequestTooLarge, r.ContentLength)
		if err != nil {
			return nil, nil, none, err
		}
		var recs []pendingRecord
		pf := none
		if mt == mediaNDJSON {
			recs, err = parseNDJSON(*bp)
		} else {
			recs, pf, err = parseJSONBody(*bp)
		}
		if err != nil {
			putBuf(bp)
			return nil, nil, none, err
		}
		return recs, bp, pf, nil
	case "":
		return nil, nil, none, api.Errorf(api.CodeUnsupportedMediaType, "set Content-Type to %s, %s or %s", mediaJSON, mediaNDJSON, mediaOctet)
	default:
		return nil, nil, none, api.Errorf(api.CodeUnsupportedMediaType, "Content-Type %q: want %s, %s or %s", mt, mediaJSON, mediaNDJSON, mediaOctet)
	}
}

// readLimited reads a whole body of at most limit bytes into a pooled buffer;
// past limit it stops reading and returns code. sizeHint is the declared
// Content-Length (-1 when unknown).
func readLimited(body io.Reader, limit int64, code api.Code, sizeHint int64) (*[]byte, error) {
	n := 64 << 10
	if sizeHint >= 0 && sizeHint <= limit {
		n = int(sizeHint) + 1
	}
	bp := getBuf(n)
	b := *bp
	r := io.LimitReader(body, limit+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			*bp = b
			putBuf(bp)
			return nil, api.Errorf(api.CodeInvalidRequest, "reading body: %v", err)
		}
	}
	*bp = b
	if int64(len(b)) > limit {
		putBuf(bp)
		return nil, api.Errorf(code, "body exceeds %d bytes", limit)
	}
	return bp, nil
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
// have been written (the broker answers a duplicate with its first offsets).
func retriableIdempotent(err error) bool {
	return retriableBeforeWrite(err) || api.Classify(err).Retriable()
}

// produceTo sends one partition's batch to its leader, following leadership
// changes and retrying failures that wrote nothing until ctx ends.
func (g *Gateway) produceTo(ctx context.Context, topic string, p int32, acks string, batch []byte, retriable func(error) bool) (brokerapi.ProduceResult, error) {
	res, err := retry(ctx, retriable, func() (brokerapi.ProduceResult, error) {
		addr, st, err := g.view.Current().Leader(topic, p)
		if err != nil {
			return brokerapi.ProduceResult{}, err
		}
		var remaining time.Duration
		if dl, ok := ctx.Deadline(); ok {
			remaining = time.Until(dl)
		}
		return g.brokers.Produce(ctx, addr, topic, p, acks, remaining, st.LeaderEpoch, batch)
	})
	if err != nil && brokerapi.NotSent(err) {
		// Never reached a leader: say so with a code that means nothing
		// was written, so the client knows a retry is safe.
		return res, api.Errorf(api.CodeLeaderNotAvailable, "%s/%d: could not reach the leader: %v", topic, p, err)
	}
	return res, err
}

// retry calls f until it succeeds, fails in a way ok says is not worth
// retrying, or ctx ends; then it returns the last error.
func retry[T any](ctx context.Context, ok func(error) bool, f func() (T, error)) (T, error) {
	backoff := 10 * time.Millisecond
	for {
		v, err := f()
		if err == nil || !ok(err) {
			return v, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}
