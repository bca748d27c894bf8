package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/api/apijson"
)

// Server-Sent Events: a partition's or a topic's records as
// text/event-stream, for browsers' EventSource.
//
// Each record is one event: "id:" a cursor naming the position after it,
// "data:" the record as the fetch API renders it (with its topic and
// partition). A reconnect that sends the last id it saw (EventSource's
// Last-Event-ID header, or ?last_event_id= on a first connection, which
// cannot set headers) resumes right after that event: nothing is skipped
// or sent twice. For a partition stream the id is the next offset; for a
// topic stream it is an api.Cursor naming every partition's next offset.
//
// The stream starts with "retry:" (how long the browser waits before it
// reconnects), sends a comment every sseHeartbeat so proxies keep it
// open, and ends at the gateway's shutdown (the browser reconnects,
// elsewhere). SSE streams count against the WebSocket connection limits
// (gateway.ws.max.connections and per IP), take the same write timeout,
// and their fetches are the caller's (ACLs and fetch quotas apply). A
// failure ends the stream with an "error" event whose data is the error
// body; the browser reconnects and resumes.
const (
	sseHeartbeat  = 15 * time.Second
	sseRetryMs    = 2000
	sseMaxRecords = 500
	sseMaxBytes   = 1 << 20
)

// sseWriter writes events with a write deadline for each.
type sseWriter struct {
	g  *Gateway
	w  http.ResponseWriter
	rc *http.ResponseController
	b  []byte
}

func (g *Gateway) startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies that buffer responses pass this one through
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{g: g, w: w, rc: http.NewResponseController(w)}
	s.b = append(s.b, "retry: "+strconv.Itoa(sseRetryMs)+"\n\n"...)
	return s
}

// event adds one event to the buffer; data's line breaks become further
// data lines, as the format asks (a JSON text stays the same text).
func (s *sseWriter) event(name, id string, data []byte) {
	if name != "" {
		s.b = append(s.b, "event: "+name+"\n"...)
	}
	if id != "" {
		s.b = append(s.b, "id: "+id+"\n"...)
	}
	for {
		i := indexLineBreak(data)
		s.b = append(s.b, "data: "...)
		if i < 0 {
			s.b = append(s.b, data...)
			s.b = append(s.b, '\n')
			break
		}
		s.b = append(s.b, data[:i]...)
		s.b = append(s.b, '\n')
		data = data[i+1:]
	}
	s.b = append(s.b, '\n')
}

func indexLineBreak(b []byte) int {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

// flush writes what is buffered within the write timeout.
func (s *sseWriter) flush() error {
	if len(s.b) == 0 {
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.g.wsConns.lim.WriteTimeout))
	_, err := s.w.Write(s.b)
	s.b = s.b[:0]
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}

func (s *sseWriter) heartbeat() error {
	s.b = append(s.b, ": keep-alive\n\n"...)
	return s.flush()
}

// fail ends the stream with an error event.
func (s *sseWriter) fail(err error) {
	e := api.Classify(err)
	body, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: e.Code, Message: e.Message, Retriable: e.Retriable()}})
	s.event("error", "", body)
	_ = s.flush()
}

// lastEventID is the id a reconnecting client saw last: the Last-Event-ID
// header, else ?last_event_id=.
func lastEventID(r *http.Request) string {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		return id
	}
	return r.URL.Query().Get("last_event_id")
}

// sseNext returns the records of fp's partition at offset. At the
// partition's end (atEnd) it first waits on the partition's shared long
// poll (tails) for up to sseHeartbeat, instead of long-polling the leader
// itself, and renders what the poll read when it read at offset; so idle
// SSE streams, like WebSockets, cost the broker one poll per partition and
// hold no fetch of their own. A wait that runs out returns no records and
// timedOut (time for a heartbeat). The fetches it makes never wait.
func (g *Gateway) sseNext(ctx context.Context, fp fetchParams, offset int64, atEnd bool) (res api.FetchResponse, timedOut bool, err error) {
	fp.wait = 0
	if atEnd {
		wctx, cancel := context.WithTimeout(ctx, sseHeartbeat)
		d, ok := g.tails.wait(wctx, fp.topic, fp.partition, offset)
		cancel()
		if !ok {
			return api.FetchResponse{NextOffset: offset, HighWatermark: offset}, ctx.Err() == nil, ctx.Err()
		}
		if d != nil && d.from == offset && !g.fetchQuotaApplies(ctx) {
			res, err = renderFetched(fp, offset, d.raw, d.next, d.hw)
			return res, false, err
		}
	}
	res, err = g.fetchRecords(ctx, fp, offset)
	return res, false, err
}

// sseAtEnd reports whether a stream that got res is at its partition's
// end: nothing came, or what came reached the HW.
func sseAtEnd(res api.FetchResponse) bool {
	return len(res.Records) == 0 || res.NextOffset >= res.HighWatermark
}

