package kafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// maxKeptBuffer bounds the read and write buffers a connection keeps
// between requests; one grown past it for a large request is dropped after.
const maxKeptBuffer = 1 << 20

// conn is one client connection, served by one goroutine: read a request,
// answer it, read the next. The client may pipeline requests; they wait in
// the socket, and answers go out in request order.
type conn struct {
	s  *Server
	nc net.Conn
	ip string
	br *bufio.Reader

	// authenticated is set once the connection may be served everything
	// (at once when the server requires no authentication). Only the
	// connection's goroutine touches it.
	authenticated bool
	principal     string    // who the connection acts for (auth.Anonymous until SASL names one)
	sasl          saslState // sasl.go
	// closeAfterAnswer ends the connection once the answer under way is
	// written (a refused SASL step).
	closeAfterAnswer bool
	clientID         string // the last request's, for logs and quotas
	rbuf, wbuf       []byte
	// closing is closed when the server closes the connection, which ends
	// a throttle's mute early.
	closing chan struct{}

	mu       sync.Mutex // guards busy and draining; a leaf, taken under Server.mu by Close
	busy     bool       // a request is being read, handled or answered
	draining bool       // the server is closing: end after the answer under way
}

func newConn(s *Server, nc net.Conn, ip string) *conn {
	return &conn{s: s, nc: nc, ip: ip, br: bufio.NewReaderSize(nc, 16<<10), authenticated: !s.opts.RequireAuth,
		principal: auth.Anonymous, closing: make(chan struct{})}
}

// closeIfIdle marks the connection draining and closes it now when it is
// waiting for a request; a busy one ends after its answer.
func (c *conn) closeIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.draining {
		close(c.closing)
	}
	c.draining = true
	if !c.busy {
		c.nc.Close()
	}
}

// setBusy marks a request under way; false when the server is closing.
func (c *conn) setBusy(busy bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining {
		return false
	}
	c.busy = busy
	return true
}

// errAcks0Failed closes the connection of an acks=0 produce that failed:
// it has no answer to carry the error, and a closed connection is how
// Kafka tells such a producer to refresh its metadata.
var errAcks0Failed = errors.New("an acks=0 produce failed")

// serve runs the connection until the client leaves, a limit or protocol
// error ends it, or the server closes. The caller closes nc.
func (c *conn) serve(ctx context.Context) {
	lim := c.s.lim
	var mute time.Duration // the last answer's throttle: read nothing for so long
	for {
		if !c.setBusy(false) || !c.pause(mute) {
			return
		}
		limit := lim.MaxRequestBytes
		if !c.authenticated {
			limit = lim.MaxRequestBytesBeforeAuth
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		n, err := readSize(c.br, limit)
		if err != nil {
			c.ended("waiting for a request", err)
			return
		}
		if !c.setBusy(true) {
			return
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(lim.ReadTimeout))
		frame, err := readBody(c.br, c.rbuf, int(n))
		if cap(frame) <= maxKeptBuffer {
			c.rbuf = frame[:0]
		} else {
			c.rbuf = nil
		}
		if err != nil {
			c.ended("reading a request", err)
			return
		}
		if c.sasl.raw {
			if err := c.answerRaw(ctx, frame); err != nil {
				c.ended("authenticating", err)
				return
			}
			continue
		}
		h, resp, throttle, err := c.handle(ctx, frame)
		if err != nil {
			c.ended(fmt.Sprintf("%s v%d (correlation id %d)", kmsg.NameForKey(h.key), h.version, h.correlationID), err)
			return
		}
		mute = throttle
		if resp == nil {
			continue // acks=0: no answer
		}
		if !throttledAfter(resp) {
			// An older client does not wait itself: hold the answer back.
			if !c.pause(throttle) {
				return
			}
			mute = 0
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(lim.WriteTimeout))
		var out []byte
		if fa, ok := resp.(*fetchAnswer); ok {
			out, err = c.s.writeFetch(c.nc, c.wbuf, h.correlationID, fa)
		} else {
			out = appendResponse(c.wbuf, h.correlationID, resp)
			_, err = c.nc.Write(out)
		}
		if cap(out) <= maxKeptBuffer {
			c.wbuf = out[:0]
		} else {
			c.wbuf = nil
		}
		if err != nil {
			c.ended("writing an answer", err)
			return
		}
		if c.closeAfterAnswer {
			c.ended(fmt.Sprintf("%s v%d", kmsg.NameForKey(h.key), h.version), errSASLRefused)
			return
		}
	}
}

// handle decodes one request frame and answers it. An error means the
// connection must close: the request could not be read, is not served at
// its version, or is not allowed before authentication.
func (c *conn) handle(ctx context.Context, frame []byte) (requestHeader, kmsg.Response, time.Duration, error) {
	h, body, err := parseHeader(frame, isFlexible)
	if err != nil {
		return h, nil, 0, err
	}
	c.clientID = h.clientID
	if h.key == kmsg.ApiVersions.Int16() {
		resp, err := answerApiVersions(h, body)
		return h, resp, 0, err
	}
	a, ok := lookupAPI(h.key)
	switch {
	case !ok:
		return h, nil, 0, fmt.Errorf("API key %d (%s) is not served", h.key, kmsg.NameForKey(h.key))
	case !c.authenticated && !a.beforeAuth:
		return h, nil, 0, errors.New("not served before the connection authenticates")
	case h.version < a.min || h.version > a.max:
		return h, nil, 0, fmt.Errorf("version %d is not served (v%d to v%d are)", h.version, a.min, a.max)
	}
	req := a.key.Request()
	req.SetVersion(h.version)
	if err := req.ReadFrom(body); err != nil {
		return h, nil, 0, fmt.Errorf("malformed request: %w", err)
	}
	// authz.go: a request refused as a whole is answered here; one refused
	// for some of its topics is handled without them, and merge adds them
	// back to the answer with their error.
	if c.principal != auth.Anonymous {
		ctx = auth.WithPrincipal(ctx, c.principal) // for the Backend (producer ids, quotas)
	}
	refusal, merge := c.authorize(req)
	if refusal != nil {
		return h, refusal, c.throttle(h.key, req, refusal), nil
	}
	resp, err := a.handle(c.s, ctx, c, req)
	if err == nil && merge != nil {
		resp = merge(resp)
	}
	if err != nil && !errors.Is(err, errAcks0Failed) {
		return h, resp, 0, err
	}
	return h, resp, c.throttle(h.key, req, resp), err
}

// ended logs why a connection ends: at debug level when the client left
// or went quiet, else at info with what it was doing.
func (c *conn) ended(doing string, err error) {
	log := c.s.log.With("client", c.nc.RemoteAddr().String(), "client_id", c.clientID)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, errAcks0Failed):
		log.Debug("kafka connection closed", "while", doing, "err", err)
	default:
		log.Info("kafka connection closed", "while", doing, "err", err)
	}
}
