package coord

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// DefaultZKSessionTimeout is ZKOptions.SessionTimeout's default.
const DefaultZKSessionTimeout = 10 * time.Second

// defaultZKPort is the port a connect-string host without one gets.
const defaultZKPort = "2181"

// ZKOptions configure DialZK.
type ZKOptions struct {
	// Servers are the ensemble's "host:port" addresses. Required.
	Servers []string
	// Chroot, when set, is the node every path is relative to ("/sluice" makes
	// "/brokers" mean "/sluice/brokers"); DialZK creates it if it is missing.
	// Default "": the tree's root.
	Chroot string
	// SessionTimeout is how long the ensemble keeps the session (its ephemerals and
	// watches) after losing contact with this handle. The server clamps it to
	// [2, 20] × its tickTime. Default DefaultZKSessionTimeout.
	SessionTimeout time.Duration
	// Logger receives the ZooKeeper client's connection log. Default nil: discarded.
	Logger Logger
	// DigestUser and DigestPassword, when set (both or neither), are
	// credentials of ZooKeeper's digest scheme: every session of the
	// handle authenticates with them before its first request, and every
	// node the handle creates (the chroot included) gets an ACL that gives
	// this user every permission and nobody else any (ZooKeeper still lets
	// anyone see whether a node exists). Default none: nodes are open to
	// all (world:anyone).
	DigestUser, DigestPassword string
}

func (o *ZKOptions) validate() error {
	if len(o.Servers) == 0 {
		return errors.New("coord: ZKOptions.Servers is empty")
	}
	if o.Chroot == "/" {
		o.Chroot = ""
	}
	if o.Chroot != "" {
		if err := ValidatePath(o.Chroot); err != nil {
			return fmt.Errorf("coord: ZKOptions.Chroot: %w", err)
		}
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultZKSessionTimeout
	}
	if o.SessionTimeout < 0 {
		return fmt.Errorf("coord: ZKOptions.SessionTimeout %v is negative", o.SessionTimeout)
	}
	if (o.DigestUser == "") != (o.DigestPassword == "") {
		return errors.New("coord: ZooKeeper digest credentials need both a user and a password")
	}
	if strings.ContainsAny(o.DigestUser, ":\n") {
		return errors.New("coord: a ZooKeeper digest user may not contain ':' or a newline")
	}
	return nil
}

// acl is the ACL of every node the options create.
func (o *ZKOptions) acl() []zk.ACL {
	if o.DigestUser == "" {
		return zk.WorldACL(zk.PermAll)
	}
	return zk.DigestACL(zk.PermAll, o.DigestUser, o.DigestPassword)
}

// ParseZKConnect splits a ZooKeeper connect string, "host:port,host:port/chroot",
// into server addresses and a chroot ("" when absent or "/"). A host without a port
// gets 2181; IPv6 hosts are written in brackets ("[::1]:2181").
func ParseZKConnect(s string) (servers []string, chroot string, err error) {
	s = strings.TrimSpace(s)
	hosts := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		hosts, chroot = s[:i], s[i:]
	}
	if chroot == "/" {
		chroot = ""
	}
	if chroot != "" {
		if err := ValidatePath(chroot); err != nil {
			return nil, "", fmt.Errorf("coord: connect string %q: chroot: %w", s, err)
		}
	}
	for h := range strings.SplitSeq(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, "", fmt.Errorf("coord: connect string %q: empty server", s)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// Only a missing port is forgivable.
			var retryErr error
			host, port, retryErr = net.SplitHostPort(h + ":" + defaultZKPort)
			if retryErr != nil {
				return nil, "", fmt.Errorf("coord: connect string %q: server %q: %w", s, h, err)
			}
		}
		if host == "" {
			return nil, "", fmt.Errorf("coord: connect string %q: server %q has no host", s, h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, "", fmt.Errorf("coord: connect string %q: server %q: bad port", s, h)
		}
		servers = append(servers, net.JoinHostPort(host, port))
	}
	return servers, chroot, nil
}

