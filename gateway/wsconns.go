package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
)

// StreamLimits bound what slow, silent or numerous clients of long-lived
// responses can hold: fetch and group poll responses and WebSockets. Zero
// fields take the defaults of package api (api/limits.go), where each limit
// is documented.
type StreamLimits struct {
	// WriteTimeout is gateway.write.timeout.ms. Default 30 s.
	WriteTimeout time.Duration
	// PingInterval is gateway.ws.ping.interval.ms. Default 30 s.
	PingInterval time.Duration
	// IdleTimeout is gateway.ws.idle.timeout.ms. Default 60 s.
	IdleTimeout time.Duration
	// MaxConnections is gateway.ws.max.connections. Default 10,000.
	MaxConnections int
	// MaxConnectionsPerIP is gateway.ws.max.connections.per.ip. Default 1,000.
	MaxConnectionsPerIP int
}

// withDefaults fills zero fields and refuses negative ones.
func (l StreamLimits) withDefaults() (StreamLimits, error) {
	if l.WriteTimeout < 0 || l.PingInterval < 0 || l.IdleTimeout < 0 || l.MaxConnections < 0 || l.MaxConnectionsPerIP < 0 {
		return l, errors.New("gateway: negative stream limit")
	}
	ms := func(d *time.Duration, def int64) {
		if *d == 0 {
			*d = time.Duration(def) * time.Millisecond
		}
	}
	ms(&l.WriteTimeout, api.DefaultWriteTimeoutMs)
	ms(&l.PingInterval, api.DefaultWSPingIntervalMs)
	ms(&l.IdleTimeout, api.DefaultWSIdleTimeoutMs)
	if l.MaxConnections == 0 {
		l.MaxConnections = api.DefaultWSMaxConnections
	}
	if l.MaxConnectionsPerIP == 0 {
		l.MaxConnectionsPerIP = api.DefaultWSMaxConnectionsPerIP
	}
	return l, nil
}

// wsConns tracks the gateway's WebSocket connections, which net/http stops
// tracking once they are hijacked: it admits them within the connection
// limits, keeps each alive with pings, tells every one to close with 1001
// (going away) when the gateway shuts down, and waits for their handlers.
type wsConns struct {
	lim StreamLimits

	// ctx ends at shutdown; every WebSocket handler's context ends with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex // guards the fields below
	closing bool
	conns   map[*websocket.Conn]struct{}
	perIP   map[string]int
	total   int            // admitted handlers: upgrades under way and open connections
	wg      sync.WaitGroup // one per admitted handler (a partition stream's until its writer finishes it, past the handler); Add only under mu while !closing

	refused atomic.Int64 // upgrades refused by a connection limit
	dead    atomic.Int64 // connections closed because a ping went unanswered
}

