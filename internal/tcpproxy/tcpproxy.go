// Package tcpproxy relays TCP on 127.0.0.1 to one address and breaks the
// link on demand: a stall or a reset of every connection, lost answers, a
// cut in the middle of a chosen request. The fault tests put one on every
// link they want to cut.
package tcpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
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
//
// Two more faults act on single requests rather than the whole link:
// DropResponses forwards requests but loses a random share of the answers
// (a client that cannot tell whether its request took effect), and
// CutOnRequest stalls the link in the middle of a chosen request (an upload
// caught half-way).
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
	// dropShare of new connections lose their first answer (DropResponses);
	// dropRand draws which ones; dropped counts the answers lost.
	dropShare float64
	dropRand  *rand.Rand
	dropped   int
	// droppedAnswers holds the first bytes (up to 4 KiB) of each dropped
	// answer, by the client's address (its end of the connection); with
	// keepAnswers > 0, up to that many bytes read to the target's end of
	// the connection (KeepDroppedAnswers).
	droppedAnswers map[string]string
	keepAnswers    int
	// trigger is the armed CutOnRequest, nil when none is.
	trigger *RequestCut
	// relayed counts bytes written to the target [0] and to clients [1].
	relayed [2]atomic.Int64

	wg sync.WaitGroup // the accept loop and every pipe's goroutines
}

type cutMode int

const (
	linkUp    cutMode = iota
	linkStall         // Cut: hold everything
	linkReset         // CutReset: close everything
)

// RequestCut is an armed CutOnRequest. Each pipe is followed on its own:
// a client→target read that starts with a matching request line starts
// counting that pipe's bytes; a read that starts another request line (any
// HTTP method) stops it. The first pipe whose count reaches the budget
// fires the cut.
type RequestCut struct {
	// Fired is closed when the link is cut.
	Fired <-chan struct{}

	method   []byte   // "PUT "
	contains []string // the request line must contain each of these too
	after    int
	seen     map[*pipe]int // bytes of the matching request so far, per pipe; guarded by Proxy.mu
	lines    map[*pipe]string
	fired    chan struct{}
	line     string // the request the link was cut in; set before fired is closed
}

// Request is the first line of the request the link was cut in ("PUT
// /bucket/key HTTP/1.1"); read it after Fired is closed.
func (rc *RequestCut) Request() string { return rc.line }

// httpMethods start the request lines a RequestCut recognises.
var httpMethods = [][]byte{[]byte("GET "), []byte("PUT "), []byte("POST "), []byte("HEAD "), []byte("DELETE "), []byte("OPTIONS "), []byte("PATCH ")}

func startsRequest(chunk []byte) bool {
	for _, m := range httpMethods {
		if bytes.HasPrefix(chunk, m) {
			return true
		}
	}
	return false
}

