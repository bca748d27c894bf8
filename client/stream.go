package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"

	"github.com/sluice-io/sluice/api"
)

// StreamOptions configure a Stream. The zero value streams from Earliest
// with a buffer of 1000 records and reconnects after retriable failures.
type StreamOptions struct {
	// From is where the stream starts. Default Earliest. Latest is resolved
	// to an offset when the stream opens, so a reconnect before the first
	// record misses nothing.
	From Offset
	// Buffer is how many records the server may send ahead of Next: the
	// initial credit, and the most credit outstanding plus records received
	// but not yet returned. Like a Kafka consumer's fetch buffer, it trades
	// memory for fewer round trips. Default 1000.
	Buffer int
	// MaxBytes is the most bytes of batches the server reads from the leader
	// per frame (max_bytes, 1 to 64 MiB). Default: the server's 1 MiB.
	MaxBytes int64
	// ReadLimit is the largest frame accepted. Default DefaultReadLimit.
	ReadLimit int64
	// NoReconnect makes a failure end the stream. By default Next
	// reconnects after a retriable failure (a broken connection,
	// BROKER_UNAVAILABLE, ...) from the offset after the last record it
	// returned, within the Client's RetryPolicy (MaxAttempts failures in a
	// row end the stream).
	NoReconnect bool
}

// Stream reads one partition over a WebSocket (GET
// /v1/topics/{t}/partitions/{p}/ws) with credit-based flow control: the
// server sends only records the stream has credit for, and Next grants more,
// in chunks of half the buffer, as it returns records. So a slow consumer is
// never flooded and never loses anything.
//
// Next, NextOffset and HighWatermark belong to one goroutine; Close may be
// called from any goroutine. Each connection has one reader goroutine, owned by the Stream
// and ended by Close.
type Stream struct {
	c         *Client
	topic     string
	partition int32
	opts      StreamOptions

	// Used only by the goroutine calling Next (and Close, under mu).
	next     int64 // the offset after the last record Next returned
	hw       int64
	granted  int // records returned since credit was last granted
	failures int // failed connections in a row
	err      error

	// mu guards conn and closed against Close from another goroutine.
	mu     sync.Mutex
	conn   *streamConn
	closed bool
}

// Stream opens a WebSocket stream of one partition. It blocks until the
// handshake completes; ctx bounds only that (and the lookup of Latest).
// Errors: the server's refusal (UNKNOWN_TOPIC, UNKNOWN_PARTITION,
// INVALID_OFFSET, ...) as an *Error, or a *TransportError.
func (c *Client) Stream(ctx context.Context, topic string, partition int32, opts StreamOptions) (*Stream, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = 1000
	}
	s := &Stream{c: c, topic: topic, partition: partition, opts: opts, next: -1, hw: -1}
	switch opts.From {
	case "", Earliest:
		s.opts.From = Earliest
	case Latest:
		o, err := c.ListOffsets(ctx, topic, partition, Latest)
		if err != nil {
			return nil, err
		}
		s.opts.From, s.next = At(o.Offset), o.Offset
	default:
		n, err := strconv.ParseInt(string(opts.From), 10, 64)
		if err != nil || n < 0 {
			return nil, &Error{Code: api.CodeInvalidOffset, Message: fmt.Sprintf("stream from %q: want earliest, latest or an offset", opts.From)}
		}
		s.next = n
	}
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	return s, nil
}

// streamConn is one connection of a Stream and the frames its reader
// passed on: text frames in order, then at most one terminal error.
type streamConn struct {
	ws     *wsConn
	frames chan wsFrame
}

// wsFrame is one text frame or the error that ended the connection.
type wsFrame struct {
	data []byte
	err  error
}

// dial connects from the stream's position with a full buffer of credit.
func (s *Stream) dial(ctx context.Context) (*streamConn, error) {
	from := s.opts.From
	if s.next >= 0 {
		from = At(s.next)
	}
	q := url.Values{"offset": {string(from)}, "credit": {strconv.Itoa(s.opts.Buffer)}}
	if s.opts.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(s.opts.MaxBytes, 10))
	}
	ws, err := s.c.dialWS(ctx, partitionPath(s.topic, s.partition, "ws"), q, s.opts.ReadLimit)
	if err != nil {
		return nil, err
	}
	// Every frame holds at least one record, so Buffer frames is as many
	// as the credit lets the server send; beyond a few hundred the reader
	// may as well wait.
	sc := &streamConn{ws: ws, frames: make(chan wsFrame, min(s.opts.Buffer, 256))}
	send := func(f wsFrame) bool {
		select {
		case sc.frames <- f:
			return true
		case <-ws.ctx.Done():
			return false
		}
	}
	// held is the error frame the server sends before closing; the reader
	// goroutine alone touches it.
	var held *Error
	ws.start(func(b []byte) bool {
		if isErrorFrame(b) {
			if e, ok := errorFrame(b); ok {
				held = e
				return true // the close follows
			}
		}
		return send(wsFrame{data: b})
	}, func(err error) {
		send(wsFrame{err: ws.closeError(err, held)})
	})
	return sc, nil
}

