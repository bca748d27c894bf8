package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line and reads it back within d; ok false on timeout,
// err on a closed or reset connection.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (ok bool, err error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return false, err
	}
	got, err := r.ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if got != line+"\n" {
		return false, errors.New("echo mismatch: " + got)
	}
	return true, nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyCutStallsAndRestoreHeals(t *testing.T) {
	p, err := New("test", echoServer(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	old, oldR := dial(t, p.Addr())
	if ok, err := roundTrip(old, oldR, "before", 2*time.Second); !ok || err != nil {
		t.Fatalf("before the cut: ok %v err %v", ok, err)
	}
	p.Cut()
	// An existing connection stalls: nothing comes back, nothing is closed.
	if ok, err := roundTrip(old, oldR, "during", 300*time.Millisecond); ok || err != nil {
		t.Fatalf("existing connection during the cut: ok %v err %v; want a stall", ok, err)
	}
	// A new connection is accepted but goes nowhere.
	fresh, freshR := dial(t, p.Addr())
	if ok, err := roundTrip(fresh, freshR, "new", 300*time.Millisecond); ok || err != nil {
		t.Fatalf("new connection during the cut: ok %v err %v; want a stall", ok, err)
	}
	p.Restore()
	// Connections that lived through the cut are closed...
	for name, r := range map[string]*bufio.Reader{"old": oldR, "fresh": freshR} {
		_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
		_ = fresh.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s connection after the restore: %v; want it closed", name, err)
		}
	}
	// ...and new ones flow.
	again, againR := dial(t, p.Addr())
	if ok, err := roundTrip(again, againR, "after", 2*time.Second); !ok || err != nil {
		t.Fatalf("after the restore: ok %v err %v", ok, err)
	}
}

func TestProxyCutResetCloses(t *testing.T) {
	p, err := New("test", echoServer(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, r := dial(t, p.Addr())
	if ok, err := roundTrip(c, r, "before", 2*time.Second); !ok || err != nil {
		t.Fatalf("before the cut: ok %v err %v", ok, err)
	}
	p.CutReset()
	if _, err := roundTrip(c, r, "during", 2*time.Second); err == nil {
		t.Fatal("existing connection survived CutReset")
	}
	c2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, r2, "new", 2*time.Second); err == nil {
		t.Fatal("a new connection was relayed during CutReset")
	}
	p.Restore()
	c3, r3 := dial(t, p.Addr())
	if ok, err := roundTrip(c3, r3, "after", 2*time.Second); !ok || err != nil {
		t.Fatalf("after the restore: ok %v err %v", ok, err)
	}
}

func TestProxyDropResponses(t *testing.T) {
	p, err := New("test", echoServer(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.DropResponses(1, rand.New(rand.NewPCG(1, 2)))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "lost", 2*time.Second); err == nil {
		t.Fatal("an answer came through DropResponses(1)")
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped() = %d, want 1", p.Dropped())
	}
	if l, ok := p.TakeDroppedAnswer(c.LocalAddr().String()); !ok || l != "lost\n" {
		t.Fatalf("DroppedAnswer = %q %v, want the echo", l, ok)
	}
	p.DropResponses(0, nil)
	c2, r2 := dial(t, p.Addr())
	if ok, err := roundTrip(c2, r2, "kept", 2*time.Second); !ok || err != nil {
		t.Fatalf("after DropResponses(0): ok %v err %v", ok, err)
	}
}

func TestProxyCutOnRequest(t *testing.T) {
	// A target that records what reached it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	p, err := New("test", ln.Addr().String(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	rc := p.CutOnRequest("PUT", 20, "/b")
	c, _ := dial(t, p.Addr())
	for _, req := range []string{"GET /a HTTP/1.1\r\n\r\n", "PUT /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"} {
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		select {
		case <-rc.Fired:
			t.Fatalf("%q fired a cut armed for PUT /b", req)
		default:
		}
	}
	if _, err := c.Write([]byte("PUT /b HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rc.Fired:
	case <-time.After(2 * time.Second):
		t.Fatal("the PUT did not fire the cut")
	}
	if rc.Request() != "PUT /b HTTP/1.1" || !p.IsCut() {
		t.Fatalf("Request() = %q, IsCut %v", rc.Request(), p.IsCut())
	}
	p.Restore()
	select {
	case b := <-got:
		if want := "GET /a HTTP/1.1\r\n\r\nPUT /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nxPUT /b HTTP/1.1\r\nCon"; string(b) != want {
			t.Fatalf("the target got %q, want %q", b, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the target's connection was not closed by Restore")
	}
}
