package coord

import (
	"fmt"
	"slices"
	"time"
)

// memNode is one node of a MemStore's tree. Its fields are guarded by MemStore.mu.
type memNode struct {
	data     []byte
	version  int32
	cversion int32
	owner    int64 // session ID of an ephemeral's owner; 0 for a persistent node
	ctime    time.Time
	mtime    time.Time
	children map[string]struct{} // child names
}

func newMemNode(data []byte, owner int64, now time.Time) *memNode {
	return &memNode{data: data, owner: owner, ctime: now, mtime: now, children: make(map[string]struct{})}
}

func (n *memNode) stat() Stat {
	return Stat{
		Version:        n.version,
		CVersion:       n.cversion,
		NumChildren:    int32(len(n.children)),
		DataLength:     int32(len(n.data)),
		EphemeralOwner: n.owner,
		Ctime:          n.ctime,
		Mtime:          n.mtime,
	}
}

// memChange is one node change made by a transaction; it decides which watches fire.
type memChange struct {
	typ  EventType // NodeCreated, NodeDeleted, NodeDataChanged or NodeChildrenChanged
	path string
}

// memTx applies ops to the tree under MemStore.mu and can undo them all, which is
// how Multi is all-or-nothing and how a failed persist is taken back.
type memTx struct {
	m       *MemStore
	undo    []func()    // run in reverse by rollback
	events  []memChange // in order of application
	persist bool        // a persistent node (or a parent's child counter) changed
}

// apply applies one validated op for session s.
func (tx *memTx) apply(s *MemSession, op Op) (OpResult, error) {
	m := tx.m
	switch op.kind {
	case opCreate:
		parentP := parentPath(op.path)
		parent := m.nodes[parentP]
		if parent == nil {
			return OpResult{}, ErrNoParent
		}
		if parent.owner != 0 {
			return OpResult{}, ErrNoChildrenForEphemerals
		}
		p := op.path
		if op.flags&Sequential != 0 {
			// ZooKeeper's rule: the suffix is the parent's child version before
			// this create.
			p += fmt.Sprintf("%010d", parent.cversion)
		}
		if m.nodes[p] != nil {
			return OpResult{}, ErrNodeExists
		}
		var owner int64
		if op.flags&Ephemeral != 0 {
			owner = s.id
		}
		name, oldCV := baseName(p), parent.cversion
		m.nodes[p] = newMemNode(slices.Clone(op.data), owner, nowMillis())
		parent.children[name] = struct{}{}
		parent.cversion++
		if owner != 0 {
			s.ephemerals[p] = struct{}{}
		}
		tx.undo = append(tx.undo, func() {
			delete(m.nodes, p)
			delete(parent.children, name)
			parent.cversion = oldCV
			if owner != 0 {
				delete(s.ephemerals, p)
			}
		})
		tx.events = append(tx.events, memChange{EventNodeCreated, p}, memChange{EventNodeChildrenChanged, parentP})
		tx.persist = true // the parent's child version changed even for an ephemeral
		return OpResult{Path: p}, nil

	case opSet:
		n := m.nodes[op.path]
		if n == nil {
			return OpResult{}, ErrNoNode
		}
		if op.version != AnyVersion && op.version != n.version {
			return OpResult{}, ErrBadVersion
		}
		oldData, oldVersion, oldMtime := n.data, n.version, n.mtime
		n.data, n.version, n.mtime = slices.Clone(op.data), n.version+1, nowMillis()
		tx.undo = append(tx.undo, func() { n.data, n.version, n.mtime = oldData, oldVersion, oldMtime })
		tx.events = append(tx.events, memChange{EventNodeDataChanged, op.path})
		tx.persist = tx.persist || n.owner == 0
		return OpResult{Path: op.path, Stat: n.stat()}, nil

	case opDelete:
		n := m.nodes[op.path]
		if n == nil {
			return OpResult{}, ErrNoNode
		}
		if op.version != AnyVersion && op.version != n.version {
			return OpResult{}, ErrBadVersion
		}
		if len(n.children) > 0 {
			return OpResult{}, ErrNotEmpty
		}
		p, parentP, name := op.path, parentPath(op.path), baseName(op.path)
		parent := m.nodes[parentP]
		oldCV := parent.cversion
		owner := m.sessions[n.owner] // nil for a persistent node
		delete(m.nodes, p)
		delete(parent.children, name)
		parent.cversion++
		if owner != nil {
			delete(owner.ephemerals, p)
		}
		tx.undo = append(tx.undo, func() {
			m.nodes[p] = n
			parent.children[name] = struct{}{}
			parent.cversion = oldCV
			if owner != nil {
				owner.ephemerals[p] = struct{}{}
			}
		})
		tx.events = append(tx.events, memChange{EventNodeDeleted, p}, memChange{EventNodeChildrenChanged, parentP})
		tx.persist = true
		return OpResult{Path: p}, nil

	case opCheck:
		n := m.nodes[op.path]
		if n == nil {
			return OpResult{}, ErrNoNode
		}
		if op.version != AnyVersion && op.version != n.version {
			return OpResult{}, ErrBadVersion
		}
		return OpResult{Path: op.path}, nil
	}
	return OpResult{}, fmt.Errorf("%w: unknown op", ErrInvalidPath)
}

