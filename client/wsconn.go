package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
)

// ErrClosed is returned by the methods of a Stream, GroupConsumer or GroupWS
// after Close.
var ErrClosed = errors.New("client: closed")

const (
	// DefaultReadLimit is the largest WebSocket frame a stream accepts: a
	// JSON frame holds up to max_bytes (64 MiB at most) of records, which
	// base64 inflates by 4/3.
	DefaultReadLimit = 128 << 20
	// wsWriteTimeout bounds a credit or commit message; a peer that takes
	// longer to accept a few bytes is gone.
	wsWriteTimeout = 10 * time.Second
)

// wsConn is one WebSocket connection with its reader goroutine. The reader
// is the only goroutine that reads the connection: it is started by dialWS
// and ended and waited for by close. Writes (credit, commits) come from the
// owner's goroutines; the library serializes them.
//
// The reader does not read with the caller's context because the library
// closes the connection when a Read's context ends: a consumer's short
// timeout on Next must not cost it the stream.
type wsConn struct {
	conn *websocket.Conn
	// frames carries text frames in order, then at most one terminal error;
	// the reader closes it when it ends.
	frames chan wsFrame
	ctx    context.Context // the connection's life; ends at close
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has returned
}

// wsFrame is one text frame or the error that ended the connection.
type wsFrame struct {
	data []byte
	err  error
}

// wsURL is the ws:// or wss:// URL of a path and query.
func (c *Client) wsURL(path string, q url.Values) string {
	u := c.url(path, q)
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(u, "http://")
}

// dialWS opens a WebSocket and starts its reader. ctx bounds the handshake
// only. A refused handshake is the server's *Error (UNKNOWN_TOPIC, ...), as
// for any request; a failure to connect is a *TransportError.
func (c *Client) dialWS(ctx context.Context, path string, q url.Values, readLimit int64, queue int) (*wsConn, error) {
	u := c.wsURL(path, q)
	// The connection outlives ctx: dial under a context of its own, which
	// ctx ending before the handshake completes cancels.
	lctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	conn, resp, err := websocket.Dial(lctx, u, &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: http.Header{"User-Agent": {c.userAgent}},
	})
	if !stop() && err == nil {
		conn.CloseNow()
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(resp.Body)
			return nil, decodeError(resp.StatusCode, resp.Header, body)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: GET %s: %w", u, context.Cause(ctx))
		}
		return nil, &TransportError{Method: http.MethodGet, URL: u, Sent: false, Err: err}
	}
	if readLimit <= 0 {
		readLimit = DefaultReadLimit
	}
	conn.SetReadLimit(readLimit)
	w := &wsConn{conn: conn, frames: make(chan wsFrame, queue), ctx: lctx, cancel: cancel, done: make(chan struct{})}
	go w.read(u)
	return w, nil
}

// read is the reader goroutine: frames go to w.frames until the connection
// ends. An error frame is held until the close that follows it, whose status
// carries the error's HTTP status.
func (w *wsConn) read(u string) {
	defer close(w.done)
	defer close(w.frames)
	var held *Error
	for {
		typ, b, err := w.conn.Read(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return // closed by the owner: nobody is waiting for an error
			}
			w.deliver(wsFrame{err: closeError(u, err, held)})
			return
		}
		if typ != websocket.MessageText {
			w.conn.Close(websocket.StatusUnsupportedData, "text frames only")
			w.deliver(wsFrame{err: &Error{Code: api.CodeInvalidRequest, Message: "the server sent a binary frame on a JSON stream"}})
			return
		}
		if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"error"`)) {
			if e, ok := errorFrame(b); ok {
				held = e
				continue // the close follows
			}
		}
		if !w.deliver(wsFrame{data: b}) {
			return
		}
	}
}

func (w *wsConn) deliver(f wsFrame) bool {
	select {
	case w.frames <- f:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// closeError is why a connection ended: the error frame the server sent
// before closing (with the close status's HTTP status), else the close
// status itself (4000+status with the code as reason; 1008 or 1009 when the
// server refused what this client sent), else a *TransportError.
func closeError(u string, err error, held *Error) error {
	var ce websocket.CloseError
	isClose := errors.As(err, &ce)
	if held != nil {
		if isClose && ce.Code >= 4000 {
			held.Status = int(ce.Code) - 4000
		}
		return held
	}
	switch {
	case isClose && ce.Code >= 4000 && ce.Code < 5000:
		code := api.Code(ce.Reason)
		if code == "" {
			code = api.CodeInternal
		}
		return &Error{Code: code, Message: "the server closed the stream", Retriable: api.Lookup(code).Retriable, Status: int(ce.Code) - 4000}
	case isClose && (ce.Code == websocket.StatusPolicyViolation || ce.Code == websocket.StatusMessageTooBig):
		return &Error{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("the server refused a message: %v", ce)}
	}
	return &TransportError{Method: http.MethodGet, URL: u, Sent: true, Err: err}
}

// write sends one JSON text message (credit, a commit).
func (w *wsConn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(w.ctx, wsWriteTimeout)
	defer cancel()
	return w.conn.Write(ctx, websocket.MessageText, b)
}

// close ends the connection with a normal closure, then ends the reader and
// waits for it. Order: the close handshake first, so the server sees a
// clean close rather than a dropped connection; then the context, which
// frees a reader blocked on a full frames channel.
func (w *wsConn) close() {
	_ = w.conn.Close(websocket.StatusNormalClosure, "")
	w.cancel()
	<-w.done
}
