package brokerapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// SpliceFetcher fetches raw batches over TCP connections of its own, so a
// relay can move an answer's body from the broker's socket to its client's
// with splice(2) instead of copying it through user space. net/http's
// client reads every body through a bufio.Reader that no ReadFrom sees
// past; here the body's first bytes (those read with the header) come from
// the connection's reader and the rest from the *net.TCPConn itself, which
// an http.ResponseWriter's ReadFrom (on a plain TCP listener) hands to
// splice. Requests are built, named and signed like the Client's own and
// written by net/http (Request.Write); answers are parsed by
// http.ReadResponse.
//
// It runs no goroutines: a connection is owned by one fetch at a time, and
// between fetches sits in a small idle pool per broker (at most
// spliceMaxIdle, dropped after spliceIdleTimeout, all closed by Close).
// With TLS to brokers (a transport with a TLS config, or an address that
// names its scheme) there is nothing to splice: Fetch is the Client's.
type SpliceFetcher struct {
	c      *Client
	dialer net.Dialer

	mu     sync.Mutex // guards idle and closed
	idle   map[string][]*spliceConn
	closed bool
}

// spliceConn is one connection to a broker and the reader of its answers.
type spliceConn struct {
	tcp   *net.TCPConn
	br    *bufio.Reader
	bw    *bufio.Writer
	since time.Time // when it went idle
}

const (
	spliceMaxIdle = 16
	// Brokers close idle connections after two minutes; one idle for
	// less than this is assumed alive (a fetch on one that was not is
	// retried once on a new connection).
	spliceIdleTimeout = 30 * time.Second
)

// NewSpliceFetcher returns a fetcher that signs and names its requests as
// c does (c.Auth is read at each fetch).
func NewSpliceFetcher(c *Client) *SpliceFetcher {
	return &SpliceFetcher{c: c, dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, idle: map[string][]*spliceConn{}}
}

// Close closes the idle connections; a fetch still running closes its own
// when its body is closed.
func (f *SpliceFetcher) Close() {
	f.mu.Lock()
	idle := f.idle
	f.idle, f.closed = map[string][]*spliceConn{}, true
	f.mu.Unlock()
	for _, cs := range idle {
		for _, sc := range cs {
			sc.tcp.Close()
		}
	}
}

// usable says whether fetches from addr can travel on plain TCP.
func (f *SpliceFetcher) usable(addr string) bool {
	t, ok := f.c.Reads.Transport.(*http.Transport)
	return ok && t.TLSClientConfig == nil && !strings.Contains(addr, "://")
}

// Fetch is Client.Fetch with a body whose WriteTo splices. Errors are the
// Client's: an answer's *api.Error, BROKER_UNAVAILABLE for a transport
// failure (a failed dial still satisfies NotSent), REQUEST_TIMED_OUT when
// ctx ended. The caller closes Body; a body read to its end gives its
// connection back for the next fetch.
func (f *SpliceFetcher) Fetch(ctx context.Context, addr, topic string, partition int32, p FetchParams) (*FetchResponse, error) {
	if !f.usable(addr) {
		return f.c.Fetch(ctx, addr, topic, partition, p)
	}
	req, err := f.c.fetchRequest(ctx, addr, topic, partition, p)
	if err != nil {
		return nil, err
	}
	f.c.prepare(req)
	for attempt := 0; ; attempt++ {
		sc, reused, err := f.get(ctx, addr)
		if err != nil {
			return nil, f.transportErr(ctx, err)
		}
		fr, err := f.roundTrip(ctx, sc, addr, req)
		if err == nil {
			return fr, nil
		}
		var apiErr *api.Error
		if errors.As(err, &apiErr) && apiErr.Code != api.CodeBrokerUnavailable {
			return nil, err // the broker's answer
		}
		// A pooled connection the broker closed meanwhile fails at once;
		// a fetch is a read, so it is tried again on a new connection.
		if reused && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return nil, f.transportErr(ctx, err)
	}
}

func (f *SpliceFetcher) transportErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %v", api.ErrRequestTimedOut, ctxErr)
	}
	// The connection's deadline is ctx's, and may fire a moment before
	// ctx reports that it ended.
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %v", api.ErrRequestTimedOut, err)
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("%w: %w", &api.Error{Code: api.CodeBrokerUnavailable}, err)
}

