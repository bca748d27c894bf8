// Package coord is the cluster's coordination service: a tree of versioned nodes with
// ephemeral and sequential nodes, one-shot watches and atomic multi-operations, the
// model ZooKeeper offers and the one Kafka's controller, broker registry and
// partition-state machine are built on.
//
// Two implementations satisfy Coordinator and pass one conformance suite:
//   - ZK (DialZK) talks to a ZooKeeper ensemble; it is what `sluice broker` uses.
//   - MemStore.Session serves sessions on an in-process tree, optionally persisted to
//     a JSON file; it is what `sluice dev` and unit tests use.
//
// A Coordinator is one client handle with one session at a time. When the session
// expires, the handle reports StateExpired, every pending watch ends with a session
// event, the session's ephemeral nodes are gone, and the handle opens a new session
// on its own (new SessionID, then StateConnected). The owner reacts to StateExpired by
// stopping whatever the old session entitled it to (a leader stops acknowledging, a
// controller stops commanding) and, at the StateConnected that follows, re-creating
// its ephemerals and re-reading (and re-watching) what it depends on.
package coord

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error a Coordinator returns wraps at most one of these (or a
// context error); compare with errors.Is.
var (
	// ErrNoNode: the node the operation names does not exist.
	ErrNoNode = errors.New("coord: no such node")
	// ErrNoParent: Create (or a create op in Multi) named a node whose parent does
	// not exist. CreateAll creates missing parents.
	ErrNoParent = errors.New("coord: parent node does not exist")
	// ErrNodeExists: Create named a node that exists.
	ErrNodeExists = errors.New("coord: node exists")
	// ErrBadVersion: the version given to Set, Delete or a Check op is not the node's
	// current version.
	ErrBadVersion = errors.New("coord: version mismatch")
	// ErrNotEmpty: Delete named a node that has children.
	ErrNotEmpty = errors.New("coord: node has children")
	// ErrNoChildrenForEphemerals: Create named a node whose parent is ephemeral.
	ErrNoChildrenForEphemerals = errors.New("coord: ephemeral nodes cannot have children")
	// ErrInvalidPath: the path is not absolute, has an empty, "." or ".." component,
	// ends in '/', contains control characters, or names the root where the root is
	// not allowed (Delete, Create).
	ErrInvalidPath = errors.New("coord: invalid path")
	// ErrDataTooLarge: node data is longer than MaxDataSize.
	ErrDataTooLarge = errors.New("coord: node data too large")
	// ErrSessionExpired: the session ended while the operation was in flight; the
	// handle is opening a new one. A write that fails with it was not applied.
	ErrSessionExpired = errors.New("coord: session expired")
	// ErrConnectionLoss: the connection dropped before the answer arrived. A write
	// that fails with it may or may not have been applied: read back before retrying
	// anything that is not idempotent.
	ErrConnectionLoss = errors.New("coord: connection lost")
	// ErrClosed: the handle was closed.
	ErrClosed = errors.New("coord: closed")
	// ErrNoAuth: the node's ACL does not let this session do the operation
	// (ZooKeeper with digest ACLs, reached without the right credentials).
	ErrNoAuth = errors.New("coord: not authorized by the node's ACL")
)

// MaxDataSize is the largest node data either implementation accepts. ZooKeeper's
// own limit (jute.maxbuffer, 1 MiB by default) covers the whole request, so the
// data limit sits a little below it; the in-process store enforces the same number
// so that `sluice dev` refuses what production would refuse.
const MaxDataSize = 1_000_000

// AnyVersion, given as the version to Set, Delete or CheckOp, matches every version.
const AnyVersion int32 = -1

// CreateFlags select the kind of node Create makes. The zero value is a persistent,
// plainly named node.
type CreateFlags int

const (
	// Ephemeral nodes belong to the creating session and are deleted when it closes
	// or expires. They cannot have children.
	Ephemeral CreateFlags = 1 << iota
	// Sequential nodes get a suffix: the parent's child-version counter formatted as
	// ten zero-padded digits ("/a/n-" becomes "/a/n-0000000042"). Suffixes under one
	// parent only grow, so the names sort in creation order. The path given to a
	// sequential create may end in '/' (the name is then the suffix alone).
	Sequential
)

// Stat is a node's metadata.
type Stat struct {
	// Version counts Sets on the node's data: 0 after Create, +1 per Set.
	Version int32
	// CVersion counts changes to the node's children: +1 per child created or deleted.
	CVersion int32
	// NumChildren is the current number of children.
	NumChildren int32
	// DataLength is len(data).
	DataLength int32
	// EphemeralOwner is the ID of the session that owns an ephemeral node; 0 for a
	// persistent node.
	EphemeralOwner int64
	// Ctime and Mtime are when the node was created and its data last set, to the
	// millisecond.
	Ctime, Mtime time.Time
}

// EventType says what ended a watch.
type EventType int

const (
	// EventNodeCreated: the watched (absent) node was created. Only ExistsW on an
	// absent node gets it.
	EventNodeCreated EventType = iota + 1
	// EventNodeDeleted: the watched node was deleted. Any watch on it gets it.
	EventNodeDeleted
	// EventNodeDataChanged: the watched node's data was set. GetW and ExistsW on a
	// present node get it.
	EventNodeDataChanged
	// EventNodeChildrenChanged: a child of the watched node was created or deleted.
	// Only ChildrenW gets it; a child's data changing does not fire it.
	EventNodeChildrenChanged
	// EventSession: the watch ended without a node change because its session did;
	// Event.State is StateExpired or StateClosed. Re-read (and re-watch) after the
	// handle reports StateConnected again.
	EventSession
)

func (t EventType) String() string {
	switch t {
	case EventNodeCreated:
		return "NodeCreated"
	case EventNodeDeleted:
		return "NodeDeleted"
	case EventNodeDataChanged:
		return "NodeDataChanged"
	case EventNodeChildrenChanged:
		return "NodeChildrenChanged"
	case EventSession:
		return "Session"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is what a watch delivers, exactly once.
type Event struct {
	Type EventType
	// Path is the watched path, as the caller named it.
	Path string
	// State is set for EventSession: StateExpired or StateClosed.
	State SessionState
}

// A WatchFunc takes a watch's one event. A watch costs no goroutine: the
// function is called once, on a goroutine of the coordinator's (ZooKeeper:
// the client's receive loop; in-process: the writer whose change fired it,
// after the store's lock is released), so it must return at once and must
// not call the coordinator. Record the event, or hand the work to a
// goroutine of the watcher's own (WatchChan does).
type WatchFunc func(Event)

// WatchChan returns a WatchFunc that delivers its event on the returned
// channel (capacity one, closed after the event), for watchers that select.
func WatchChan() (WatchFunc, <-chan Event) {
	ch := make(chan Event, 1)
	return func(ev Event) {
		ch <- ev
		close(ch)
	}, ch
}

func (e Event) String() string {
	if e.Type == EventSession {
		return fmt.Sprintf("%s(%s) %s", e.Type, e.State, e.Path)
	}
	return fmt.Sprintf("%s %s", e.Type, e.Path)
}

// SessionState is the state of a handle's session.
type SessionState int

const (
	// StateConnected: the handle has a live session and talks to the service.
	StateConnected SessionState = iota + 1
	// StateDisconnected: the connection dropped; the session (with its ephemerals
	// and watches) lives on at the service until its timeout, and the handle is
	// reconnecting. Operations fail with ErrConnectionLoss meanwhile. Next comes
	// StateConnected (same session) or StateExpired.
	StateDisconnected
	// StateExpired: the session ended without Close: its ephemerals are gone and its
	// watches ended with EventSession. The handle opens a new session by itself and
	// reports StateConnected when it has one.
	StateExpired
	// StateClosed: Close was called. Never sent on SessionEvents (the channel is
	// closed instead); State returns it and watches end with it.
	StateClosed
)

func (s SessionState) String() string {
	switch s {
	case StateConnected:
		return "Connected"
	case StateDisconnected:
		return "Disconnected"
	case StateExpired:
		return "Expired"
	case StateClosed:
		return "Closed"
	}
	return fmt.Sprintf("SessionState(%d)", int(s))
}

// Coordinator is a client handle on the coordination tree.
//
// Paths are absolute and '/'-separated ("/brokers/ids/1"); "/" is the root, which
// always exists. A path is rejected with ErrInvalidPath before anything is sent if a
// component is empty, "." or "..", it ends in '/' (except a sequential create), or it
// contains control characters.
//
// Every method is safe for concurrent use. Methods that talk to the service block
// until it answers, ctx is done (the error then wraps ctx.Err(), and a write's
// outcome is unknown, as with ErrConnectionLoss), or the handle is closed
// (ErrClosed). Any of them may also fail with ErrConnectionLoss or ErrSessionExpired.
//
// Calls made at once from several goroutines are pipelined: a ZooKeeper handle
// sends each request as soon as it is made, on its one connection, without
// waiting for the answers before it, and the service answers them in order. So
// n independent calls made together cost about one round trip plus the
// service's work, where n calls one after another cost n round trips; Pipeline
// runs a batch of them that way.
//
// A watch (GetW, ExistsW, ChildrenW) calls its WatchFunc exactly once, with one
// Event. It is set only when the call succeeds; a failed call never calls it. Watches survive a disconnection within one session
// (a change made meanwhile fires on reconnect); they end with EventSession when the
// session expires or the handle is closed.
type Coordinator interface {
	// Create makes a node with the given data and returns its actual path (which
	// differs from path for Sequential). Fails with ErrNodeExists, ErrNoParent,
	// ErrNoChildrenForEphemerals, ErrDataTooLarge or ErrInvalidPath.
	Create(ctx context.Context, path string, data []byte, flags CreateFlags) (string, error)

	// Get returns a node's data and stat, or ErrNoNode.
	Get(ctx context.Context, path string) ([]byte, Stat, error)
	// GetW is Get plus a watch that fires EventNodeDataChanged or EventNodeDeleted.
	// No watch is set when the node does not exist (ErrNoNode).
	GetW(ctx context.Context, path string, w WatchFunc) ([]byte, Stat, error)

	// Exists reports whether a node exists and, if it does, its stat. A missing node
	// is not an error.
	Exists(ctx context.Context, path string) (bool, Stat, error)
	// ExistsW is Exists plus a watch: on a present node it fires
	// EventNodeDataChanged or EventNodeDeleted, on an absent one EventNodeCreated.
	ExistsW(ctx context.Context, path string, w WatchFunc) (bool, Stat, error)

	// Children returns the names (not paths) of a node's children, sorted, and the
	// node's stat; ErrNoNode if the node does not exist.
	Children(ctx context.Context, path string) ([]string, Stat, error)
	// ChildrenW is Children plus a watch that fires EventNodeChildrenChanged when a
	// child is created or deleted, or EventNodeDeleted when the node is.
	ChildrenW(ctx context.Context, path string, w WatchFunc) ([]string, Stat, error)

	// Set replaces a node's data if its version equals version (AnyVersion matches
	// all) and returns the new stat (Version one higher). Fails with ErrNoNode,
	// ErrBadVersion or ErrDataTooLarge.
	Set(ctx context.Context, path string, data []byte, version int32) (Stat, error)

	// Delete removes a node if its version equals version (AnyVersion matches all).
	// Fails with ErrNoNode, ErrBadVersion, ErrNotEmpty, or ErrInvalidPath for "/".
	Delete(ctx context.Context, path string, version int32) error

	// Sync returns once this handle is as current as the service was when Sync
	// was called: every change the service had applied by then (by any
	// session) has called the WatchFuncs of this handle's watches that it
	// fires, and reads made after Sync returns see it. A reader that keeps a
	// watched copy (cluster.View) so catches up with a write it knows of,
	// its own or another process's, without re-reading what did not change.
	// ZooKeeper: a sync request, which the server answers only after every
	// change committed before it, and after the notifications of those
	// changes on the same connection. Within one connection only: a watch the
	// client re-arms after a reconnect may fire after a Sync made at once;
	// after StateDisconnected, a reader that must not miss a change re-reads.
	Sync(ctx context.Context) error

	// Multi applies ops atomically, in order, each seeing the effect of the ones
	// before it: either all are applied or none is. On success it returns one
	// OpResult per op. When an op fails, the error is a *MultiError that names it
	// and wraps its sentinel (so errors.Is(err, ErrBadVersion) works); nothing was
	// applied. With no ops it succeeds and does nothing.
	Multi(ctx context.Context, ops ...Op) ([]OpResult, error)

	// SessionID is the current session's ID, the value EphemeralOwner holds for the
	// ephemerals this handle creates. It changes when a session expires and a new
	// one starts; it is 0 while the handle has no session.
	SessionID() int64

	// State is the session's current state.
	State() SessionState

	// SessionEvents returns the channel (the same one on every call) that reports
	// each change of State, in order, without dropping any: first StateConnected,
	// then any of StateDisconnected, StateExpired, StateConnected. Events queue in
	// memory until read; they are rare. The channel is closed by Close. Meant for
	// one reader, the handle's owner, which fans out what others need.
	SessionEvents() <-chan SessionState

	// Close ends the session: its ephemerals are deleted at once (for ZooKeeper:
	// if the handle is connected; otherwise the ensemble deletes them when the
	// session times out), its watches end with EventSession/StateClosed,
	// SessionEvents is closed, and every later call fails with ErrClosed. It waits
	// for the handle's goroutines to stop. Calling it again does nothing.
	Close() error
}

// opKind tells which operation an Op is.
type opKind int

const (
	opCreate opKind = iota + 1
	opSet
	opDelete
	opCheck
)

func (k opKind) String() string {
	switch k {
	case opCreate:
		return "create"
	case opSet:
		return "set"
	case opDelete:
		return "delete"
	case opCheck:
		return "check"
	}
	return "unknown"
}

// Op is one operation of a Multi. Build it with CreateOp, SetOp, DeleteOp or CheckOp.
type Op struct {
	kind    opKind
	path    string
	data    []byte
	flags   CreateFlags
	version int32
}

// CreateOp creates a node, like Create.
func CreateOp(path string, data []byte, flags CreateFlags) Op {
	return Op{kind: opCreate, path: path, data: data, flags: flags}
}

// SetOp sets a node's data if its version matches, like Set.
func SetOp(path string, data []byte, version int32) Op {
	return Op{kind: opSet, path: path, data: data, version: version}
}

// DeleteOp deletes a node if its version matches, like Delete.
func DeleteOp(path string, version int32) Op {
	return Op{kind: opDelete, path: path, version: version}
}

// CheckOp changes nothing; it fails the Multi with ErrNoNode if the node does not
// exist, or ErrBadVersion if its version is not version (AnyVersion matches all).
// It is how a write is made conditional on another node, such as the controller
// epoch.
func CheckOp(path string, version int32) Op {
	return Op{kind: opCheck, path: path, version: version}
}

// Path is the path the op names.
func (o Op) Path() string { return o.path }

func (o Op) String() string { return o.kind.String() + " " + o.path }

// validate checks an op's path and data before it is sent.
func (o Op) validate() error {
	switch o.kind {
	case opCreate:
		if err := validateCreatePath(o.path, o.flags); err != nil {
			return err
		}
	case opSet, opCheck:
		if err := ValidatePath(o.path); err != nil {
			return err
		}
	case opDelete:
		if err := validateDeletePath(o.path); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: op has no kind (build it with CreateOp, SetOp, DeleteOp or CheckOp)", ErrInvalidPath)
	}
	if len(o.data) > MaxDataSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrDataTooLarge, len(o.data), MaxDataSize)
	}
	return nil
}

// OpResult is the outcome of one op of a successful Multi.
type OpResult struct {
	// Path is the created node's actual path for a create op (it differs from the
	// op's path for Sequential); the op's path otherwise.
	Path string
	// Stat is the node's new stat for a set op; zero otherwise.
	Stat Stat
}

// MultiError reports the op that made a Multi fail. Nothing in the Multi was applied.
type MultiError struct {
	// Index is the failing op's position in the Multi's argument list, or -1 when
	// the service did not say which op failed.
	Index int
	// Op is the failing op (zero when Index is -1).
	Op Op
	// Err wraps the op's sentinel error.
	Err error
}

func (e *MultiError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("coord: multi: %v", e.Err)
	}
	return fmt.Sprintf("coord: multi op %d (%s): %v", e.Index, e.Op, e.Err)
}

func (e *MultiError) Unwrap() error { return e.Err }

// Logger receives diagnostic lines, such as the ZooKeeper client's connection log.
// *log.Logger satisfies it. A nil Logger discards them.
type Logger interface {
	Printf(format string, args ...any)
}

// opError wraps a sentinel with the operation and path it concerns.
func opError(op, path string, err error) error {
	return fmt.Errorf("%s %s: %w", op, path, err)
}