func newWSConns(lim StreamLimits) *wsConns {
	c := &wsConns{lim: lim, conns: map[*websocket.Conn]struct{}{}, perIP: map[string]int{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// admit reserves a place for one WebSocket handler of the client at r's
// peer address, or returns TOO_MANY_REQUESTS (429, Retry-After) when the
// gateway or that address is at its limit, or the gateway is shutting
// down. The caller must call the release it returns when its handler (or
// the stream it started) ends.
func (c *wsConns) admit(r *http.Request) (release func(), err error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closing:
		return nil, api.Errorf(api.CodeTooManyRequests, "the gateway is shutting down; connect to another")
	case c.total >= c.lim.MaxConnections:
		c.refused.Add(1)
		return nil, api.Errorf(api.CodeTooManyRequests, "the gateway has %d WebSocket connections (%s); retry later or elsewhere",
			c.total, api.LimitWSMaxConnections)
	case c.perIP[ip] >= c.lim.MaxConnectionsPerIP:
		c.refused.Add(1)
		return nil, api.Errorf(api.CodeTooManyRequests, "%s has %d WebSocket connections to this gateway (%s)",
			ip, c.perIP[ip], api.LimitWSMaxConnectionsPerIP)
	}
	c.total++
	c.perIP[ip]++
	c.wg.Add(1)
	return func() {
		c.mu.Lock()
		c.total--
		if c.perIP[ip]--; c.perIP[ip] == 0 {
			delete(c.perIP, ip)
		}
		c.mu.Unlock()
		c.wg.Done()
	}, nil
}

// open registers an accepted connection and starts pinging it; the stream's
// context is parent's, ended also by shutdown and by an unanswered ping.
// done unregisters it and stops the pings; call it before closing conn.
func (c *wsConns) open(parent context.Context, conn *websocket.Conn) (ctx context.Context, cancel context.CancelFunc, done func()) {
	ctx, cancel = context.WithCancel(parent)
	stopShutdown := context.AfterFunc(c.ctx, cancel)
	c.mu.Lock()
	c.conns[conn] = struct{}{}
	c.mu.Unlock()
	stopPings := c.keepAlive(ctx, conn)
	return ctx, cancel, func() {
		stopPings()
		stopShutdown()
		c.mu.Lock()
		delete(c.conns, conn)
		c.mu.Unlock()
	}
}

// keepAlive pings conn every ping interval until ctx ends or stop is
// called. A ping not answered within the idle timeout closes the connection
// at once: the peer is not listening, so a close handshake would only wait.
// No goroutine waits between pings; a timer's goroutine runs each ping, so
// a connection costs a goroutine only while a ping is out. Pongs are read by
// the connection's reader goroutine, which every WebSocket handler runs.
func (c *wsConns) keepAlive(ctx context.Context, conn *websocket.Conn) (stop func()) {
	var (
		mu      sync.Mutex // guards stopped and the timer's Reset
		stopped bool
		t       *time.Timer
	)
	ping := func() {
		// Not ctx: a write whose context ends closes the connection, and
		// shutdown ends ctx before the handler's close handshake.
		pctx, cancel := context.WithTimeout(context.Background(), c.lim.IdleTimeout)
		err := conn.Ping(pctx)
		cancel()
		mu.Lock()
		over := stopped || ctx.Err() != nil
		if !over && err == nil {
			t.Reset(c.lim.PingInterval)
		}
		mu.Unlock()
		if !over && err != nil {
			c.dead.Add(1)
			conn.CloseNow()
		}
	}
	mu.Lock()
	t = time.AfterFunc(c.lim.PingInterval, ping)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// shuttingDown reports whether shutdown has begun.
func (c *wsConns) shuttingDown() bool { return c.ctx.Err() != nil }

// shutdown refuses new WebSockets and ends every handler's context; each
// handler then closes its connection with 1001 (going away).
func (c *wsConns) shutdown() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.cancel()
}

// wait waits up to d for every WebSocket handler to end. Past d, the
// connections still open are closed without a handshake and their handlers
// get a further d; it reports whether all ended.
func (c *wsConns) wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
	}
	c.mu.Lock()
	for conn := range c.conns {
		conn.CloseNow()
	}
	c.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// collectors export the WebSocket connections and refusals.
func (c *wsConns) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_ws_connections", Help: "Open WebSocket connections (bounded by gateway.ws.max.connections).",
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return float64(c.total)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gateway_ws_refused_total", Help: "WebSocket upgrades refused by gateway.ws.max.connections or gateway.ws.max.connections.per.ip.",
		}, func() float64 { return float64(c.refused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gateway_ws_unanswered_pings_total", Help: "WebSocket connections closed because a ping went unanswered within gateway.ws.idle.timeout.ms.",
		}, func() float64 { return float64(c.dead.Load()) }),
	}
}

// closeStream closes a handler's connection at its end: 1001 (going away)
// when the gateway is shutting down, else 1000.
func (c *wsConns) closeStream(conn *websocket.Conn) {
	if c.shuttingDown() {
		conn.Close(websocket.StatusGoingAway, "the gateway is shutting down")
		return
	}
	conn.Close(websocket.StatusNormalClosure, "")
}
