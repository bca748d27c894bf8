package clustertest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP relay on 127.0.0.1 in front of one address: one network link
// of the cluster (broker i → broker j, or broker i → ZooKeeper) that a test
// can cut and restore.
//
// Cut is a partition as a network makes it: traffic stalls, nothing is
// closed. Bytes already read from either side are held back, new connections
// are accepted but never reach the target, and the endpoints find out only
// through their own timeouts (a ZooKeeper client misses its pings and the
// ensemble expires the session; a follower's fetch hangs). CutReset is the
// other kind: every connection is closed at once and new ones are accepted
// and closed (a peer that answers with RST). Restore heals either: the
// connections that lived through the cut are closed (their streams lost
// bytes), and new connections flow again.
type Proxy struct {
	Name   string
	target string
	ln     net.Listener
	logf   func(format string, args ...any)

	mu     sync.Mutex // guards the fields below
	mode   cutMode
	pipes  map[*pipe]struct{}
	closed bool
	// accepted counts connections, for the logs.
	accepted int

	wg sync.WaitGroup // the accept loop and every pipe's goroutines
}

type cutMode int

const (
	linkUp    cutMode = iota
	linkStall         // Cut: hold everything
	linkReset         // CutReset: close everything
)

// pipe is one relayed connection. doomed pipes lived through a cut: they
// forward nothing more and are closed by Restore or Close.
type pipe struct {
	client   net.Conn
	upstream net.Conn // nil until dialled
	doomed   bool     // guarded by Proxy.mu
	once     sync.Once
	done     chan struct{} // closed by close
}

func (pp *pipe) close() {
	pp.once.Do(func() {
		close(pp.done)
		pp.client.Close()
		if pp.upstream != nil {
			pp.upstream.Close()
		}
	})
}

// NewProxy listens on a free loopback port and relays to target until Close.
// logf (may be nil) receives one line per cut and restore.
func NewProxy(name, target string, logf func(format string, args ...any)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := &Proxy{Name: name, target: target, ln: ln, logf: logf, pipes: map[*pipe]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listen address, the one to give the dialling side.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy relays to.
func (p *Proxy) Target() string { return p.target }

// Cut stalls the link (see Proxy). It does not block.
func (p *Proxy) Cut() { p.cut(linkStall) }

// CutReset closes every connection of the link and refuses new ones (see Proxy).
func (p *Proxy) CutReset() { p.cut(linkReset) }

func (p *Proxy) cut(m cutMode) {
	p.mu.Lock()
	p.mode = m
	var toClose []*pipe
	for pp := range p.pipes {
		pp.doomed = true
		if m == linkReset {
			toClose = append(toClose, pp)
		}
	}
	n := len(p.pipes)
	p.mu.Unlock()
	for _, pp := range toClose {
		pp.close()
	}
	what := map[cutMode]string{linkStall: "cut (stalled)", linkReset: "cut (reset)"}[m]
	p.logf("link %s %s: %d connections held", p.Name, what, n)
}

// Restore heals the link: connections that lived through the cut are closed,
// new ones are relayed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.mode = linkUp
	var doomed []*pipe
	for pp := range p.pipes {
		if pp.doomed {
			doomed = append(doomed, pp)
		}
	}
	p.mu.Unlock()
	for _, pp := range doomed {
		pp.close()
	}
	p.logf("link %s restored: %d stalled connections closed", p.Name, len(doomed))
}

// IsCut reports whether the link is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode != linkUp
}

// Close stops the proxy, closes every connection and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	all := make([]*pipe, 0, len(p.pipes))
	for pp := range p.pipes {
		all = append(all, pp)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pp := range all {
		pp.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		pp := &pipe{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed || p.mode == linkReset {
			p.mu.Unlock()
			c.Close()
			continue
		}
		pp.doomed = p.mode == linkStall
		p.pipes[pp] = struct{}{}
		p.accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pp)
	}
}

// serve dials the target for one accepted connection and relays both ways.
func (p *Proxy) serve(pp *pipe) {
	defer p.wg.Done()
	defer func() {
		pp.close()
		p.mu.Lock()
		delete(p.pipes, pp)
		p.mu.Unlock()
	}()
	if p.held(pp) {
		return // accepted during a cut: never reaches the target
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return // the client sees the connection close, as with a refused dial
	}
	p.mu.Lock()
	if pp.doomed || p.closed {
		p.mu.Unlock()
		up.Close()
		p.held(pp)
		return
	}
	pp.upstream = up
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.relay(pp, up, pp.client) }()
	go func() { defer wg.Done(); p.relay(pp, pp.client, up) }()
	wg.Wait()
}

// held reports whether pp is doomed; if so it blocks until pp is closed.
func (p *Proxy) held(pp *pipe) bool {
	p.mu.Lock()
	doomed := pp.doomed
	p.mu.Unlock()
	if doomed {
		<-pp.done
	}
	return doomed
}

// relay copies src to dst until either side ends or the pipe is doomed; a
// doomed pipe keeps what it read and waits to be closed. Either direction
// ending closes the whole pipe (HTTP and ZooKeeper need no half-close).
func (p *Proxy) relay(pp *pipe, dst, src net.Conn) {
	defer pp.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.held(pp) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, reset or closed: the pipe ends either way
		}
	}
}
