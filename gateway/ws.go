package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/recordbatch"
)

// WebSocket streaming with credit-based flow control.
//
// The client grants credit (records it can take): first with ?credit=N, then
// with {"credit":N} text messages that add to it. The server sends only while
// credit is positive and subtracts what it sends, so a slow consumer is never
// flooded and nothing is dropped: records wait in the log until credit comes.
// JSON frames never exceed the credit. Binary frames carry whole batches, so
// the last batch of a frame may take credit below zero by less than one batch.
//
// An error ends the stream with a text frame {"error":{...}} and a close
// status of 4000 + the error's HTTP status (4416: offset out of range), with
// the error code as the close reason. A credit frame that is not
// {"credit":N} with 0 < N <= 2^40 closes it with 1008 (policy violation);
// gateway shutdown closes it with 1001 (going away).
//
// A stream whose caller is over a quota waits the throttle time the broker
// gave and goes on (waitThrottled): slowed down, never closed. A caller with
// a fetch quota does not take a shared poll's batches (below) but fetches
// them itself, so the broker accounts them.
//
// A stream at the end of its partition waits on the partition's shared
// long poll (tails, tailwait.go), which asks the leader for as long as the
// broker allows (wsIdlePollWait) on behalf of every stream waiting there:
// the broker answers as soon as a record arrives, so the length of the poll
// costs no latency, and idle consumers with credit cost one broker request
// per partition per 30 s, however many they are. A stream's own fetches
// never wait.
const (
	wsPollWait     = 5 * time.Second
	wsIdlePollWait = maxWait
	wsMaxFrameRecs = 1000
	maxCredit      = 1 << 40
)