// Next returns the next records, in offset order, blocking until at least
// one arrives, the stream fails, or ctx ends (which does not end the
// stream: call Next again). It returns one frame's records, at most 1000.
//
// Errors: ctx's error; ErrClosed after Close; the failure that ended the
// stream (an *Error such as OFFSET_OUT_OF_RANGE when retention deleted the
// records, or UNKNOWN_TOPIC; a *TransportError when reconnecting failed
// MaxAttempts times in a row), which every later call returns too.
func (s *Stream) Next(ctx context.Context) ([]api.FetchedRecord, error) {
	for {
		if s.err != nil {
			return nil, s.err
		}
		conn, err := s.current(ctx)
		if err != nil {
			if err := s.fail(ctx, err); err != nil {
				return nil, err
			}
			continue
		}
		var f wsFrame
		select {
		case f = <-conn.frames:
		case <-conn.ws.done:
			// The reader ended: Close ran, or the connection failed and
			// its error is queued behind the frames already read.
			select {
			case f = <-conn.frames:
			default:
				f.err = ErrClosed
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			s.drop(conn)
			if err := s.fail(ctx, f.err); err != nil {
				return nil, err
			}
			continue
		}
		var fr api.FetchResponse
		if err := decodeJSON(f.data, &fr); err != nil {
			s.err = fmt.Errorf("client: stream %s/%d: undecodable frame: %w", s.topic, s.partition, err)
			return nil, s.err
		}
		s.failures = 0
		s.next, s.hw = fr.NextOffset, fr.HighWatermark
		if len(fr.Records) == 0 {
			continue // the server sends no empty frames; tolerate them anyway
		}
		s.grant(conn, len(fr.Records))
		return fr.Records, nil
	}
}

// grant gives the server credit for n records just returned, in chunks of
// half the buffer so a busy stream sends a credit message per few frames,
// not per frame. A failed write is not reported here: the connection is
// broken, and its reader reports that.
func (s *Stream) grant(conn *streamConn, n int) {
	s.granted += n
	if s.granted < max(1, s.opts.Buffer/2) {
		return
	}
	_ = conn.ws.write(api.Credit{Credit: int64(s.granted)})
	s.granted = 0
}

// current is the open connection, reconnecting if the last one failed.
func (s *Stream) current(ctx context.Context) (*streamConn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		return conn, nil
	}
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.ws.close()
		return nil, ErrClosed
	}
	s.conn, s.granted = conn, 0
	return conn, nil
}

// drop closes a failed connection.
func (s *Stream) drop(conn *streamConn) {
	s.mu.Lock()
	if s.conn == conn {
		s.conn = nil
	}
	s.mu.Unlock()
	conn.ws.close()
}

// fail handles a failed connection or dial: nil means reconnect (after a
// backoff); an error is what Next returns. Failures that end the stream
// become sticky; ctx's own end does not.
func (s *Stream) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	s.failures++
	if err == ErrClosed || s.opts.NoReconnect || !IsRetriable(err) || s.failures >= s.c.retry.MaxAttempts {
		s.err = err
		return err
	}
	return sleep(ctx, s.c.retry.backoff(s.failures, 0))
}

// NextOffset is the offset after the last record Next returned (the stream's
// start before the first; -1 when it started at Earliest and nothing came yet).
func (s *Stream) NextOffset() int64 { return s.next }

// HighWatermark is the partition's high watermark as of the last frame, -1
// before the first: HighWatermark() - NextOffset() is how far behind the
// stream is.
func (s *Stream) HighWatermark() int64 { return s.hw }

// Close ends the stream: a normal closure of the connection, then the end of
// its reader goroutine, which Close waits for. It may be called from any
// goroutine, more than once; a Next blocked at the time returns ErrClosed.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closed = true
	conn := s.conn
	s.conn = nil
	s.mu.Unlock()
	if conn != nil {
		conn.ws.close()
	}
	return nil
}
