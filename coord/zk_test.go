package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testsvc"
)

// zkTestAddr is the real ZooKeeper the tests use, started by `make test`.
func zkTestAddr(t *testing.T) string {
	t.Helper()
	return testsvc.ZooKeeper(t)
}

// testLogger sends the ZooKeeper client's log to t.Log until the test ends; the
// client may still log from its goroutines while Close runs.
type testLogger struct {
	mu   sync.Mutex // guards done
	t    *testing.T
	done bool
}

func newTestLogger(t *testing.T) *testLogger {
	l := &testLogger{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Logf("zk: "+format, args...)
	}
}

// zkHarness gives a test its own random chroot on the test server and removes it
// when the test ends. With user set, its handles authenticate (digest) and
// create nodes only that user may use.
type zkHarness struct {
	addr       string
	chroot     string
	user, pass string
}

func newZKHarness(t *testing.T) *zkHarness {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	h := &zkHarness{addr: zkTestAddr(t), chroot: "/sluice-test-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() { h.removeChroot(t) })
	return h
}

// dial opens a handle on the harness's chroot through a fresh proxy, closed when t
// ends.
func (h *zkHarness) dial(t *testing.T, sessionTimeout time.Duration) (*ZK, *zkProxy) {
	t.Helper()
	p := startZKProxy(t, h.addr)
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	z, err := DialZK(ctx, ZKOptions{
		Servers:        []string{p.Addr()},
		Chroot:         h.chroot,
		SessionTimeout: sessionTimeout,
		Logger:         newTestLogger(t),
		DigestUser:     h.user,
		DigestPassword: h.pass,
	})
	if err != nil {
		t.Fatalf("DialZK: %v", err)
	}
	t.Cleanup(func() { _ = z.Close() })
	return z, p
}

// removeChroot deletes the chroot's whole tree.
func (h *zkHarness) removeChroot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	z, err := DialZK(ctx, ZKOptions{Servers: []string{h.addr}, DigestUser: h.user, DigestPassword: h.pass})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer z.Close()
	var rm func(p string) error
	rm = func(p string) error {
		children, _, err := z.Children(ctx, p)
		if errors.Is(err, ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := rm(JoinPath(p, c)); err != nil {
				return err
			}
		}
		if err := z.Delete(ctx, p, AnyVersion); err != nil && !errors.Is(err, ErrNoNode) {
			return err
		}
		return nil
	}
	if err := rm(h.chroot); err != nil {
		t.Logf("cleanup of %s: %v", h.chroot, err)
	}
}

type zkControl struct{ proxy *zkProxy }

func (c zkControl) Expire(t *testing.T) { c.proxy.KillSession(t) }

func TestZKConformance(t *testing.T) {
	h := newZKHarness(t)
	runConformance(t, func(t *testing.T) (Coordinator, sessionControl) {
		z, p := h.dial(t, 10*time.Second)
		return z, zkControl{p}
	})
}

// TestZKPartitionExpiry cuts the link for longer than the session timeout: the
// handle reports Disconnected, the server expires the session and deletes its
// ephemeral, and when the link returns the handle reports Expired, then Connected
// with a new session.
func TestZKPartitionExpiry(t *testing.T) {
	ctx := t.Context()
	h := newZKHarness(t)
	// The server raises this to its minimum, twice its tickTime.
	a, proxy := h.dial(t, 2*time.Second)
	b, _ := h.dial(t, 10*time.Second)
	events := a.SessionEvents()
	waitState(t, events, StateConnected)
	oldID := a.SessionID()
	mustCreate(t, a, "/eph", nil, Ephemeral)
	watchFn, watch := WatchChan()
	_, _, err := a.GetW(ctx, "/eph", watchFn)
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	waitState(t, events, StateDisconnected)
	if _, _, err := a.Get(ctx, "/eph"); !errors.Is(err, ErrConnectionLoss) {
		t.Fatalf("Get while cut off: %v, want ErrConnectionLoss", err)
	}
	eventually(t, "the server to expire the session", func() bool {
		ok, _, err := b.Exists(ctx, "/eph")
		return err == nil && !ok
	})
	proxy.Heal()

	waitState(t, events, StateExpired)
	if ev := nextEvent(t, watch); ev.Type != EventSession || ev.State != StateExpired {
		t.Fatalf("watch got %v, want Session(Expired)", ev)
	}
	waitState(t, events, StateConnected)
	if id := a.SessionID(); id == 0 || id == oldID {
		t.Fatalf("session ID after expiry %#x (before %#x)", id, oldID)
	}
	mustCreate(t, a, "/eph", nil, Ephemeral)
}

