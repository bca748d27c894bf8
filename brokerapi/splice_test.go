package brokerapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// fetchServer answers fetches as a broker does: body bytes with their
// length and positions in headers; offset 13 gets a broker's error. It
// checks the node signature and counts connections.
func fetchServer(t *testing.T, secret []byte, body []byte) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := brokerapi.VerifyNode(secret, r, time.Now()); err != nil {
			apihttp.WriteError(w, api.Errorf(api.CodeUnauthenticated, "%v", err))
			return
		}
		if r.URL.Query().Get("offset") == "13" {
			apihttp.WriteError(w, api.Errorf(api.CodeOffsetOutOfRange, "offset 13 is out of range"))
			return
		}
		if p := r.Header.Get(brokerapi.HeaderPrincipal); p != "User:alice" {
			apihttp.WriteError(w, api.Errorf(api.CodeUnauthenticated, "principal %q", p))
			return
		}
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set(api.HeaderNextOffset, "42")
		h.Set(api.HeaderHighWatermark, "50")
		h.Set(api.HeaderLogStartOffset, "7")
		_, _ = w.Write(body)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestSpliceFetcher checks the fetcher's answers against the bytes served,
// through Read and through WriteTo, reusing one connection, retrying once
// on a pooled connection the broker closed, and passing the broker's errors.
func TestSpliceFetcher(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	body := make([]byte, 3<<20+17) // more than the connection's read buffer
	r := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(r.IntN(256))
	}
	srv, conns := fetchServer(t, secret, body)
	c := brokerapi.NewClient()
	c.Auth = &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}
	defer c.Close()
	f := brokerapi.NewSpliceFetcher(c)
	defer f.Close()
	addr := srv.Listener.Addr().String()
	ctx := auth.WithPrincipal(context.Background(), "User:alice")
	fetch := func(offset int64) (*brokerapi.FetchResponse, error) {
		return f.Fetch(ctx, addr, "t", 0, brokerapi.FetchParams{Offset: offset, MaxBytes: 4 << 20, LeaderEpoch: -1})
	}
	check := func(name string, read func(io.Reader) ([]byte, error)) {
		t.Helper()
		fr, err := fetch(0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fr.Size != int64(len(body)) || fr.NextOffset != 42 || fr.HighWatermark != 50 || fr.LogStartOffset != 7 {
			t.Fatalf("%s: size %d next %d hw %d start %d", name, fr.Size, fr.NextOffset, fr.HighWatermark, fr.LogStartOffset)
		}
		got, err := read(fr.Body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes differ from the %d served", name, len(got), len(body))
		}
		fr.Body.Close()
	}
	check("Read", io.ReadAll)
	check("WriteTo", func(r io.Reader) ([]byte, error) {
		var b bytes.Buffer
		_, err := r.(io.WriterTo).WriteTo(&b)
		return b.Bytes(), err
	})
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two fetches read whole; want one, reused", n)
	}

	// The broker closes the idle connection: the next fetch still works.
	srv.CloseClientConnections()
	check("after the broker closed the pooled connection", io.ReadAll)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections; want a second one after the first was closed", n)
	}

	// A body closed before its end takes its connection with it.
	fr, err := fetch(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(fr.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	fr.Body.Close()
	check("after a body closed half read", io.ReadAll)
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections; want a new one after a half-read body", n)
	}

	// The broker's error comes back as its *api.Error.
	_, err = fetch(13)
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeOffsetOutOfRange {
		t.Fatalf("offset 13: %v; want OFFSET_OUT_OF_RANGE", err)
	}

	// Unsigned, the broker refuses.
	unsigned := brokerapi.NewSpliceFetcher(brokerapi.NewClient())
	defer unsigned.Close()
	if _, err := unsigned.Fetch(ctx, addr, "t", 0, brokerapi.FetchParams{LeaderEpoch: -1}); !errors.As(err, &e) || e.Code != api.CodeUnauthenticated {
		t.Fatalf("unsigned: %v; want UNAUTHENTICATED", err)
	}

	// Nobody listening: BROKER_UNAVAILABLE, and NotSent (safe to retry).
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	_, err = f.Fetch(ctx, dead, "t", 0, brokerapi.FetchParams{LeaderEpoch: -1})
	if !errors.As(err, &e) || e.Code != api.CodeBrokerUnavailable || !brokerapi.NotSent(err) {
		t.Fatalf("dead broker: %v; want BROKER_UNAVAILABLE, not sent", err)
	}

	// A context that ends while the broker holds the answer back ends the fetch.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = f.Fetch(cctx, slow.Listener.Addr().String(), "t", 0, brokerapi.FetchParams{LeaderEpoch: -1})
	if !errors.Is(err, api.ErrRequestTimedOut) || time.Since(start) > 10*time.Second {
		t.Fatalf("slow broker: %v after %s; want REQUEST_TIMED_OUT", err, time.Since(start))
	}
}

// TestSpliceFetcherTLS: with TLS to brokers there is nothing to splice; the
// fetcher's answers are the Client's, over TLS.
func TestSpliceFetcherTLS(t *testing.T) {
	body := []byte("batches over TLS")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set(api.HeaderNextOffset, "1")
		h.Set(api.HeaderHighWatermark, "1")
		h.Set(api.HeaderLogStartOffset, "0")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := brokerapi.NewClient()
	c.UseTLS(&tls.Config{RootCAs: pool})
	defer c.Close()
	f := brokerapi.NewSpliceFetcher(c)
	defer f.Close()
	fr, err := f.Fetch(context.Background(), srv.Listener.Addr().String(), "t", 0, brokerapi.FetchParams{LeaderEpoch: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Body.Close()
	got, err := io.ReadAll(fr.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%q, %v; want %q", got, err, body)
	}
}
