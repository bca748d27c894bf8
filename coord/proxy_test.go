package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// zkProxy is a loopback TCP proxy between a test's ZooKeeper handle and the real
// server. It can cut the link (a network partition: current connections drop, new
// ones are refused) and kill the session it carries, the way ZooKeeper's own tests
// expire a session: by connecting a second time with the same session ID and
// password, which the proxy reads from the server's connect response, and closing
// that session.
type zkProxy struct {
	t      *testing.T
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every pipe goroutine

	mu        sync.Mutex            // guards conns, cut and the last session seen
	conns     map[net.Conn]struct{} // open sockets, both sides
	cut       bool
	sessionID int64
	passwd    []byte
	timeoutMs int32
}

// startZKProxy listens on a free loopback port and forwards to target until the
// test ends.
func startZKProxy(t *testing.T, target string) *zkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &zkProxy{t: t, target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

func (p *zkProxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection through the proxy and refuses new ones until Heal.
func (p *zkProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Heal lets connections through again.
func (p *zkProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *zkProxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// track registers c; it reports false (and closes c) while the link is cut.
func (p *zkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *zkProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *zkProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve pipes one client connection to the server, reading the session ID and
// password from the server's first frame on the way.
func (p *zkProxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(server, client)
		p.untrack(client, server)
	}()
	if frame, err := readFrame(server); err == nil {
		p.noteConnectResponse(frame)
		if writeFrame(client, frame) == nil {
			_, _ = io.Copy(client, server)
		}
	}
	p.untrack(client, server)
}

// noteConnectResponse records the session from a connect response: protocol
// version (int32), timeout (int32), session ID (int64), password (int32 length and
// bytes). A session ID of 0 means the server refused an expired session.
func (p *zkProxy) noteConnectResponse(b []byte) {
	if len(b) < 20 {
		return
	}
	timeout := int32(binary.BigEndian.Uint32(b[4:8]))
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	n := int(int32(binary.BigEndian.Uint32(b[16:20])))
	if id == 0 || n < 0 || 20+n > len(b) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessionID, p.timeoutMs, p.passwd = id, timeout, append([]byte(nil), b[20:20+n]...)
}

// KillSession closes, at the server, the last session that went through the proxy.
// It returns once the server has closed it: its ephemerals are gone; the handle
// that owned it finds out when it next talks to the server.
func (p *zkProxy) KillSession(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	id, passwd, timeout := p.sessionID, p.passwd, p.timeoutMs
	p.mu.Unlock()
	if id == 0 {
		t.Fatal("KillSession: no session went through the proxy")
	}
	if err := killZKSession(p.target, id, passwd, timeout); err != nil {
		t.Fatalf("KillSession %#x: %v", id, err)
	}
}

func killZKSession(target string, id int64, passwd []byte, timeoutMs int32) error {
	c, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	// Connect request: protocol version, last zxid seen, timeout, session ID, password.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(timeoutMs))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writeFrame(c, req); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 {
		return fmt.Errorf("short connect response (%d bytes)", len(resp))
	}
	if binary.BigEndian.Uint64(resp[8:16]) == 0 {
		return nil // already expired
	}
	// Close-session request: xid, opcode -11.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if err := writeFrame(c, closeReq); err != nil {
		return err
	}
	// The reply (or the server closing the socket) means the session is closed.
	if _, err := readFrame(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("close reply: %w", err)
	}
	return nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 16<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func writeFrame(w io.Writer, b []byte) error {
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := w.Write(append(buf, b...))
	return err
}