// rollback undoes every applied op, newest first.
func (tx *memTx) rollback() {
	for i := len(tx.undo) - 1; i >= 0; i-- {
		tx.undo[i]()
	}
	tx.undo, tx.events, tx.persist = nil, nil, false
}

// memWatch is one pending watch. It is in exactly one of MemStore's watch tables
// until it fires; firing removes it, which is what makes it fire once.
type memWatch struct {
	fn      WatchFunc
	path    string
	session *MemSession
}

// memFiring is a watch event decided under the lock, delivered after it.
type memFiring struct {
	w  *memWatch
	ev Event
}

func (m *MemStore) addWatchLocked(table map[string][]*memWatch, p string, s *MemSession, fn WatchFunc) {
	table[p] = append(table[p], &memWatch{fn: fn, path: p, session: s})
}

// firingsLocked removes and returns the watches that the changes fire, with the
// event each gets, following ZooKeeper: a data watch (GetW, ExistsW) fires on
// create, set and delete of its node; a child watch fires on create or delete of a
// child, and on delete of its node.
func (m *MemStore) firingsLocked(changes []memChange) []memFiring {
	var out []memFiring
	take := func(table map[string][]*memWatch, p string, typ EventType) {
		for _, w := range table[p] {
			out = append(out, memFiring{w, Event{Type: typ, Path: p}})
		}
		delete(table, p)
	}
	for _, c := range changes {
		switch c.typ {
		case EventNodeCreated, EventNodeDataChanged:
			take(m.dataW, c.path, c.typ)
		case EventNodeDeleted:
			take(m.dataW, c.path, c.typ)
			take(m.childW, c.path, c.typ)
		case EventNodeChildrenChanged:
			take(m.childW, c.path, c.typ)
		}
	}
	return out
}

// dropWatchesLocked removes every watch of session s and returns them, each with an
// EventSession carrying why.
func (m *MemStore) dropWatchesLocked(s *MemSession, why SessionState) []memFiring {
	var out []memFiring
	for _, table := range []map[string][]*memWatch{m.dataW, m.childW} {
		for p, ws := range table {
			kept := ws[:0]
			for _, w := range ws {
				if w.session == s {
					out = append(out, memFiring{w, Event{Type: EventSession, Path: w.path, State: why}})
				} else {
					kept = append(kept, w)
				}
			}
			if len(kept) == 0 {
				delete(table, p)
			} else {
				clear(ws[len(kept):]) // let dropped watches be collected
				table[p] = kept
			}
		}
	}
	return out
}

// beginDeliveryLocked numbers a batch of firings about to be delivered, for
// Sync to wait for; 0 for none.
func (m *MemStore) beginDeliveryLocked(fired []memFiring) uint64 {
	if len(fired) == 0 {
		return 0
	}
	m.deliveries++
	m.inflight[m.deliveries] = struct{}{}
	return m.deliveries
}

// deliver calls each firing's WatchFunc, then marks batch n delivered. It
// must be called without MemStore.mu held.
func (m *MemStore) deliver(n uint64, fired []memFiring) {
	for _, f := range fired {
		f.w.fn(f.ev)
	}
	if n == 0 {
		return
	}
	m.mu.Lock()
	delete(m.inflight, n)
	m.delivered.Broadcast()
	m.mu.Unlock()
}

// deliveringLocked reports whether a batch numbered upTo or lower is still
// being delivered.
func (m *MemStore) deliveringLocked(upTo uint64) bool {
	for n := range m.inflight {
		if n <= upTo {
			return true
		}
	}
	return false
}

// nowMillis is the current time at ZooKeeper's resolution.
func nowMillis() time.Time { return time.UnixMilli(time.Now().UnixMilli()) }
