package coord

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// MemOptions configure a MemStore.
type MemOptions struct {
	// Path is the JSON file that holds a snapshot of the persistent nodes,
	// beside its journal (Path + ".journal", see mem_journal.go). When set,
	// NewMemStore loads the tree from them (a missing file is an empty tree;
	// its directory is created) and every mutation is in the journal, fsynced,
	// before it returns, so a restarted process finds its topics. Ephemeral
	// nodes are never written. Default "": nothing is persisted.
	Path string
	// CompactBytes is the journal size past which, once it is also larger
	// than the snapshot, the snapshot is rewritten and the journal emptied.
	// Default 1 MiB.
	CompactBytes int64
}

// MemStore is an in-process coordination tree shared by any number of sessions. It is
// what `sluice dev` and unit tests use in place of ZooKeeper: same semantics, one
// process.
//
// Locking: one mutex guards the whole tree, every session's state and every
// watch; each operation holds it from start to end, which makes every operation
// (and every Multi) atomic and totally ordered. Persisting happens under the same
// mutex, so the file always holds a prefix of the history. Watch events and
// session-state pushes are queued under it and delivered after it is released; the
// only lock taken inside it is a session feed's own short one.
type MemStore struct {
	mu       sync.Mutex             // guards every field below
	nodes    map[string]*memNode    // by full path; "/" always present
	sessions map[int64]*MemSession  // live sessions by current ID
	lastID   int64                  // last session ID handed out
	dataW    map[string][]*memWatch // GetW and ExistsW watches by path
	childW   map[string][]*memWatch // ChildrenW watches by path
	disk     *memDisk               // the files persisted to; nil for none
	writeErr error                  // sticky: persisting failed, mutations are refused
	closed   bool
	// Watch deliveries: each batch of firings is numbered under mu and
	// called after it is released; Sync waits for the numbers it saw.
	deliveries uint64              // batches numbered so far
	inflight   map[uint64]struct{} // numbered batches whose WatchFuncs are being called
	delivered  sync.Cond           // on mu: broadcast as each batch ends
}

// NewMemStore returns a store, loading opts.Path when it is set. It fails if the file
// exists but cannot be read or parsed, or its directory cannot be created.
func NewMemStore(opts MemOptions) (*MemStore, error) {
	m := &MemStore{
		sessions: make(map[int64]*MemSession),
		// Session IDs start from the clock so that IDs from an earlier run of the
		// same store file are not handed out again.
		lastID:   time.Now().UnixMilli() << 16,
		dataW:    make(map[string][]*memWatch),
		childW:   make(map[string][]*memWatch),
		inflight: make(map[uint64]struct{}),
	}
	m.delivered.L = &m.mu
	if opts.Path == "" {
		m.nodes = map[string]*memNode{"/": newMemNode(nil, 0, time.UnixMilli(0))}
		return m, nil
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o755); err != nil {
		return nil, fmt.Errorf("coord: store directory: %w", err)
	}
	disk, nodes, err := loadTree(opts.Path)
	if err != nil {
		return nil, err
	}
	m.disk, m.nodes = disk, nodes
	disk.compactBytes = opts.CompactBytes
	if disk.compactBytes <= 0 {
		disk.compactBytes = defaultCompactBytes
	}
	return m, nil
}

// Session opens a new session on the store. Its first state is StateConnected. On a
// closed store the session comes back already closed.
func (m *MemStore) Session() *MemSession {
	s := &MemSession{store: m, feed: newSessionFeed(), ephemerals: make(map[string]struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		s.state = StateClosed
		s.feed.close()
		return s
	}
	m.startSessionLocked(s)
	return s
}

// Err returns the error that made the store read-only, or nil. A store becomes
// read-only when writing its file fails; reads keep working.
func (m *MemStore) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writeErr
}

// Close closes every session (deleting their ephemerals) and makes Session return
// closed sessions. It returns the error that made the store read-only, if any.
func (m *MemStore) Close() error {
	m.mu.Lock()
	m.closed = true
	live := make([]*MemSession, 0, len(m.sessions))
	for _, s := range m.sessions {
		live = append(live, s)
	}
	m.mu.Unlock()
	for _, s := range live {
		_ = s.Close() // a session's Close never fails
	}
	return m.Err()
}

// startSessionLocked gives s a fresh ID and registers it.
func (m *MemStore) startSessionLocked(s *MemSession) {
	m.lastID++
	s.id = m.lastID
	s.state = StateConnected
	s.ephemerals = make(map[string]struct{})
	m.sessions[s.id] = s
	s.feed.push(StateConnected)
}

