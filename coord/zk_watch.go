package coord

import (
	"errors"

	"github.com/go-zookeeper/zk"
)

// Watches on ZooKeeper without a goroutine each: every event the client
// receives reaches ZK.onEvent (the client's event callback, on its receive
// loop), which finds the registered WatchFuncs of the event's path and kind
// and calls them. A registration is made before its request is sent, so no
// event can slip between the answer and the registration (the cost: an
// event of an older watch on the same node may fire it early, which a
// watcher takes as any other change), and dropped when the request fails.

// watchKind is which of the client's watch tables a watch mirrors.
type watchKind uint8

const (
	watchData  watchKind = iota // GetW: data change, deletion
	watchExist                  // ExistsW: creation, data change, deletion
	watchChild                  // ChildrenW: child change, deletion
)

type zkWatchKey struct {
	path string // the server's path (chroot included)
	kind watchKind
}

// zkWatch is one registered watch; fired once, then gone from ZK.watches.
type zkWatch struct {
	key zkWatchKey
	rel string // the path as the caller named it
	fn  WatchFunc
}

// addWatch registers fn for path's next event of kind, before the request
// that sets the client's watch is sent.
func (z *ZK) addWatch(path string, kind watchKind, fn WatchFunc) *zkWatch {
	w := &zkWatch{key: zkWatchKey{z.full(path), kind}, rel: path, fn: fn}
	z.wmu.Lock()
	defer z.wmu.Unlock()
	if z.watches == nil {
		z.watches = map[zkWatchKey][]*zkWatch{}
	}
	z.watches[w.key] = append(z.watches[w.key], w)
	return w
}

// dropWatch unregisters a watch whose request failed (unless an early event
// fired it meanwhile).
func (z *ZK) dropWatch(w *zkWatch) {
	z.wmu.Lock()
	defer z.wmu.Unlock()
	ws := z.watches[w.key]
	for i, o := range ws {
		if o == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(z.watches, w.key)
	} else {
		z.watches[w.key] = ws
	}
}

// kindsFired are the watch kinds a node event fires, as the client's own
// tables do.
func kindsFired(t zk.EventType) []watchKind {
	switch t {
	case zk.EventNodeCreated:
		return []watchKind{watchExist}
	case zk.EventNodeDataChanged:
		return []watchKind{watchExist, watchData}
	case zk.EventNodeChildrenChanged:
		return []watchKind{watchChild}
	case zk.EventNodeDeleted, zk.EventNotWatching:
		return []watchKind{watchExist, watchData, watchChild}
	}
	return nil
}

// fireNodeEvent calls the watches an event of the client fires.
func (z *ZK) fireNodeEvent(ev zk.Event) {
	kinds := kindsFired(ev.Type)
	if len(kinds) == 0 {
		return
	}
	var fired []*zkWatch
	z.wmu.Lock()
	for _, k := range kinds {
		key := zkWatchKey{ev.Path, k}
		fired = append(fired, z.watches[key]...)
		delete(z.watches, key)
	}
	z.wmu.Unlock()
	for _, w := range fired {
		w.fn(translateWatchEvent(w.rel, ev))
	}
}

// fireAll ends every registered watch with EventSession in state st: the
// session expired or the handle closed.
func (z *ZK) fireAll(st SessionState) {
	z.wmu.Lock()
	all := z.watches
	z.watches = nil
	z.wmu.Unlock()
	for _, ws := range all {
		for _, w := range ws {
			w.fn(Event{Type: EventSession, Path: w.rel, State: st})
		}
	}
}

// translateWatchEvent maps an event of the client to the one a watch of
// path gets.
func translateWatchEvent(path string, ev zk.Event) Event {
	switch ev.Type {
	case zk.EventNodeCreated:
		return Event{Type: EventNodeCreated, Path: path}
	case zk.EventNodeDeleted:
		return Event{Type: EventNodeDeleted, Path: path}
	case zk.EventNodeDataChanged:
		return Event{Type: EventNodeDataChanged, Path: path}
	case zk.EventNodeChildrenChanged:
		return Event{Type: EventNodeChildrenChanged, Path: path}
	}
	// EventNotWatching: the client dropped its watches, because the session
	// expired or the connection was closed for good.
	if errors.Is(ev.Err, zk.ErrSessionExpired) {
		return Event{Type: EventSession, Path: path, State: StateExpired}
	}
	return Event{Type: EventSession, Path: path, State: StateClosed}
}