// get takes an idle connection to addr, or dials one.
func (f *SpliceFetcher) get(ctx context.Context, addr string) (*spliceConn, bool, error) {
	f.mu.Lock()
	for cs := f.idle[addr]; len(cs) > 0; cs = f.idle[addr] {
		sc := cs[len(cs)-1]
		f.idle[addr] = cs[:len(cs)-1]
		if time.Since(sc.since) < spliceIdleTimeout {
			f.mu.Unlock()
			return sc, true, nil
		}
		sc.tcp.Close()
	}
	f.mu.Unlock()
	c, err := f.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, false, fmt.Errorf("%s: not a TCP connection", addr)
	}
	return &spliceConn{tcp: tcp, br: bufio.NewReaderSize(tcp, 16<<10), bw: bufio.NewWriterSize(tcp, 4<<10)}, false, nil
}

// put gives a connection whose last answer was read whole back to the pool.
func (f *SpliceFetcher) put(addr string, sc *spliceConn) {
	_ = sc.tcp.SetDeadline(time.Time{})
	sc.since = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.idle[addr]) >= spliceMaxIdle {
		sc.tcp.Close()
		return
	}
	f.idle[addr] = append(f.idle[addr], sc)
}

// roundTrip writes req on sc and reads the answer's header. The answer's
// body stays on the connection, for the returned FetchResponse's Body; on
// failure sc is closed.
func (f *SpliceFetcher) roundTrip(ctx context.Context, sc *spliceConn, addr string, req *http.Request) (*FetchResponse, error) {
	// ctx bounds the connection's use: its deadline, and its end (which
	// moves the deadline to the past, failing a blocked read or write).
	dl, _ := ctx.Deadline()
	_ = sc.tcp.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = sc.tcp.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*FetchResponse, error) {
		stop()
		sc.tcp.Close()
		return nil, err
	}
	if err := req.Write(sc.bw); err != nil {
		return fail(err)
	}
	if err := sc.bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(sc.br, req)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode/100 != 2 {
		e := apihttp.ReadError(resp)
		resp.Body.Close()
		if e.Code == api.CodeThrottled && f.c.OnThrottle != nil {
			f.c.OnThrottle(req.Context(), e.Throttle) // as the Client's answers do
		}
		return fail(e)
	}
	fr, err := fetchAnswer(addr, resp)
	if err != nil {
		return fail(err)
	}
	fr.Body = &splicedBody{f: f, sc: sc, addr: addr, left: fr.Size, keep: !resp.Close, stop: stop}
	return fr, nil
}

// splicedBody is a fetch answer's body, read from its connection.
type splicedBody struct {
	f      *SpliceFetcher
	sc     *spliceConn
	addr   string
	left   int64 // body bytes not read yet
	keep   bool  // the broker keeps the connection open after this answer
	stop   func() bool
	closed bool
}

func (b *splicedBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("brokerapi: read of a closed fetch body")
	}
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.sc.br.Read(p) // the buffered bytes, then the socket
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

// WriteTo writes the rest of the body to w: the bytes already buffered,
// then the socket's through w's ReadFrom (splice, for a plain TCP
// connection behind w).
func (b *splicedBody) WriteTo(w io.Writer) (int64, error) {
	if b.closed {
		return 0, errors.New("brokerapi: read of a closed fetch body")
	}
	var total int64
	if k := int(min(int64(b.sc.br.Buffered()), b.left)); k > 0 {
		buf, _ := b.sc.br.Peek(k)
		n, err := w.Write(buf)
		_, _ = b.sc.br.Discard(n)
		b.left -= int64(n)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	if b.left > 0 && b.sc.br.Buffered() == 0 {
		lr := &io.LimitedReader{R: b.sc.tcp, N: b.left}
		n, err := io.Copy(w, lr)
		b.left -= n
		total += n
		if err == nil && b.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		return total, err
	}
	return total, nil
}

// Close gives the connection back when the body was read to its end (and
// the broker keeps it open), else closes it.
func (b *splicedBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// A connection whose context ended may have its deadline moved to
	// the past at any moment: it is not reused.
	if b.stop() && b.left == 0 && b.keep {
		b.f.put(b.addr, b.sc)
		return nil
	}
	return b.sc.tcp.Close()
}