// endSessionLocked ends s's current session: its watches end with EventSession
// carrying why, and its ephemerals are deleted (firing other sessions' watches). It
// returns the watch events to deliver once the lock is released.
func (m *MemStore) endSessionLocked(s *MemSession, why SessionState) []memFiring {
	fired := m.dropWatchesLocked(s, why)
	tx := memTx{m: m}
	for _, p := range slices.Sorted(maps.Keys(s.ephemerals)) {
		// Ephemerals have no children, so this cannot fail.
		_, _ = tx.apply(s, DeleteOp(p, AnyVersion))
	}
	if tx.persist && m.writeErr == nil {
		// The ephemerals are gone whatever the disk says; a failed write only
		// turns the store read-only.
		if err := m.persistLocked(tx.events); err != nil {
			m.writeErr = err
		}
	}
	fired = append(fired, m.firingsLocked(tx.events)...)
	delete(m.sessions, s.id)
	return fired
}

// mutate applies ops as one atomic transaction for session s and persists the
// result. multi selects the error shape: a *MultiError naming the failing op, or the
// single op's error.
func (m *MemStore) mutate(ctx context.Context, s *MemSession, name string, ops []Op, multi bool) ([]OpResult, error) {
	fail := func(i int, err error) error {
		if multi {
			return &MultiError{Index: i, Op: ops[i], Err: opError(ops[i].kind.String(), ops[i].path, err)}
		}
		return opError(name, ops[i].path, err)
	}
	for i, op := range ops {
		if err := op.validate(); err != nil {
			return nil, fail(i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	m.mu.Lock()
	if err := s.usableLocked(); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	if m.writeErr != nil {
		err := m.writeErr
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: coordination store is read-only after a failed write: %w", api.ErrStorage, err)
	}
	tx := memTx{m: m}
	results := make([]OpResult, len(ops))
	for i, op := range ops {
		r, err := tx.apply(s, op)
		if err != nil {
			tx.rollback()
			m.mu.Unlock()
			return nil, fail(i, err)
		}
		results[i] = r
	}
	if tx.persist {
		if err := m.persistLocked(tx.events); err != nil {
			tx.rollback()
			m.writeErr = err
			m.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", api.ErrStorage, err)
		}
	}
	fired := m.firingsLocked(tx.events)
	n := m.beginDeliveryLocked(fired)
	m.mu.Unlock()
	m.deliver(n, fired)
	return results, nil
}

// read runs f under the lock after the common checks, for the read operations.
func (m *MemStore) read(ctx context.Context, s *MemSession, name, p string, f func() error) error {
	if err := ValidatePath(p); err != nil {
		return opError(name, p, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	if err := f(); err != nil {
		return opError(name, p, err)
	}
	return nil
}

// MemSession is one session on a MemStore. It implements Coordinator.
type MemSession struct {
	store *MemStore
	feed  *sessionFeed // owned: started by Session, stopped by Close

	// Guarded by store.mu.
	id         int64
	state      SessionState
	ephemerals map[string]struct{} // paths of the ephemerals this session owns
}

var _ Coordinator = (*MemSession)(nil)

// usableLocked fails with ErrClosed once the session is closed.
func (s *MemSession) usableLocked() error {
	if s.state == StateClosed {
		return ErrClosed
	}
	return nil
}

// Create implements Coordinator.
func (s *MemSession) Create(ctx context.Context, path string, data []byte, flags CreateFlags) (string, error) {
	res, err := s.store.mutate(ctx, s, "create", []Op{CreateOp(path, data, flags)}, false)
	if err != nil {
		return "", err
	}
	return res[0].Path, nil
}

// Get implements Coordinator.
func (s *MemSession) Get(ctx context.Context, path string) ([]byte, Stat, error) {
	data, st, err := s.get(ctx, path, nil)
	return data, st, err
}

// GetW implements Coordinator.
func (s *MemSession) GetW(ctx context.Context, path string, w WatchFunc) ([]byte, Stat, error) {
	return s.get(ctx, path, w)
}

func (s *MemSession) get(ctx context.Context, path string, watch WatchFunc) ([]byte, Stat, error) {
	var (
		data []byte
		st   Stat
	)
	err := s.store.read(ctx, s, "get", path, func() error {
		n := s.store.nodes[path]
		if n == nil {
			return ErrNoNode
		}
		data, st = slices.Clone(n.data), n.stat()
		if watch != nil {
			s.store.addWatchLocked(s.store.dataW, path, s, watch)
		}
		return nil
	})
	return data, st, err
}

// Exists implements Coordinator.
func (s *MemSession) Exists(ctx context.Context, path string) (bool, Stat, error) {
	ok, st, err := s.exists(ctx, path, nil)
	return ok, st, err
}

// ExistsW implements Coordinator.
func (s *MemSession) ExistsW(ctx context.Context, path string, w WatchFunc) (bool, Stat, error) {
	return s.exists(ctx, path, w)
}

func (s *MemSession) exists(ctx context.Context, path string, watch WatchFunc) (bool, Stat, error) {
	var (
		ok bool
		st Stat
	)
	err := s.store.read(ctx, s, "exists", path, func() error {
		if n := s.store.nodes[path]; n != nil {
			ok, st = true, n.stat()
		}
		if watch != nil {
			s.store.addWatchLocked(s.store.dataW, path, s, watch)
		}
		return nil
	})
	return ok, st, err
}

// Children implements Coordinator.
func (s *MemSession) Children(ctx context.Context, path string) ([]string, Stat, error) {
	names, st, err := s.children(ctx, path, nil)
	return names, st, err
}

// ChildrenW implements Coordinator.
func (s *MemSession) ChildrenW(ctx context.Context, path string, w WatchFunc) ([]string, Stat, error) {
	return s.children(ctx, path, w)
}

func (s *MemSession) children(ctx context.Context, path string, watch WatchFunc) ([]string, Stat, error) {
	var (
		names []string
		st    Stat
	)
	err := s.store.read(ctx, s, "children", path, func() error {
		n := s.store.nodes[path]
		if n == nil {
			return ErrNoNode
		}
		names, st = slices.Sorted(maps.Keys(n.children)), n.stat()
		if watch != nil {
			s.store.addWatchLocked(s.store.childW, path, s, watch)
		}
		return nil
	})
	return names, st, err
}

// Set implements Coordinator.
func (s *MemSession) Set(ctx context.Context, path string, data []byte, version int32) (Stat, error) {
	res, err := s.store.mutate(ctx, s, "set", []Op{SetOp(path, data, version)}, false)
	if err != nil {
		return Stat{}, err
	}
	return res[0].Stat, nil
}

// Delete implements Coordinator.
func (s *MemSession) Delete(ctx context.Context, path string, version int32) error {
	_, err := s.store.mutate(ctx, s, "delete", []Op{DeleteOp(path, version)}, false)
	return err
}

// Sync implements Coordinator. A change is applied under the store's lock
// and its watches are called just after; Sync waits until every batch of
// them numbered before it has been called.
func (s *MemSession) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := s.store
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	upTo := m.deliveries
	for m.deliveringLocked(upTo) {
		m.delivered.Wait()
	}
	return nil
}

// Multi implements Coordinator.
func (s *MemSession) Multi(ctx context.Context, ops ...Op) ([]OpResult, error) {
	return s.store.mutate(ctx, s, "multi", ops, true)
}

// SessionID implements Coordinator.
func (s *MemSession) SessionID() int64 {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	if s.state == StateClosed {
		return 0
	}
	return s.id
}

// State implements Coordinator.
func (s *MemSession) State() SessionState {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return s.state
}

// SessionEvents implements Coordinator.
func (s *MemSession) SessionEvents() <-chan SessionState { return s.feed.out }

// Expire ends the session as a ZooKeeper server does when a session times out: its
// ephemerals are deleted, its watches end with EventSession/StateExpired, and it
// reports StateExpired. Then, as the ZooKeeper handle does, it starts a new session
// (new SessionID) and reports StateConnected. On a closed session it does nothing.
func (s *MemSession) Expire() {
	m := s.store
	m.mu.Lock()
	if s.state == StateClosed {
		m.mu.Unlock()
		return
	}
	fired := m.endSessionLocked(s, StateExpired)
	s.state = StateExpired
	s.feed.push(StateExpired)
	m.startSessionLocked(s)
	n := m.beginDeliveryLocked(fired)
	m.mu.Unlock()
	m.deliver(n, fired)
}

// Close implements Coordinator.
func (s *MemSession) Close() error {
	m := s.store
	m.mu.Lock()
	if s.state == StateClosed {
		m.mu.Unlock()
		s.feed.close()
		return nil
	}
	fired := m.endSessionLocked(s, StateClosed)
	s.state = StateClosed
	n := m.beginDeliveryLocked(fired)
	m.mu.Unlock()
	m.deliver(n, fired)
	s.feed.close()
	return nil
}