func (g *Gateway) handleWebSocket(w http.ResponseWriter, r *http.Request) {
	fp, err := g.parseFetchParams(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	sq, err := parseStreamQuery(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	release, err := g.wsConns.admit(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	conn, err := g.acceptWS(w, r)
	if err != nil {
		release()
		return // Accept wrote the HTTP error
	}
	conn.SetReadLimit(4096)
	// The stream outlives this handler: its context keeps the request's
	// values (the principal), not its end.
	ctx, cancel, done := g.wsConns.open(context.WithoutCancel(r.Context()), conn)
	s := &wsStream{g: g, conn: conn, fp: fp, binary: sq.binary,
		ctx: ctx, cancel: cancel, done: done, release: release, readerDone: make(chan struct{}), running: true}
	s.credit.Store(sq.credit)
	go func() {
		defer close(s.readerDone)
		s.readCredits()
	}()
	s.stopWake = context.AfterFunc(ctx, s.wake)
	s.run() // in this goroutine until the stream first waits
}

// endStream closes a WebSocket stream as its handler's error says: an error
// frame and close status 4000 + HTTP status for a failure, a normal close
// when the stream ended because the client went or the gateway closes.
func (g *Gateway) endStream(ctx context.Context, conn *websocket.Conn, err error) {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		failStream(conn, ae)
	case err != nil && ctx.Err() == nil:
		failStream(conn, api.Classify(err))
	default:
		g.wsConns.closeStream(conn)
	}
}

// wsStream is one WebSocket consumer. It has a goroutine that reads
// (readCredits: the only reader, which also takes the answers to the
// gateway's pings, ends with the connection and cancels ctx) and, only
// while it has something to do, one that writes (run: the only writer).
// A stream that waits, for credit or at the partition's end, parks: its
// writer goroutine ends and what wakes it (credit from the reader, the
// partition's shared poll, ctx's end) starts another. So an idle stream
// holds one goroutine, its connection and its place on the shared poll;
// its HTTP request, its handler's stack and every fetch buffer are gone.
// The stream ends in run (finish), which waits for the reader and then
// gives back the stream's place (release): wsConns' WaitGroup covers the
// stream from admission to there.
type wsStream struct {
	g      *Gateway
	conn   *websocket.Conn
	fp     fetchParams
	binary bool
	credit atomic.Int64

	ctx        context.Context
	cancel     context.CancelFunc
	done       func()        // wsConns.open's: unregisters, stops the pings
	release    func()        // wsConns.admit's
	stopWake   func() bool   // stops the AfterFunc that wakes the stream when ctx ends
	readerDone chan struct{} // closed when readCredits returns

	mu      sync.Mutex // guards running and kicked
	running bool       // a goroutine runs the stream (or it has ended)
	kicked  bool       // something happened since the running goroutine last looked

	// The running goroutine's only.
	started  bool        // the first offset is resolved
	finished bool        // finish has begun
	offset   int64       // the next offset to send
	atEnd    bool        // the last fetch found the partition's end
	hw       int64       // the HW the last fetch or shared poll saw
	waiter   *tailWaiter // the stream's place on the partition's shared poll, while it waits there
}

// wake makes the stream look again: it starts a goroutine that runs it
// when it is parked, or tells the running one. It never blocks.
func (s *wsStream) wake() {
	s.mu.Lock()
	if s.running {
		s.kicked = true
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	go s.run()
}

// park ends the running goroutine's turn: true when the stream is parked
// (the goroutine returns), false when it was woken since it last looked
// (it looks again).
func (s *wsStream) park() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kicked {
		s.kicked = false
		return false
	}
	s.running = false
	return true
}

// run runs the stream until it parks or ends. A panic ends the stream
// like an error, recovered, logged and counted as a handler's would be.
func (s *wsStream) run() {
	defer func() {
		if v := recover(); v != nil {
			s.g.log.Error("recovered a panic", "where", "ws", "topic", s.fp.topic, "partition", s.fp.partition, "panic", v, "stack", string(debug.Stack()))
			s.g.metrics.panics.Inc()
			s.conn.CloseNow()
			s.finish(nil)
		}
	}()
	for {
		wait, err := s.step()
		if !wait {
			s.finish(err)
			return
		}
		if s.park() {
			return
		}
	}
}

// finish ends the stream: it leaves the shared poll, closes the
// connection as err says, waits for the reader and gives back its place.
// The stream is never parked again, so a late wake only sets kicked.
func (s *wsStream) finish(err error) {
	if s.finished {
		return // a panic in finish, recovered: its deferred steps gave the place back
	}
	s.finished = true
	// The place is given back however finish ends: a panic in one of its
	// steps (recovered by run) must not leave the stream counted, or every
	// Close would wait for it.
	defer s.release()
	defer s.cancel()
	defer s.conn.CloseNow() // ends the reader if endStream did not get to
	if s.waiter != nil {
		s.g.tails.leave(s.waiter)
		s.waiter = nil
	}
	s.stopWake()
	s.done()
	s.g.endStream(s.ctx, s.conn, err)
	<-s.readerDone // ends with the connection
}

// readCredits reads {"credit":N} messages until the connection ends.
func (s *wsStream) readCredits() {
	defer s.cancel()
	for {
		// Without a deadline: a read whose context ends closes the
		// connection, and the handler's close handshake (1001 at shutdown)
		// needs it open. The handler closes the connection, which ends this.
		typ, b, err := s.conn.Read(context.Background())
		if err != nil {
			return
		}
		credit, err := parseCreditFrame(typ, b)
		if err != nil {
			s.conn.Close(websocket.StatusPolicyViolation, `send {"credit":N} with 0 < N <= 2^40`)
			return
		}
		if s.credit.Add(credit) > maxCredit {
			s.credit.Store(maxCredit)
		}
		s.wake()
	}
}

// step sends records while there is credit and the partition has them:
// wait when the stream must wait (for credit, or on the partition's shared
// long poll, which it has joined), else the error that ends it (nil when
// the client went or the gateway closes).
func (s *wsStream) step() (wait bool, err error) {
	ctx := s.ctx
	if !s.started {
		offset, err := s.g.resolveOffset(ctx, s.fp.topic, s.fp.partition, s.fp.offsetSpec)
		for err != nil && s.g.waitThrottled(ctx, err) {
			offset, err = s.g.resolveOffset(ctx, s.fp.topic, s.fp.partition, s.fp.offsetSpec)
		}
		if err != nil {
			return false, err
		}
		s.offset, s.started = offset, true
	}
	for {
		// What happens from here on wakes the stream again (kicked), so a
		// park that follows looks once more instead of missing it.
		s.mu.Lock()
		s.kicked = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return false, nil
		}
		if s.credit.Load() <= 0 {
			return true, nil
		}
		var shared *tailData
		if s.atEnd {
			// Wait on the partition's shared long poll; send what it read
			// if it read at this offset, else fetch without waiting.
			if s.waiter == nil {
				s.waiter = s.g.tails.join(s.fp.topic, s.fp.partition, s.offset, s.wake)
			}
			d, woke := s.g.tails.woken(s.waiter)
			if !woke {
				return true, nil
			}
			s.waiter = nil
			if d != nil && d.from == s.offset && !s.g.fetchQuotaApplies(ctx) {
				shared = d
			}
		}
		var next int64
		if s.binary {
			next, err = s.sendBatches(ctx, s.offset, shared)
		} else {
			next, err = s.sendRecords(ctx, s.offset, shared)
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			if s.g.waitThrottled(ctx, err) {
				continue // over its quota: slowed down, not closed
			}
			return false, err
		}
		// Nothing came, or what came reached the HW: the stream is at
		// the partition's end, and a fetch would find nothing more.
		s.atEnd = next == s.offset || next >= s.hw
		s.offset = next
	}
}

// wsRetryBudget bounds one poll's retries beyond its wait, so a failure
// that keeps being retriable ends the stream with its error instead of
// spinning.
const wsRetryBudget = 30 * time.Second

// sendRecords sends the records at offset, from shared (a shared poll's
// answer at offset) or fetched without waiting, and returns the next
// offset.
func (s *wsStream) sendRecords(ctx context.Context, offset int64, shared *tailData) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wsRetryBudget)
	defer cancel()
	fp := s.fp
	fp.maxRecords = int(min(s.credit.Load(), wsMaxFrameRecs))
	fp.wait = 0
	var res api.FetchResponse
	var err error
	if shared != nil {
		res, err = renderFetched(fp, offset, shared.raw, shared.next, shared.hw)
	} else {
		res, err = s.g.fetchRecords(ctx, fp, offset)
	}
	s.hw = res.HighWatermark
	if err != nil || len(res.Records) == 0 {
		return res.NextOffset, err
	}
	bp := getBuf(0)
	defer putBuf(bp)
	*bp = renderFetchResponse(*bp, &res)
	if err := s.write(ctx, websocket.MessageText, *bp); err != nil {
		return offset, err
	}
	s.credit.Add(-int64(len(res.Records)))
	return res.NextOffset, nil
}