// ZK is a Coordinator backed by a ZooKeeper ensemble through go-zookeeper.
//
// Session expiry: when the ensemble expires the session (this handle was cut off
// for longer than the session timeout), the client learns it on reconnecting. The
// handle then reports StateExpired, every pending watch receives
// EventSession/StateExpired, and in-flight requests fail with ErrSessionExpired; the
// client immediately opens a new session, and the handle reports StateConnected with
// a new SessionID. Nothing is re-created for the owner: after that StateConnected it
// must re-create its ephemerals and re-read (and re-watch) what it depends on. A
// call made between the two either fails (ErrSessionExpired, ErrConnectionLoss) or
// runs in the new session.
//
// The client notices expiry only when it reaches the ensemble again, so while it is
// cut off it reports StateDisconnected, not StateExpired, even after the session
// timeout has passed. An owner that must not act on a possibly dead session (a
// partition leader acknowledging writes) treats StateDisconnected lasting longer
// than the session timeout as expiry.
//
// Goroutines: the go-zookeeper client runs its own (connection loop, send and receive
// loops); this handle adds one that waits for the client's event channel to close,
// the session feed's, and one per call whose ctx can be cancelled. Close waits for
// all of them. Watches cost none (zk_watch.go).
type ZK struct {
	conn    *zk.Conn
	chroot  string
	acl     []zk.ACL      // of every node this handle creates
	feed    *sessionFeed  // owned: started by DialZK, stopped by Close
	libDone chan struct{} // closed when the client's event channel closes: its goroutines are done

	mu        sync.Mutex     // guards state, closed, firstSess and the wg.Add/Wait handshake
	state     SessionState   // 0 until the first session
	closed    bool           // Close was called
	firstSess chan struct{}  // closed at the first session, then set to nil
	wg        sync.WaitGroup // ctx-bound calls; Add only under mu while !closed

	wmu     sync.Mutex                // guards watches; never held while a WatchFunc runs
	watches map[zkWatchKey][]*zkWatch // registered watches by server path and kind
}

var _ Coordinator = (*ZK)(nil)

// DialZK connects to ZooKeeper and returns once the handle has a session (or ctx is
// done, or the options are invalid), and the chroot exists. While ctx allows, an
// unreachable ensemble is retried.
func DialZK(ctx context.Context, opts ZKOptions) (*ZK, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	z := &ZK{
		chroot:    opts.Chroot,
		acl:       opts.acl(),
		feed:      newSessionFeed(),
		libDone:   make(chan struct{}),
		firstSess: make(chan struct{}),
	}
	var logger zk.Logger = discardLogger{}
	if opts.Logger != nil {
		logger = opts.Logger
	}
	conn, events, err := zk.Connect(opts.Servers, opts.SessionTimeout,
		zk.WithLogger(logger),
		zk.WithLogInfo(opts.Logger != nil),
		zk.WithEventCallback(z.onEvent),
	)
	if err != nil {
		z.feed.close()
		return nil, fmt.Errorf("coord: dial zookeeper: %w", err)
	}
	z.conn = conn
	// The client's event channel drops what nobody reads, and onEvent already sees
	// every event; the channel only tells when the client is done.
	go func() {
		for range events {
		}
		close(z.libDone)
	}()

	z.mu.Lock()
	first := z.firstSess
	z.mu.Unlock()
	if first != nil {
		select {
		case <-first:
		case <-ctx.Done():
			_ = z.Close()
			return nil, fmt.Errorf("coord: dial zookeeper %v: %w (%w)", opts.Servers, ErrConnectionLoss, ctx.Err())
		}
	}
	if opts.DigestUser != "" {
		// The client sends the credentials again at every later session
		// before any queued request, so nothing runs unauthenticated.
		err := z.call(ctx, func() error {
			return z.conn.AddAuth("digest", []byte(opts.DigestUser+":"+opts.DigestPassword))
		})
		if err != nil {
			_ = z.Close()
			return nil, fmt.Errorf("coord: zookeeper digest authentication: %w", err)
		}
	}
	if z.chroot != "" {
		if err := z.ensureChroot(ctx); err != nil {
			_ = z.Close()
			return nil, err
		}
	}
	return z, nil
}

// ensureChroot creates the chroot and its ancestors, outside the chroot.
func (z *ZK) ensureChroot(ctx context.Context) error {
	for i := 1; i <= len(z.chroot); i++ {
		if i < len(z.chroot) && z.chroot[i] != '/' {
			continue
		}
		p := z.chroot[:i]
		err := z.call(ctx, func() error {
			_, err := z.conn.Create(p, nil, 0, z.acl)
			return err
		})
		if err != nil && !errors.Is(err, ErrNodeExists) {
			return fmt.Errorf("coord: create chroot %s: %w", p, err)
		}
	}
	return nil
}

