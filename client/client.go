// Package client is the Go client of Sluice's public HTTP and WebSocket API,
// the one described by openapi.yaml. It is what the sluice CLI, `sluice
// bench`, the fault-test harnesses and the exactly-once sinks use.
//
// A Client is a base URL, an *http.Client and a retry policy; it holds no
// other state and is safe for concurrent use. Stateful clients are built from
// it: a Producer (idempotent producing: retries are written once), a Stream
// (one partition over a WebSocket, with credit flow), a GroupConsumer (a
// consumer-group member over HTTP, with its heartbeat goroutine) and a
// GroupWS (a consumer-group member over a WebSocket).
//
// Every call takes a context first; it bounds the whole call, retries and
// backoff included. Errors the server answers are *Error values, which match
// the api sentinels under errors.Is (errors.Is(err, api.ErrUnknownTopic)) and
// unwrap to an *api.Error. Failures to get an answer at all are
// *TransportError values. IsRetriable classifies both.
//
// Retries. A call is retried, following the RetryPolicy, only when sending
// it again cannot do harm: reads, commits and heartbeats whenever the failure
// is retriable; calls that change something (a produce without a producer
// id, creating or deleting a topic, joining a group) only when the failure
// proves the first attempt had no effect (a connection that was never made,
// NOT_LEADER, NOT_CONTROLLER, ...). A Producer's sends are retried on every
// retriable failure, because the brokers deduplicate them.
package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds one attempt of a call that does not long-poll.
	// The gateway gives up on its own work after 30 s (40 s to create a
	// topic), so an attempt that takes longer has lost its answer.
	DefaultTimeout = 60 * time.Second
	// DefaultUserAgent is sent in every request's User-Agent header.
	DefaultUserAgent = "sluice-go-client/1"
	// maxResponseBytes bounds a JSON or batch answer read into memory: a
	// fetch answer is at most max_bytes (64 MiB) of batches plus one batch,
	// which JSON and base64 inflate by up to about 4/3.
	maxResponseBytes = 256 << 20
)

// RetryPolicy says how often and how patiently a failed call is sent again.
// Which failures are retried at all depends on the call (see the package
// documentation); the policy only bounds the retries.
type RetryPolicy struct {
	// MaxAttempts is how many times a call is sent in all, the first time
	// included. Default 5; 1 disables retries.
	MaxAttempts int
	// MinBackoff is the wait before the first retry; each later wait doubles,
	// up to MaxBackoff. Default 50 ms.
	MinBackoff time.Duration
	// MaxBackoff caps every wait, the server's Retry-After included. Default 2 s.
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy of a Client built without WithRetry.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 5, MinBackoff: 50 * time.Millisecond, MaxBackoff: 2 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = d.MinBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = d.MaxBackoff
	}
	p.MaxBackoff = max(p.MaxBackoff, p.MinBackoff)
	return p
}

// backoff is the wait before retry number n (1 for the first retry): the
// exponential step with "equal jitter", uniformly in [step/2, step], so
// clients that failed together do not retry together, and never wait zero.
// A server's Retry-After raises it, up to MaxBackoff.
func (p RetryPolicy) backoff(n int, retryAfter time.Duration) time.Duration {
	step := p.MinBackoff
	for i := 1; i < n && step < p.MaxBackoff; i++ {
		step *= 2
	}
	step = min(step, p.MaxBackoff)
	d := step/2 + rand.N(step/2+1)
	return min(max(d, retryAfter), p.MaxBackoff)
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests, WebSocket handshakes
// included, through hc. Default: a Client of its own, on a transport cloned
// from http.DefaultTransport that keeps up to 64 idle connections to the
// gateway. hc.Timeout should be zero: a timeout there would cut long polls
// and WebSocket streams; use WithTimeout instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc, c.ownHC = hc, false }
}

// WithTimeout bounds each attempt of a call. A long poll's wait (max_wait_ms)
// and a produce's server-side timeout (timeout_ms) are added to it. An
// attempt that runs out of time is a retriable *TransportError. Default
// DefaultTimeout; zero or negative keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithRetry sets the retry policy; zero fields take DefaultRetryPolicy's values.
func WithRetry(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p.withDefaults() }
}

// WithUserAgent sets the User-Agent header. Default DefaultUserAgent.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithToken sends token (slc_<id>_<secret>) as a bearer token with every
// request and WebSocket handshake, for gateways that require authentication.
func WithToken(token string) Option {
	return func(c *Client) { c.token = token }
}

// WithClientID sends id as X-Client-Id with every request and WebSocket
// handshake: the application's name (Kafka's client.id), which quotas per
// principal and client id are accounted to. 1 to 255 of [a-zA-Z0-9._-];
// the gateway refuses others with INVALID_REQUEST. Default none.
func WithClientID(id string) Option {
	return func(c *Client) { c.clientID = id }
}

// Client calls one Sluice gateway (or a load balancer in front of several).
// It is safe for concurrent use; its methods never change it.
type Client struct {
	base      string // scheme://host[:port][/prefix], without a trailing slash
	hc        *http.Client
	ownHC     bool // hc was made by New, so Close may drop its idle connections
	userAgent string
	token     string // bearer token; "" sends none
	clientID  string // X-Client-Id; "" sends none
	timeout   time.Duration
	retry     RetryPolicy
}

