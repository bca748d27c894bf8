package gateway

import (
	"bufio"
	"bytes"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// A WebSocket keeps, for its whole life, the buffered reader and writer its
// handshake hands it. net/http's are 4 KiB each, sized for HTTP; a stream
// reads only credit frames and pongs (the read limit is 4 KiB, and a
// message larger than the buffer is read straight into its destination)
// and writes frames that are mostly larger than any buffer (bufio writes
// what does not fit straight to the socket). So the gateway's WebSockets
// take small buffers of their own: an idle connection holds 768 bytes of
// them instead of 8 KiB, and a frame costs at most one write more.
const (
	wsReadBuffer  = 256
	wsWriteBuffer = 512
)

// acceptWS completes the WebSocket handshake of r, on small buffers.
func (g *Gateway) acceptWS(w http.ResponseWriter, r *http.Request) (*websocket.Conn, error) {
	return websocket.Accept(smallBuffers{w}, r, g.wsAcceptOptions())
}

// smallBuffers is a ResponseWriter whose Hijack swaps net/http's buffers
// for wsReadBuffer and wsWriteBuffer bytes.
type smallBuffers struct{ http.ResponseWriter }

func (s smallBuffers) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack hands over the connection: what net/http has buffered of the
// handshake's answer is written first, and what it read past the request
// (a client may send frames before it sees the answer) is read first.
func (s smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Flush(); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Peek(n)
		c = &prefixedConn{Conn: c, pre: bytes.Clone(b)}
	}
	return c, bufio.NewReadWriter(bufio.NewReaderSize(c, wsReadBuffer), bufio.NewWriterSize(c, wsWriteBuffer)), nil
}

// prefixedConn reads pre before the connection.
type prefixedConn struct {
	net.Conn
	pre []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		if len(c.pre) == 0 {
			c.pre = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}