// sendBatches is sendRecords for binary frames: raw batches, relayed.
func (s *wsStream) sendBatches(ctx context.Context, offset int64, shared *tailData) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wsRetryBudget)
	defer cancel()
	var raw []byte
	if shared != nil {
		raw, s.hw = shared.raw, shared.hw // raw is read-only: it is every waiter's
	} else {
		// The credit bounds the records sent: the broker sends no batch
		// past it.
		fr, err := s.g.fetchFrom(ctx, s.fp.topic, s.fp.partition, brokerapi.FetchParams{
			Offset: offset, MaxBytes: s.fp.maxBytes, MaxRecords: min(max(s.credit.Load(), 0), 1<<31-1), LeaderEpoch: -1,
		})
		if err != nil {
			return offset, err
		}
		defer fr.Body.Close()
		s.hw = fr.HighWatermark
		raw = make([]byte, fr.Size)
		if _, err := io.ReadFull(fr.Body, raw); err != nil {
			return offset, api.Errorf(api.CodeBrokerUnavailable, "fetch body cut short: %v", err)
		}
	}
	credit := s.credit.Load()
	end, next, sent := 0, offset, int64(0)
	// Bytes that are not whole batches fail the stream (retriable), never
	// make it fetch the same offset again at once.
	err := scanFetched(raw, func(h recordbatch.Header, b []byte) error {
		if sent >= credit {
			return nil
		}
		end += len(b)
		next = h.NextOffset()
		sent += h.NextOffset() - max(h.BaseOffset, offset)
		return nil
	})
	if err != nil || end == 0 {
		return offset, err
	}
	if err := s.write(ctx, websocket.MessageBinary, raw[:end]); err != nil {
		return offset, err
	}
	s.credit.Add(-sent)
	return next, nil
}

// write sends one frame within the write timeout; past it the connection
// is closed, so a client that stops reading costs no more than that.
func (s *wsStream) write(ctx context.Context, typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.g.wsConns.lim.WriteTimeout)
	defer cancel()
	return s.conn.Write(ctx, typ, b)
}

// failStream sends the error frame and closes with 4000 + HTTP status.
func failStream(conn *websocket.Conn, e *api.Error) {
	spec := api.Lookup(e.Code)
	b, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: e.Code, Message: e.Message, Retriable: spec.Retriable}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Write(ctx, websocket.MessageText, b)
	conn.Close(websocket.StatusCode(4000+spec.Status), string(e.Code))
}
