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
// is the only goroutine that reads the connection: start begins it, close
// ends it and waits for it. Writes (credit, commits) come from the owner's
// goroutines; the library serializes them.
//
// The reader does not read with a caller's context because the library
// closes the connection when a Read's context ends: a consumer's short
// timeout on Next must not cost it the stream.
type wsConn struct {
	conn   *websocket.Conn
	url    string
	ctx    context.Context // the connection's life; ends at close
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has returned
}

// wsURL is the ws:// or wss:// URL of a path and query.
func (c *Client) wsURL(path string, q url.Values) string {
	u := c.url(path, q)
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(u, "http://")
}

// dialWS opens a WebSocket; the caller then calls start. ctx bounds the
// handshake only. A refused handshake is the server's *Error
// (UNKNOWN_TOPIC, ...), as for any request; a failure to connect is a
// *TransportError.
func (c *Client) dialWS(ctx context.Context, path string, q url.Values, readLimit int64) (*wsConn, error) {
	u := c.wsURL(path, q)
	// The connection outlives ctx: dial under a context of its own, which
	// ctx ending before the handshake completes cancels.
	lctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	hdr := http.Header{"User-Agent": {c.userAgent}}
	if c.clientID != "" {
		hdr.Set(api.HeaderClientID, c.clientID)
	}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(lctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: hdr})
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
	return &wsConn{conn: conn, url: u, ctx: lctx, cancel: cancel, done: make(chan struct{})}, nil
}

// start runs the reader goroutine: onFrame gets each text frame in order
// (returning false stops the reader); onEnd gets the error that ended the
// connection, once, unless the owner closed it. Both run on the reader
// goroutine. start must be called exactly once, right after dialWS.
func (w *wsConn) start(onFrame func(data []byte) bool, onEnd func(err error)) {
	go func() {
		defer close(w.done)
		for {
			typ, b, err := w.conn.Read(w.ctx)
			if err != nil {
				if w.ctx.Err() == nil {
					onEnd(err)
				}
				return
			}
			if typ != websocket.MessageText {
				w.conn.Close(websocket.StatusUnsupportedData, "text frames only")
				onEnd(&Error{Code: api.CodeInvalidRequest, Message: "the server sent a binary frame on a JSON stream"})
				return
			}
			if !onFrame(b) {
				return
			}
		}
	}()
}

// isErrorFrame says whether a text frame is the error envelope.
func isErrorFrame(b []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"error"`))
}

// closeError is why a connection ended: the error frame the server sent
// before closing (held, given the close status's HTTP status), else the
// close status itself (4000+status with the code as reason; 1008 or 1009
// when the server refused what this client sent), else a *TransportError.
func (w *wsConn) closeError(err error, held *Error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
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
	return &TransportError{Method: http.MethodGet, URL: w.url, Sent: true, Err: err}
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
// frees a reader blocked in its owner's onFrame (which must give up when
// w.ctx ends).
func (w *wsConn) close() {
	_ = w.conn.Close(websocket.StatusNormalClosure, "")
	w.cancel()
	<-w.done
}