// TestZKReconnectKeepsSession drops the connection briefly: the session survives,
// and so do its ephemeral and its watches.
func TestZKReconnectKeepsSession(t *testing.T) {
	ctx := t.Context()
	h := newZKHarness(t)
	a, proxy := h.dial(t, 10*time.Second)
	b, _ := h.dial(t, 10*time.Second)
	events := a.SessionEvents()
	waitState(t, events, StateConnected)
	id := a.SessionID()
	mustCreate(t, a, "/eph", nil, Ephemeral)
	mustCreate(t, b, "/data", nil, 0)
	watchFn, watch := WatchChan()
	_, _, err := a.GetW(ctx, "/data", watchFn)
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	waitState(t, events, StateDisconnected)
	// Changed while a is away: the watch fires once a is back.
	if _, err := b.Set(ctx, "/data", []byte("x"), AnyVersion); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	waitState(t, events, StateConnected)
	if got := a.SessionID(); got != id {
		t.Fatalf("session ID changed across a short disconnection: %#x -> %#x", id, got)
	}
	if ev := nextEvent(t, watch); ev.Type != EventNodeDataChanged {
		t.Fatalf("watch got %v, want NodeDataChanged", ev)
	}
	if st := mustExist(t, b, "/eph", true); st.EphemeralOwner != id {
		t.Fatalf("ephemeral owner %#x, want %#x", st.EphemeralOwner, id)
	}
}