// onEvent receives every client event, synchronously on the client's goroutines, so
// it only records the state and queues it for SessionEvents.
func (z *ZK) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		z.fireNodeEvent(ev)
		return
	}
	if ev.State == zk.StateExpired {
		defer z.fireAll(StateExpired) // after mu is released
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return
	}
	var next SessionState
	switch ev.State {
	case zk.StateHasSession:
		next = StateConnected
		if z.firstSess != nil {
			close(z.firstSess)
			z.firstSess = nil
		}
	case zk.StateDisconnected:
		// Only a lost connection of a live session is news; the client also
		// passes through this state between failed attempts and after expiry.
		if z.state != StateConnected {
			return
		}
		next = StateDisconnected
	case zk.StateExpired:
		next = StateExpired
	default:
		return // Connecting, Connected (TCP only), auth states
	}
	if next == z.state {
		return
	}
	z.state = next
	z.feed.push(next)
}

// goFunc runs f on a goroutine that Close waits for. It reports false, without
// running f, once the handle is closed.
func (z *ZK) goFunc(f func()) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return false
	}
	z.wg.Add(1)
	go func() {
		defer z.wg.Done()
		f()
	}()
	return true
}

func (z *ZK) isClosed() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.closed
}

// call runs one client request, honouring ctx, and maps its error. The client's
// calls do not take a context; when ctx can end, the call runs on its own goroutine
// and is abandoned (it still ends: the client answers every request, with an error
// if the connection goes) when ctx ends first.
func (z *ZK) call(ctx context.Context, f func() error) error {
	if z.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return z.mapErr(f())
	}
	done := make(chan error, 1)
	if !z.goFunc(func() { done <- f() }) {
		return ErrClosed
	}
	select {
	case err := <-done:
		return z.mapErr(err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapErr turns a client error into one of the package's sentinels.
func (z *ZK) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return ErrNoNode
	case errors.Is(err, zk.ErrNodeExists):
		return ErrNodeExists
	case errors.Is(err, zk.ErrBadVersion):
		return ErrBadVersion
	case errors.Is(err, zk.ErrNotEmpty):
		return ErrNotEmpty
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		return ErrNoChildrenForEphemerals
	case errors.Is(err, zk.ErrInvalidPath):
		return ErrInvalidPath
	case errors.Is(err, zk.ErrNoAuth):
		return ErrNoAuth
	case errors.Is(err, zk.ErrSessionExpired):
		return ErrSessionExpired
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrClosing),
		errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrSessionMoved):
		if z.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("%w (%w)", ErrConnectionLoss, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		// A write to a broken connection surfaces as the socket's error.
		return fmt.Errorf("%w (%w)", ErrConnectionLoss, err)
	}
	return err
}

// full maps a caller's path to the server's.
func (z *ZK) full(p string) string {
	if z.chroot == "" {
		return p
	}
	if p == "/" {
		return z.chroot
	}
	return z.chroot + p
}

// rel maps a server path back to the caller's.
func (z *ZK) rel(p string) string {
	if z.chroot == "" {
		return p
	}
	if p == z.chroot {
		return "/"
	}
	return strings.TrimPrefix(p, z.chroot)
}

func statFromZK(s *zk.Stat) Stat {
	if s == nil {
		return Stat{}
	}
	return Stat{
		Version:        s.Version,
		CVersion:       s.Cversion,
		NumChildren:    s.NumChildren,
		DataLength:     s.DataLength,
		EphemeralOwner: s.EphemeralOwner,
		Ctime:          time.UnixMilli(s.Ctime),
		Mtime:          time.UnixMilli(s.Mtime),
	}
}

func zkCreateFlags(f CreateFlags) int32 {
	var out int32
	if f&Ephemeral != 0 {
		out |= zk.FlagEphemeral
	}
	if f&Sequential != 0 {
		out |= zk.FlagSequence
	}
	return out
}

// Create implements Coordinator.
func (z *ZK) Create(ctx context.Context, path string, data []byte, flags CreateFlags) (string, error) {
	op := CreateOp(path, data, flags)
	if err := op.validate(); err != nil {
		return "", opError("create", path, err)
	}
	var created string
	err := z.call(ctx, func() error {
		var err error
		created, err = z.conn.Create(z.full(path), data, zkCreateFlags(flags), z.acl)
		return err
	})
	if errors.Is(err, ErrNoNode) {
		err = ErrNoParent // the only node a create can miss is the parent
	}
	if err != nil {
		return "", opError("create", path, err)
	}
	return z.rel(created), nil
}

