// Package httpserve holds what the gateway's and the broker's HTTP servers
// share beyond net/http itself.
package httpserve

import (
	"net"
	"net/http"
	"sync"
)

// CloseSilentConnsOnShutdown makes srv.Shutdown close, at once, connections
// that were accepted but have not sent a byte of a request. net/http counts
// such a connection as busy for its first five seconds, so a client that
// dialled ahead (an HTTP client's spare connection, a port scan) would hold a
// graceful shutdown for that long and make it miss its deadline. Closing it
// loses nothing: no request was read from it, and a client retries an unused
// connection on a new one.
//
// It sets srv.ConnState (chaining any hook already there) and registers a
// shutdown function; call it before Serve.
func CloseSilentConnsOnShutdown(srv *http.Server) {
	t := &silentConns{conns: map[net.Conn]struct{}{}}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		t.track(c, s)
		if prev != nil {
			prev(c, s)
		}
	}
	srv.RegisterOnShutdown(t.shutdown)
}

// silentConns is the set of connections in StateNew. Its lock is a leaf.
type silentConns struct {
	mu      sync.Mutex
	closing bool
	conns   map[net.Conn]struct{}
}

func (t *silentConns) track(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s != http.StateNew {
		delete(t.conns, c)
		return
	}
	if t.closing {
		// Accepted in the moment before the listener closed.
		c.Close()
		return
	}
	t.conns[c] = struct{}{}
}

// shutdown runs once the listeners are closed (net/http calls it from
// Shutdown). A connection that sends its request first is already out of
// the set; one that has not gets a closed socket and its serving goroutine
// ends on the read error.
func (t *silentConns) shutdown() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = true
	for c := range t.conns {
		c.Close()
	}
	clear(t.conns)
}
