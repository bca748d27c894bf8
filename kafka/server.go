// Package kafka serves Kafka's wire protocol on a broker: the listener, the
// framing, and the handlers that answer Kafka clients (kcat, franz-go,
// librdkafka, Java's) from the broker's own produce, metadata and offsets
// paths, reached through Backend. Requests and responses are encoded and
// decoded by github.com/twmb/franz-go/pkg/kmsg; which APIs and versions are
// served is the table in versions.go.
//
// Ownership: Serve runs the accept loop on its caller's goroutine; each
// accepted connection gets one goroutine of the Server's group, which reads
// a request, answers it and only then reads the next (Kafka's one request
// in flight per connection, so answers keep their order). Close stops the
// accept loops, lets requests under way finish (5 s at most), closes every
// connection and waits for their goroutines.
package kafka

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/gogroup"
)

// Limits bound what a Kafka client may cost the broker. Zero values take
// the documented defaults; Kafka's own names are in parentheses.
type Limits struct {
	// MaxRequestBytes is the largest request frame, checked against the
	// size prefix before anything is allocated; a larger one closes the
	// connection (socket.request.max.bytes). Default 100 MiB.
	MaxRequestBytes int32
	// MaxRequestBytesBeforeAuth is the largest frame a connection that has
	// not authenticated may send (sasl.server.max.receive.size). Default
	// 512 KiB.
	MaxRequestBytesBeforeAuth int32
	// MaxConnections bounds the open connections of the listener; past it
	// a new connection is closed at once (max.connections). Default 10,000.
	MaxConnections int
	// MaxConnectionsPerIP bounds them per client IP address, the TCP
	// peer's (max.connections.per.ip). Default 1,000.
	MaxConnectionsPerIP int
	// IdleTimeout closes a connection that sends no request for this long
	// (connections.max.idle.ms). Default 10 minutes.
	IdleTimeout time.Duration
	// ReadTimeout is how long a request's bytes may take to arrive once
	// its size did; a slower sender is disconnected. Default 2 minutes.
	ReadTimeout time.Duration
	// WriteTimeout is how long an answer may take to write; a client that
	// stops reading is disconnected. Default 30 s.
	WriteTimeout time.Duration
}

// Defaults of Limits; those an operator sets are rows of the limits
// table (api/limits.go).
const (
	DefaultMaxRequestBytes           = api.DefaultKafkaMaxRequestBytes
	DefaultMaxRequestBytesBeforeAuth = api.DefaultKafkaMaxRequestBeforeAuth
	DefaultMaxConnections            = api.DefaultKafkaMaxConnections
	DefaultMaxConnectionsPerIP       = api.DefaultKafkaMaxConnectionsPerIP
	DefaultIdleTimeout               = api.DefaultKafkaIdleTimeoutMs * time.Millisecond
	DefaultReadTimeout               = 2 * time.Minute
	DefaultWriteTimeout              = 30 * time.Second
)

func (l Limits) withDefaults() (Limits, error) {
	if l.MaxRequestBytes < 0 || l.MaxRequestBytesBeforeAuth < 0 || l.MaxConnections < 0 || l.MaxConnectionsPerIP < 0 ||
		l.IdleTimeout < 0 || l.ReadTimeout < 0 || l.WriteTimeout < 0 {
		return l, errors.New("kafka: a limit is negative")
	}
	def := func(v *int32, d int32) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxRequestBytes, DefaultMaxRequestBytes)
	def(&l.MaxRequestBytesBeforeAuth, DefaultMaxRequestBytesBeforeAuth)
	defInt(&l.MaxConnections, DefaultMaxConnections)
	defInt(&l.MaxConnectionsPerIP, DefaultMaxConnectionsPerIP)
	defDur(&l.IdleTimeout, DefaultIdleTimeout)
	defDur(&l.ReadTimeout, DefaultReadTimeout)
	defDur(&l.WriteTimeout, DefaultWriteTimeout)
	l.MaxRequestBytesBeforeAuth = min(l.MaxRequestBytesBeforeAuth, l.MaxRequestBytes)
	return l, nil
}