// Get implements Coordinator.
func (z *ZK) Get(ctx context.Context, path string) ([]byte, Stat, error) {
	data, st, err := z.get(ctx, path, nil)
	return data, st, err
}

// GetW implements Coordinator.
func (z *ZK) GetW(ctx context.Context, path string, w WatchFunc) ([]byte, Stat, error) {
	return z.get(ctx, path, w)
}

func (z *ZK) get(ctx context.Context, path string, watch WatchFunc) ([]byte, Stat, error) {
	if err := ValidatePath(path); err != nil {
		return nil, Stat{}, opError("get", path, err)
	}
	var (
		data []byte
		st   *zk.Stat
		reg  *zkWatch
	)
	if watch != nil {
		reg = z.addWatch(path, watchData, watch)
	}
	err := z.call(ctx, func() error {
		var err error
		if watch != nil {
			data, st, _, err = z.conn.GetW(z.full(path))
		} else {
			data, st, err = z.conn.Get(z.full(path))
		}
		return err
	})
	if err != nil {
		if reg != nil {
			z.dropWatch(reg)
		}
		return nil, Stat{}, opError("get", path, err)
	}
	return data, statFromZK(st), nil
}

// Exists implements Coordinator.
func (z *ZK) Exists(ctx context.Context, path string) (bool, Stat, error) {
	ok, st, err := z.exists(ctx, path, nil)
	return ok, st, err
}

// ExistsW implements Coordinator.
func (z *ZK) ExistsW(ctx context.Context, path string, w WatchFunc) (bool, Stat, error) {
	return z.exists(ctx, path, w)
}

func (z *ZK) exists(ctx context.Context, path string, watch WatchFunc) (bool, Stat, error) {
	if err := ValidatePath(path); err != nil {
		return false, Stat{}, opError("exists", path, err)
	}
	var (
		ok  bool
		st  *zk.Stat
		reg *zkWatch
	)
	if watch != nil {
		reg = z.addWatch(path, watchExist, watch)
	}
	err := z.call(ctx, func() error {
		var err error
		if watch != nil {
			ok, st, _, err = z.conn.ExistsW(z.full(path))
		} else {
			ok, st, err = z.conn.Exists(z.full(path))
		}
		return err
	})
	if err != nil {
		if reg != nil {
			z.dropWatch(reg)
		}
		return false, Stat{}, opError("exists", path, err)
	}
	if !ok {
		return false, Stat{}, nil
	}
	return true, statFromZK(st), nil
}

// Children implements Coordinator.
func (z *ZK) Children(ctx context.Context, path string) ([]string, Stat, error) {
	names, st, err := z.children(ctx, path, nil)
	return names, st, err
}

// ChildrenW implements Coordinator.
func (z *ZK) ChildrenW(ctx context.Context, path string, w WatchFunc) ([]string, Stat, error) {
	return z.children(ctx, path, w)
}

func (z *ZK) children(ctx context.Context, path string, watch WatchFunc) ([]string, Stat, error) {
	if err := ValidatePath(path); err != nil {
		return nil, Stat{}, opError("children", path, err)
	}
	var (
		names []string
		st    *zk.Stat
		reg   *zkWatch
	)
	if watch != nil {
		reg = z.addWatch(path, watchChild, watch)
	}
	err := z.call(ctx, func() error {
		var err error
		if watch != nil {
			names, st, _, err = z.conn.ChildrenW(z.full(path))
		} else {
			names, st, err = z.conn.Children(z.full(path))
		}
		return err
	})
	if err != nil {
		if reg != nil {
			z.dropWatch(reg)
		}
		return nil, Stat{}, opError("children", path, err)
	}
	slices.Sort(names)
	return names, statFromZK(st), nil
}

// Set implements Coordinator.
func (z *ZK) Set(ctx context.Context, path string, data []byte, version int32) (Stat, error) {
	if err := SetOp(path, data, version).validate(); err != nil {
		return Stat{}, opError("set", path, err)
	}
	var st *zk.Stat
	err := z.call(ctx, func() error {
		var err error
		st, err = z.conn.Set(z.full(path), data, version)
		return err
	})
	if err != nil {
		return Stat{}, opError("set", path, err)
	}
	return statFromZK(st), nil
}

// Delete implements Coordinator.
func (z *ZK) Delete(ctx context.Context, path string, version int32) error {
	if err := DeleteOp(path, version).validate(); err != nil {
		return opError("delete", path, err)
	}
	err := z.call(ctx, func() error { return z.conn.Delete(z.full(path), version) })
	if err != nil {
		return opError("delete", path, err)
	}
	return nil
}