// sseContext is the stream's context: it ends with the request or at the
// gateway's shutdown.
func (g *Gateway) sseContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(g.wsConns.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// handlePartitionSSE is GET /v1/topics/{topic}/partitions/{partition}/sse.
func (g *Gateway) handlePartitionSSE(w http.ResponseWriter, r *http.Request) {
	fp, err := g.parseFetchParams(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if id := lastEventID(r); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "last event id %q is not an offset", id))
			return
		}
		fp.offsetSpec = strconv.FormatInt(n, 10)
	}
	release, err := g.wsConns.admit(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer release()
	ctx, cancel := g.sseContext(r)
	defer cancel()
	offset, err := g.resolveOffset(ctx, fp.topic, fp.partition, fp.offsetSpec)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	s := g.startSSE(w)
	if err := s.flush(); err != nil {
		return
	}
	fp.maxRecords, fp.maxBytes = sseMaxRecords, sseMaxBytes
	atEnd := false
	for ctx.Err() == nil {
		res, timedOut, err := g.sseNext(ctx, fp, offset, atEnd)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if g.waitThrottled(ctx, err) {
				continue
			}
			s.fail(err)
			return
		}
		atEnd = sseAtEnd(res)
		if len(res.Records) == 0 {
			offset = max(offset, res.NextOffset)
			if timedOut && s.heartbeat() != nil {
				return
			}
			continue
		}
		for i := range res.Records {
			rec := api.GroupRecord{Topic: fp.topic, Partition: fp.partition, FetchedRecord: res.Records[i]}
			s.event("", strconv.FormatInt(rec.Offset+1, 10), apijson.AppendGroupRecord(nil, &rec))
		}
		offset = res.NextOffset
		if s.flush() != nil {
			return
		}
	}
}

// handleTopicSSE is GET /v1/topics/{topic}/sse: every partition's records,
// each partition in order, interleaved as they come.
func (g *Gateway) handleTopicSSE(w http.ResponseWriter, r *http.Request) {
	topic := chi.URLParam(r, "topic")
	tm, ok := g.view.Current().Topics[topic]
	if !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic))
		return
	}
	spec := r.URL.Query().Get("offset")
	switch spec {
	case "":
		spec = api.ResetEarliest
	case api.ResetEarliest, api.ResetLatest:
	default:
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidOffset, "offset=%q: want earliest or latest (a topic stream resumes from its last event id)", spec))
		return
	}
	positions := map[int32]int64{}
	if id := lastEventID(r); id != "" {
		c, err := api.DecodeCursor(id)
		if err != nil {
			apihttp.WriteError(w, err)
			return
		}
		for _, p := range c.Positions {
			if p.Topic == topic && p.Offset >= 0 {
				positions[p.Partition] = p.Offset
			}
		}
	}
	release, err := g.wsConns.admit(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer release()
	ctx, cancel := g.sseContext(r)
	defer cancel()
	n := tm.Partitions()
	for p := range n {
		if _, ok := positions[int32(p)]; ok {
			continue
		}
		off, err := g.resolveOffset(ctx, topic, int32(p), spec)
		if err != nil {
			apihttp.WriteError(w, err)
			return
		}
		positions[int32(p)] = off
	}
	s := g.startSSE(w)
	if err := s.flush(); err != nil {
		return
	}
	type batch struct {
		p    int32
		res  api.FetchResponse
		err  error
		done chan struct{} // closed by the writer once the batch is written
	}
	batches := make(chan batch)
	// The readers end with ctx; the handler cancels it and waits for them.
	var readers sync.WaitGroup
	defer func() {
		cancel()
		readers.Wait()
	}()
	for p := range n {
		part := int32(p)
		readers.Add(1)
		go func() {
			defer readers.Done()
			fp := fetchParams{topic: topic, partition: part, maxRecords: sseMaxRecords, maxBytes: sseMaxBytes / int64(max(n, 1))}
			fp.maxBytes = max(fp.maxBytes, 64<<10)
			offset := positions[part] // read before the writer starts changing it
			atEnd := false
			for ctx.Err() == nil {
				res, timedOut, err := g.sseNext(ctx, fp, offset, atEnd)
				if err != nil && g.waitThrottled(ctx, err) {
					continue
				}
				if err == nil {
					atEnd = sseAtEnd(res)
					if timedOut {
						continue // the writer's ticker sends the heartbeats
					}
				}
				b := batch{p: part, res: res, err: err, done: make(chan struct{})}
				select {
				case batches <- b:
				case <-ctx.Done():
					return
				}
				select { // one batch in flight per partition: memory stays bounded
				case <-b.done:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
				offset = max(offset, res.NextOffset)
			}
		}()
	}
	next := make([]api.PartitionOffset, n)
	for p := range n {
		next[p] = api.PartitionOffset{Topic: topic, Partition: int32(p), Offset: positions[int32(p)]}
	}
	heartbeat := time.NewTicker(sseHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if s.heartbeat() != nil {
				return
			}
		case b := <-batches:
			if b.err != nil {
				close(b.done)
				if ctx.Err() == nil {
					s.fail(b.err)
				}
				return
			}
			for i := range b.res.Records {
				rec := api.GroupRecord{Topic: topic, Partition: b.p, FetchedRecord: b.res.Records[i]}
				next[b.p].Offset = rec.Offset + 1
				s.event("", api.Cursor{Positions: next}.Encode(), apijson.AppendGroupRecord(nil, &rec))
			}
			if len(b.res.Records) > 0 {
				next[b.p].Offset = max(next[b.p].Offset, b.res.NextOffset)
			}
			close(b.done)
			if err := s.flush(); err != nil {
				return
			}
		}
	}
}