// Options configure a Server.
type Options struct {
	// Backend answers from the broker. Required.
	Backend Backend
	// Limits bound connections and requests (see Limits).
	Limits Limits
	// RequireAuth makes every connection authenticate with SASL before it
	// is served anything but ApiVersions, SaslHandshake and
	// SaslAuthenticate (sasl.go); another request closes the connection.
	// It needs Authenticator and Mechanisms. Default false: every
	// connection is served at once.
	RequireAuth bool
	// Mechanisms are the SASL mechanisms served (of Mechanisms: PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512). Default none.
	Mechanisms []string
	// Authenticator checks SASL credentials and, for every request, the
	// ACLs (authz.go). Default nil: no ACL is checked.
	Authenticator Authenticator
	// TLS, when set, serves every connection over TLS (Kafka's SSL and
	// SASL_SSL); record bytes are then copied, not sent with sendfile.
	// Default nil: plaintext.
	TLS *tls.Config
	// ShutdownTimeout is how long Close lets requests under way finish
	// before it cuts their connections. Default 5 s.
	ShutdownTimeout time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Server is a Kafka protocol listener.
type Server struct {
	opts Options
	lim  Limits
	log  *slog.Logger

	// ctx is every request's parent; it ends when Close gives up waiting
	// for requests under way.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex // guards the fields below
	closing   bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perIP     map[string]int
	drained   chan struct{} // made by Close; closed once conns is empty

	conngs gogroup.Group // one goroutine per connection

	ids topicIDs // topic ID → name, for the latest metadata snapshot

	refused atomic.Int64 // connections closed at once by a connection limit

	// nonce starts the markers a Fetch answer is encoded with in place of
	// its records (fetch.go): random, so no topic name can contain one.
	nonce         [markerSize - 4]byte
	fetchedBytes  atomic.Int64 // record bytes written in Fetch answers
	sendfileBytes atomic.Int64 // of those, copied from a file to a plaintext TCP connection
	saslFailed    atomic.Int64 // SASL steps refused (sasl.go)
	authzRefused  atomic.Int64 // requests refused by the ACLs, wholly or for some topics (authz.go)
}

// New builds a Server; Serve makes it serve a listener.
func New(opts Options) (*Server, error) {
	if opts.Backend == nil {
		return nil, errors.New("kafka: Backend is required")
	}
	lim, err := opts.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := opts.checkSASL(); err != nil {
		return nil, err
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, lim: lim, log: opts.Logger.With("listener", "kafka"),
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, perIP: map[string]int{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if _, err := rand.Read(s.nonce[:]); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return s, nil
}

// ErrServerClosed is what Serve returns once Close was called.
var ErrServerClosed = errors.New("kafka: server closed")

// Serve accepts connections on ln until Close, and closes ln. It returns
// ErrServerClosed after Close, or the accept error that stopped it.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if temporaryAccept(err) {
				// Out of descriptors and the like: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("kafka: accept: %w", err)
		}
		backoff = 0
		s.admit(nc)
	}
}

// temporaryAccept reports accept errors that leave the listener usable
// (EMFILE, ENFILE, ECONNABORTED, timeouts), which net reports as Temporary.
func temporaryAccept(err error) bool {
	type temporary interface{ Temporary() bool }
	var t temporary
	return errors.As(err, &t) && t.Temporary()
}

// admit starts serving an accepted connection, or closes it at once when
// a connection limit is reached or the server is closing.
func (s *Server) admit(nc net.Conn) {
	ip, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		ip = nc.RemoteAddr().String()
	}
	if s.opts.TLS != nil {
		nc = tls.Server(nc, s.opts.TLS) // the handshake runs on the first read, under its deadline
	}
	c := newConn(s, nc, ip)
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		nc.Close()
		return
	case len(s.conns) >= s.lim.MaxConnections, s.perIP[ip] >= s.lim.MaxConnectionsPerIP:
		n := s.perIP[ip]
		s.mu.Unlock()
		s.refused.Add(1)
		s.log.Warn("connection refused: connection limit", "client", nc.RemoteAddr().String(), "connections", len(s.conns),
			"from_ip", n, "max", s.lim.MaxConnections, "max_per_ip", s.lim.MaxConnectionsPerIP)
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.perIP[ip]++
	// Under mu, so Close either sees the connection in conns or finds the
	// group closed here.
	started := s.conngs.Go(func() {
		defer s.forget(c)
		c.serve(s.ctx)
	})
	s.mu.Unlock()
	if !started {
		s.forget(c)
	}
}

// forget removes a connection that ended and closes it.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.perIP[c.ip]--; s.perIP[c.ip] <= 0 {
		delete(s.perIP, c.ip)
	}
	s.signalDrainedLocked()
	s.mu.Unlock()
	c.nc.Close()
}

// signalDrainedLocked closes drained once Close waits and no connection is left.
func (s *Server) signalDrainedLocked() {
	if s.drained != nil && len(s.conns) == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Stats are a listener's counters of the moment.
type Stats struct {
	Connections int   // open
	Refused     int64 // closed at once by a connection limit, since New
	// FetchedBytes are the record bytes written in Fetch answers, since
	// New; SendfileBytes those of them copied from a segment file to a
	// plaintext TCP connection, which Linux does with sendfile.
	FetchedBytes, SendfileBytes int64
	// SASLFailed counts the SASL handshakes and authentications refused;
	// AuthzRefused the requests the ACLs refused, wholly or for some of
	// their topics; both since New.
	SASLFailed, AuthzRefused int64
}

// Stats returns the listener's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Connections: len(s.conns), Refused: s.refused.Load(),
		FetchedBytes: s.fetchedBytes.Load(), SendfileBytes: s.sendfileBytes.Load(),
		SASLFailed: s.saslFailed.Load(), AuthzRefused: s.authzRefused.Load()}
}

// Close stops the server. Order: stop accepting (the listeners close);
// close the connections waiting for a request; let the requests under way
// be answered for up to ShutdownTimeout (each of those connections closes
// after its answer); then end the requests' context and close what is left;
// wait for every connection's goroutine. It may be called more than once.
func (s *Server) Close() {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.closeIfIdle()
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	drained := s.drained
	s.signalDrainedLocked()
	s.mu.Unlock()

	t := time.NewTimer(s.opts.ShutdownTimeout)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	// The connections close before the requests' context ends, so a
	// request cut here gets no answer written on its way out.
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.conngs.Close()
}