// New returns a Client of the gateway at baseURL ("http://127.0.0.1:8080",
// optionally with a path prefix under which a proxy mounts the API). It
// makes no request. The error is for a URL that is not absolute http or https.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: no query or fragment, please", baseURL)
	}
	c := &Client{
		base:      strings.TrimRight(u.String(), "/"),
		userAgent: DefaultUserAgent,
		timeout:   DefaultTimeout,
		retry:     DefaultRetryPolicy(),
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Producers and benchmarks keep many requests in flight to one
		// gateway; the default of 2 idle connections per host would make
		// most of them dial anew.
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 64
		c.hc, c.ownHC = &http.Client{Transport: tr}, true
	}
	return c, nil
}

// BaseURL is the gateway URL the Client was built with, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Close drops the idle connections of the Client's own transport (not those
// of an *http.Client given with WithHTTPClient). The Client remains usable;
// Close only stops keeping connections open for later calls.
func (c *Client) Close() error {
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// retrySafety says which failures of a call may be answered by sending the
// same request again.
type retrySafety int

const (
	// retryRetriable: the call is idempotent; every retriable failure is retried.
	retryRetriable retrySafety = iota
	// retryUnapplied: the call changes something; only failures that prove
	// it had no effect are retried.
	retryUnapplied
)

// request is one call: sent as is on every attempt.
type request struct {
	method string
	path   string     // escaped, from the API root: "/v1/topics/orders"
	query  url.Values // may be nil
	body   []byte     // nil: no body
	ctype  string     // Content-Type of body
	// extra is added to the attempt timeout: a long poll's wait, a produce's
	// server-side timeout.
	extra  time.Duration
	safety retrySafety
	// retryIf, when set, decides instead of safety whether a failed attempt
	// is sent again; resp is the error answer, nil after a transport failure.
	retryIf func(resp *response, err error) bool
	// observe, when set, sees every attempt's outcome (resp nil on a
	// transport failure; err nil on success).
	observe func(resp *response, err error)
}

// response is a wholly read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends req until it succeeds, fails in a way its safety does not retry,
// runs out of attempts, or ctx ends. A non-2xx answer is an *Error and is
// returned with its response (a failed produce's body lists offsets).
func (c *Client) do(ctx context.Context, req *request) (*response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, req)
		if req.observe != nil {
			req.observe(resp, err)
		}
		if err == nil {
			return resp, nil
		}
		if attempt >= c.retry.MaxAttempts || ctx.Err() != nil || !c.shouldRetry(req, resp, err) {
			return resp, err
		}
		var retryAfter time.Duration
		var e *Error
		if errors.As(err, &e) {
			retryAfter = e.RetryAfter
		}
		if err := sleep(ctx, c.retry.backoff(attempt, retryAfter)); err != nil {
			return resp, err
		}
	}
}

func (c *Client) shouldRetry(req *request, resp *response, err error) bool {
	if req.retryIf != nil {
		return req.retryIf(resp, err)
	}
	switch req.safety {
	case retryRetriable:
		return IsRetriable(err)
	default:
		return provesUnapplied(err)
	}
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// url is the full URL of a path and query.
func (c *Client) url(path string, q url.Values) string {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// once sends one attempt and reads its whole answer.
func (c *Client) once(ctx context.Context, req *request) (*response, error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout+req.extra)
	defer cancel()
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	u := c.url(req.path, req.query)
	hreq, err := http.NewRequestWithContext(actx, req.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", req.method, u, err)
	}
	if req.ctype != "" {
		hreq.Header.Set("Content-Type", req.ctype)
	}
	hreq.Header.Set("User-Agent", c.userAgent)
	if c.clientID != "" {
		hreq.Header.Set(api.HeaderClientID, c.clientID)
	}
	if c.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	// Whether the request left this process decides whether a call that
	// changes something may be sent again after the connection failed.
	// The transport reports it from its writer goroutine.
	var sent atomic.Bool
	hreq = hreq.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				sent.Store(true)
			}
		},
	}))
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, c.transportError(ctx, req.method, u, sent.Load(), err)
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, c.transportError(ctx, req.method, u, true, err)
	}
	if len(b) > maxResponseBytes {
		return nil, fmt.Errorf("client: %s %s: answer larger than %d bytes", req.method, u, maxResponseBytes)
	}
	resp := &response{status: hresp.StatusCode, header: hresp.Header, body: b}
	if hresp.StatusCode/100 != 2 {
		return resp, decodeError(hresp.StatusCode, hresp.Header, b)
	}
	return resp, nil
}

// transportError wraps a failure to get an answer. When the caller's ctx
// ended, that is the error (the caller gave up; nothing to retry); otherwise
// it is a *TransportError, the attempt's own timeout included.
func (c *Client) transportError(ctx context.Context, method, u string, sent bool, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("client: %s %s: %w", method, u, context.Cause(ctx))
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		sent = false // the connection was never made
	}
	return &TransportError{Method: method, URL: u, Sent: sent, Err: err}
}

// escape is one path segment, escaped.
func escape(s string) string { return url.PathEscape(s) }
