package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A connection that never sends a request does not hold a graceful
// shutdown: Shutdown returns within its deadline, and a request that was
// in flight still gets its answer.
func TestShutdownClosesSilentConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "done") // the client's read checks it
	})}
	CloseSilentConnsOnShutdown(srv)
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed once shut down

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- string(b)
	}()
	// Both connections are in the server's hands before Shutdown starts.
	time.Sleep(200 * time.Millisecond)

	// net/http alone waits five seconds for a silent connection.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := <-answer; got != "done" {
		t.Fatalf("the request in flight got %q", got)
	}
	silent.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the silent connection is still open (read %d bytes)", n)
	}
}