// pipe is one relayed connection. doomed pipes lived through a cut: they
// forward nothing more and are closed by Restore or Close.
type pipe struct {
	client   net.Conn
	upstream net.Conn // nil until dialled
	doomed   bool     // guarded by Proxy.mu
	// dropResponse: the target's first bytes are discarded and the
	// connection closed (DropResponses). Set before the pipe is served.
	dropResponse bool
	once         sync.Once
	done         chan struct{} // closed by close
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
func New(name, target string, logf func(format string, args ...any)) (*Proxy, error) {
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
	p.trigger = nil
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

// DropResponses makes the link lose the answer of a share (0..1) of the
// connections accepted from now on, drawn with rng: the request is relayed
// to the target in full, and when the target's first bytes come back they
// are discarded and both sides closed. The target did the work; the client
// sees its connection end without an answer. Every request of a client that
// dials one connection per request (no keep-alive) is thus a separate draw.
// A share of 0 turns it off. The proxy owns rng from now on.
func (p *Proxy) DropResponses(share float64, rng *rand.Rand) {
	p.mu.Lock()
	p.dropShare, p.dropRand = share, rng
	p.mu.Unlock()
	p.logf("link %s drops the answers of %.0f%% of new connections", p.Name, share*100)
}

// Dropped is how many answers DropResponses discarded.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// KeepDroppedAnswers makes the link keep whole answers it drops, up to
// limit bytes each: instead of closing the connection at the answer's first
// bytes, the proxy reads on until the target ends the connection (an HTTP
// server does after answering a request with "Connection: close"), limit
// bytes came, or 5 s passed, and only then closes both sides. For a
// client that must learn exactly what it was not told (a poll's records).
// 0 restores the default: the first read, up to 4 KiB.
func (p *Proxy) KeepDroppedAnswers(limit int) {
	p.mu.Lock()
	p.keepAnswers = limit
	p.mu.Unlock()
}

// TakeDroppedAnswer returns and forgets the first bytes (one read, up to
// 4 KiB) of the answer DropResponses discarded on the connection from
// clientAddr (the client's local address, "127.0.0.1:port"): what the
// client would have been told, such as "HTTP/1.1 200 OK\r\n...". The
// proxy notes it before it closes the connection; take it as soon as the
// client sees the connection end, before its port is used again.
func (p *Proxy) TakeDroppedAnswer(clientAddr string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.droppedAnswers[clientAddr]
	delete(p.droppedAnswers, clientAddr)
	return a, ok
}

// CutOnRequest arms a cut in the middle of a request: the link relays as
// usual until a client sends an HTTP request whose request line starts with
// method ("PUT", "HEAD") and contains every one of contains (parts of a key
// such as "/0/" and ".log"); once after bytes of that request (request line and
// headers included; 0: none of it) have reached the target, the link is cut
// as by Cut and Fired is closed. Requests pipelined behind it are not told
// apart from it. Restore heals the link as after any cut, and disarms a
// cut that has not fired (its Fired then never closes); arming again
// replaces the previous one.
func (p *Proxy) CutOnRequest(method string, after int, contains ...string) *RequestCut {
	fired := make(chan struct{})
	rc := &RequestCut{Fired: fired, method: []byte(method + " "), contains: contains, after: after,
		seen: map[*pipe]int{}, lines: map[*pipe]string{}, fired: fired}
	p.mu.Lock()
	p.trigger = rc
	p.mu.Unlock()
	p.logf("link %s will stall %d bytes into the next %s request for %q", p.Name, after, method, strings.Join(contains, "…"))
	return rc
}

// gate decides how much of chunk, just read from pp's client, may go to
// the target: all of it unless it completes an armed cut's budget. Then it
// returns the cut (disarmed): the caller forwards the first n bytes, cuts
// the link, then closes its fired.
func (p *Proxy) gate(pp *pipe, chunk []byte) (n int, fire *RequestCut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.trigger
	if t == nil {
		return len(chunk), nil
	}
	if startsRequest(chunk) {
		delete(t.seen, pp)
		line, _, _ := bytes.Cut(chunk, []byte("\r\n"))
		match := bytes.HasPrefix(line, t.method)
		for _, c := range t.contains {
			match = match && bytes.Contains(line, []byte(c))
		}
		if match {
			t.seen[pp] = 0
			t.lines[pp] = string(line[:min(len(line), 300)])
		}
	}
	seen, ok := t.seen[pp]
	if !ok {
		return len(chunk), nil
	}
	if seen+len(chunk) < t.after {
		t.seen[pp] = seen + len(chunk)
		return len(chunk), nil
	}
	p.trigger = nil
	t.line = t.lines[pp]
	return t.after - seen, t
}

// Relayed returns how many bytes the link has delivered so far: to the
// target (requests) and back to clients (answers).
func (p *Proxy) Relayed() (toTarget, toClient int64) {
	return p.relayed[0].Load(), p.relayed[1].Load()
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
		if p.dropShare > 0 && p.dropRand != nil {
			pp.dropResponse = p.dropRand.Float64() < p.dropShare
		}
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
	go func() { defer wg.Done(); p.relay(pp, up, pp.client, true) }()
	go func() { defer wg.Done(); p.relay(pp, pp.client, up, false) }()
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
// toTarget says which direction this is: requests pass the CutOnRequest
// gate, answers the DropResponses one.
func (p *Proxy) relay(pp *pipe, dst, src net.Conn, toTarget bool) {
	defer pp.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.held(pp) {
				return
			}
			if !toTarget && pp.dropResponse {
				p.mu.Lock()
				keep := p.keepAnswers
				p.mu.Unlock()
				answer := buf[:min(n, 4096)]
				if keep > 0 {
					answer = readRest(src, buf[:min(n, keep)], keep)
				}
				p.mu.Lock()
				p.dropped++
				if p.droppedAnswers == nil {
					p.droppedAnswers = map[string]string{}
				}
				p.droppedAnswers[pp.client.RemoteAddr().String()] = string(answer)
				p.mu.Unlock()
				return // the answer is lost; the deferred close ends both sides
			}
			fwd, fire := n, (*RequestCut)(nil)
			if toTarget {
				fwd, fire = p.gate(pp, buf[:n])
			}
			if fwd > 0 {
				w, werr := dst.Write(buf[:fwd])
				if toTarget {
					p.relayed[0].Add(int64(w))
				} else {
					p.relayed[1].Add(int64(w))
				}
				if werr != nil {
					return
				}
			}
			if fire != nil {
				p.logf("link %s: the armed cut fires in the middle of a request", p.Name)
				p.cut(linkStall)
				close(fire.fired)
				p.held(pp) // the rest of the request stays here
				return
			}
		}
		if err != nil {
			return // EOF, reset or closed: the pipe ends either way
		}
	}
}

// readRest appends what src sends after first until it ends the
// connection, limit bytes are in hand, or 5 s pass.
func readRest(src net.Conn, first []byte, limit int) []byte {
	out := append([]byte(nil), first...)
	_ = src.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 32<<10)
	for len(out) < limit {
		n, err := src.Read(buf)
		out = append(out, buf[:min(n, limit-len(out))]...)
		if err != nil {
			break
		}
	}
	return out
}