// Sync implements Coordinator: a sync request on the handle's root. The
// client reads answers and notifications off the connection in order and
// calls the WatchFuncs of a notification (onEvent) before it reads on, so
// once the answer to the sync arrives every earlier notification's
// functions have returned.
func (z *ZK) Sync(ctx context.Context) error {
	err := z.call(ctx, func() error {
		_, err := z.conn.Sync(z.full("/"))
		return err
	})
	if err != nil {
		return opError("sync", "/", err)
	}
	return nil
}

// Multi implements Coordinator.
func (z *ZK) Multi(ctx context.Context, ops ...Op) ([]OpResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	reqs := make([]any, len(ops))
	for i, op := range ops {
		if err := op.validate(); err != nil {
			return nil, &MultiError{Index: i, Op: op, Err: opError(op.kind.String(), op.path, err)}
		}
		full := z.full(op.path)
		switch op.kind {
		case opCreate:
			reqs[i] = &zk.CreateRequest{Path: full, Data: op.data, Acl: z.acl, Flags: zkCreateFlags(op.flags)}
		case opSet:
			reqs[i] = &zk.SetDataRequest{Path: full, Data: op.data, Version: op.version}
		case opDelete:
			reqs[i] = &zk.DeleteRequest{Path: full, Version: op.version}
		case opCheck:
			reqs[i] = &zk.CheckVersionRequest{Path: full, Version: op.version}
		}
	}
	var resp []zk.MultiResponse
	err := z.call(ctx, func() error {
		var err error
		resp, err = z.conn.Multi(reqs...)
		return err
	})
	if err != nil {
		if !isNodeError(err) {
			return nil, fmt.Errorf("multi: %w", err)
		}
		// The first op with an error is the one that failed; the server marks
		// the ops around it as rolled back.
		for i, r := range resp {
			if r.Error != nil && i < len(ops) {
				opErr := z.mapErr(r.Error)
				if ops[i].kind == opCreate && errors.Is(opErr, ErrNoNode) {
					opErr = ErrNoParent
				}
				return nil, &MultiError{Index: i, Op: ops[i], Err: opError(ops[i].kind.String(), ops[i].path, opErr)}
			}
		}
		return nil, &MultiError{Index: -1, Err: err}
	}
	if len(resp) != len(ops) {
		return nil, fmt.Errorf("multi: %d results for %d ops", len(resp), len(ops))
	}
	out := make([]OpResult, len(ops))
	for i, op := range ops {
		out[i] = OpResult{Path: op.path}
		switch op.kind {
		case opCreate:
			out[i].Path = z.rel(resp[i].String)
		case opSet:
			out[i].Stat = statFromZK(resp[i].Stat)
		}
	}
	return out, nil
}

// isNodeError reports whether err is about a node, as opposed to the session or
// the connection.
func isNodeError(err error) bool {
	for _, s := range []error{ErrNoNode, ErrNodeExists, ErrBadVersion, ErrNotEmpty, ErrNoChildrenForEphemerals, ErrInvalidPath} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// SessionID implements Coordinator.
func (z *ZK) SessionID() int64 {
	if z.isClosed() {
		return 0
	}
	return z.conn.SessionID()
}

// State implements Coordinator.
func (z *ZK) State() SessionState {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return StateClosed
	}
	return z.state
}

// SessionEvents implements Coordinator.
func (z *ZK) SessionEvents() <-chan SessionState { return z.feed.out }

// Close implements Coordinator.
func (z *ZK) Close() error {
	z.mu.Lock()
	if z.closed {
		z.mu.Unlock()
		<-z.libDone
		return nil
	}
	z.closed = true
	z.mu.Unlock()

	// 1. Close the client: it asks the server to close the session, which deletes
	// our ephemerals at once, then stops its goroutines.
	z.conn.Close()
	// 2. Wait for the client to finish: by then it has answered every request
	// and given every pending watch its last event.
	<-z.libDone
	// 3. Wait for our goroutines, which end once the client has answered.
	z.wg.Wait()
	// 4. End the watches the client did not (its last events may have
	// reached onEvent after closed was set).
	z.fireAll(StateClosed)
	// 5. Stop the session feed, closing SessionEvents.
	z.feed.close()
	return nil
}

// discardLogger silences the client when no Logger is given.
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