func TestZKChroot(t *testing.T) {
	h := newZKHarness(t)
	z, _ := h.dial(t, 10*time.Second)
	got := mustCreate(t, z, "/a-", nil, Sequential)
	if got != "/a-0000000000" {
		t.Fatalf("sequential create under chroot returned %q", got)
	}

	// The same node seen without the chroot.
	raw, err := DialZK(t.Context(), ZKOptions{Servers: []string{h.addr}, Logger: newTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	mustExist(t, raw, h.chroot+got, true)
	names, _, err := z.Children(t.Context(), "/")
	if err != nil || !slices.Equal(names, []string{"a-0000000000"}) {
		t.Fatalf("Children(/) under chroot = %v, %v", names, err)
	}
}

func TestDialZKFailures(t *testing.T) {
	// A loopback port with nothing behind it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()

	cases := []struct {
		name string
		opts ZKOptions
		want error
	}{
		{"no servers", ZKOptions{}, nil},
		{"bad chroot", ZKOptions{Servers: []string{dead}, Chroot: "sluice"}, ErrInvalidPath},
		{"negative timeout", ZKOptions{Servers: []string{dead}, SessionTimeout: -time.Second}, nil},
		{"unreachable", ZKOptions{Servers: []string{dead}}, ErrConnectionLoss},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			z, err := DialZK(ctx, tc.opts)
			if err == nil {
				_ = z.Close()
				t.Fatal("DialZK succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseZKConnect(t *testing.T) {
	cases := []struct {
		name        string
		in          string
		servers     []string
		chroot      string
		errExpected bool
	}{
		{"one server", "127.0.0.1:2181", []string{"127.0.0.1:2181"}, "", false},
		{"several with chroot", "a:1,b:2,c:3/sluice/prod", []string{"a:1", "b:2", "c:3"}, "/sluice/prod", false},
		{"default port", "zk1,zk2:2182", []string{"zk1:2181", "zk2:2182"}, "", false},
		{"root chroot", "zk:2181/", []string{"zk:2181"}, "", false},
		{"spaces", " zk1:1 , zk2:2 ", []string{"zk1:1", "zk2:2"}, "", false},
		{"ipv6", "[::1]:2181,[::1]/c", []string{"[::1]:2181", "[::1]:2181"}, "/c", false},
		{"empty", "", nil, "", true},
		{"empty server", "a:1,,b:2", nil, "", true},
		{"bad port", "a:http", nil, "", true},
		{"port out of range", "a:70000", nil, "", true},
		{"no host", ":2181", nil, "", true},
		{"bad chroot", "a:1/x//y", nil, "", true},
		{"trailing slash chroot", "a:1/x/", nil, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			servers, chroot, err := ParseZKConnect(tc.in)
			if tc.errExpected {
				if err == nil {
					t.Fatalf("ParseZKConnect(%q) = %v %q, want an error", tc.in, servers, chroot)
				}
				return
			}
			if err != nil || !slices.Equal(servers, tc.servers) || chroot != tc.chroot {
				t.Fatalf("ParseZKConnect(%q) = %v %q %v, want %v %q", tc.in, servers, chroot, err, tc.servers, tc.chroot)
			}
		})
	}
}

// TestZKWatchesCostNoGoroutine sets a thousand watches, on a hundred nodes, and
// checks that the handle runs no more goroutines for them; then each fires once.
func TestZKWatchesCostNoGoroutine(t *testing.T) {
	h := newZKHarness(t)
	ctx := t.Context()
	z, err := DialZK(ctx, ZKOptions{Servers: []string{h.addr}, Chroot: h.chroot})
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	for i := range 100 {
		mustCreate(t, z, fmt.Sprintf("/n%d", i), nil, 0)
	}
	before := runtime.NumGoroutine()
	var fired atomic.Int64
	for i := range 1000 {
		if _, _, err := z.GetW(ctx, fmt.Sprintf("/n%d", i%100), func(ev Event) {
			if ev.Type == EventNodeDataChanged {
				fired.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Fatalf("%d goroutines with 1,000 watches set, %d before", g, before)
	}
	for i := range 100 {
		if _, err := z.Set(ctx, fmt.Sprintf("/n%d", i), []byte("x"), AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every watch to fire", func() bool { return fired.Load() == 1000 })
	// Fired once: more changes call nothing.
	if _, err := z.Set(ctx, "/n0", []byte("y"), AnyVersion); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := fired.Load(); n != 1000 {
		t.Fatalf("%d calls after a second change, want 1000", n)
	}
}

// TestZKCloseStopsGoroutines checks that Close leaves nothing running: the client's
// loops and the calls bound to a context, and that it ends every watch.
func TestZKCloseStopsGoroutines(t *testing.T) {
	h := newZKHarness(t)
	ctx := t.Context()
	before := runtime.NumGoroutine()
	z, err := DialZK(ctx, ZKOptions{Servers: []string{h.addr}, Chroot: h.chroot})
	if err != nil {
		t.Fatal(err)
	}
	watches := make([]<-chan Event, 0, 3)
	for _, set := range []func(WatchFunc) error{
		func(fn WatchFunc) error { _, _, err := z.GetW(ctx, "/", fn); return err },
		func(fn WatchFunc) error { _, _, err := z.ChildrenW(ctx, "/", fn); return err },
		func(fn WatchFunc) error { _, _, err := z.ExistsW(ctx, "/absent", fn); return err },
	} {
		fn, ch := WatchChan()
		if set(fn) == nil {
			watches = append(watches, ch)
		}
	}
	if len(watches) != 3 {
		t.Fatal("setting watches failed")
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range watches {
		if ev := nextEvent(t, ch); ev.Type != EventSession || ev.State != StateClosed {
			t.Fatalf("after Close got %v", ev)
		}
	}
	eventually(t, "goroutines to stop", func() bool { return runtime.NumGoroutine() <= before })
}
