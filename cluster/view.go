package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
)

// View keeps a current Metadata snapshot by watching the coordinator. Each
// znode is read once and then served from memory until its watch fires, so a
// quiet cluster costs no coordinator traffic. Readers call Current, which never
// blocks; owners of reactions (a broker's partition manager) Subscribe.
//
// Goroutines: one refresh loop (started by Start, stopped by Close). Watches
// cost none: the coordinator calls the view's WatchFunc, which forgets the
// node and wakes the loop.
type View struct {
	c   coord.Coordinator
	log *slog.Logger

	snap   atomic.Pointer[Metadata]
	kick   chan struct{} // cap 1: "something changed, refresh"
	loaded chan struct{} // closed after the first successful refresh
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu      sync.Mutex            // guards the fields below
	watched map[string]nodeData   // nodes with an armed watch, and their data
	subs    []chan struct{}       // cap-1 notification channels
	synced  map[chan error]uint64 // Refresh callers waiting for a refresh at or past a generation
	gen     uint64                // refreshes requested so far
	done1   bool
}

type nodeData struct {
	data     []byte
	children []string
	version  int32
	exists   bool
	watch    *viewWatch // the armed watch this data is good under
}

// viewWatch is one armed watch; fired is set (under View.mu) when it fires,
// possibly before the read that armed it is recorded.
type viewWatch struct{ fired bool }

// NewView returns a view over c; call Start to begin watching.
func NewView(c coord.Coordinator, log *slog.Logger) *View {
	if log == nil {
		log = slog.Default()
	}
	v := &View{
		c: c, log: log,
		kick:    make(chan struct{}, 1),
		loaded:  make(chan struct{}),
		done:    make(chan struct{}),
		watched: map[string]nodeData{},
		synced:  map[chan error]uint64{},
	}
	v.snap.Store(&Metadata{Brokers: map[int32]api.BrokerRegistration{}, Controller: api.ControllerRegistration{BrokerID: -1}, Topics: map[string]*TopicMeta{}})
	return v
}

// Start launches the refresh loop.
func (v *View) Start() {
	v.wg.Add(1)
	go v.loop()
	v.trigger()
}

// Close stops the refresh loop and waits for it.
func (v *View) Close() {
	v.mu.Lock()
	if v.done1 {
		v.mu.Unlock()
		return
	}
	v.done1 = true
	v.mu.Unlock()
	close(v.done)
	v.wg.Wait()
}

// Current returns the latest snapshot. Never nil; empty before the first load.
func (v *View) Current() *Metadata { return v.snap.Load() }

// Loaded is closed once the view has read the coordinator successfully.
func (v *View) Loaded() <-chan struct{} { return v.loaded }

// Subscribe returns a channel that receives (coalesced) after every refresh
// that published a snapshot.
func (v *View) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	v.mu.Lock()
	v.subs = append(v.subs, ch)
	v.mu.Unlock()
	return ch
}

// Refresh forces a full re-read of nodes whose watches may not have fired yet
// (after this process wrote them itself) and waits until a snapshot that
// includes it is published.
func (v *View) Refresh(ctx context.Context) error {
	ch := make(chan error, 1)
	v.mu.Lock()
	v.gen++
	v.synced[ch] = v.gen
	// Forget cached data: the caller wants what the coordinator has now. The
	// armed watches stay armed; their forwarders will only trigger another refresh.
	for p, n := range v.watched {
		v.watched[p] = nodeData{version: -2, watch: n.watch}
	}
	v.mu.Unlock()
	v.trigger()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		v.mu.Lock()
		delete(v.synced, ch)
		v.mu.Unlock()
		return ctx.Err()
	case <-v.done:
		return errors.New("cluster: view closed")
	}
}

func (v *View) trigger() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

func (v *View) loop() {
	defer v.wg.Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	first := true
	for {
		select {
		case <-v.done:
			return
		case <-v.kick:
		case <-retry.C:
		}
		v.mu.Lock()
		gen := v.gen
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		md, err := v.read(ctx)
		cancel()
		if err != nil {
			v.log.Debug("metadata refresh failed; retrying", "err", err)
			retry.Reset(250 * time.Millisecond)
			continue
		}
		v.snap.Store(md)
		if first {
			close(v.loaded)
			first = false
		}
		v.mu.Lock()
		for ch, g := range v.synced {
			if g <= gen {
				ch <- nil
				delete(v.synced, ch)
			}
		}
		for _, s := range v.subs {
			select {
			case s <- struct{}{}:
			default:
			}
		}
		v.mu.Unlock()
	}
}

// read builds a snapshot, reading only nodes whose cached data is not known good.
func (v *View) read(ctx context.Context) (*Metadata, error) {
	md := &Metadata{
		Brokers:    map[int32]api.BrokerRegistration{},
		Controller: api.ControllerRegistration{BrokerID: -1},
		Topics:     map[string]*TopicMeta{},
	}
	ids, err := v.children(ctx, BrokersIDsPath)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		n, err := v.data(ctx, BrokersIDsPath+"/"+id)
		if err != nil {
			return nil, err
		}
		var reg api.BrokerRegistration
		if n.exists && json.Unmarshal(n.data, &reg) == nil {
			md.Brokers[reg.ID] = reg
		}
	}
	if n, err := v.data(ctx, ControllerPath); err != nil {
		return nil, err
	} else if n.exists {
		_ = json.Unmarshal(n.data, &md.Controller)
	}
	topics, err := v.children(ctx, TopicsPath)
	if err != nil {
		return nil, err
	}
	for _, name := range topics {
		n, err := v.data(ctx, TopicPath(name))
		if err != nil {
			return nil, err
		}
		if !n.exists {
			continue
		}
		tm := &TopicMeta{Name: name}
		if err := json.Unmarshal(n.data, &tm.Record); err != nil {
			v.log.Warn("unreadable topic record", "topic", name, "err", err)
			continue
		}
		if tm.Record.Deleting {
			continue // being deleted: gone for readers
		}
		whole := true
		for p := range tm.Record.Replicas {
			sn, err := v.data(ctx, PartitionStatePath(name, int32(p)))
			if err != nil {
				return nil, err
			}
			if !sn.exists {
				// Still being written (in several requests, the states
				// last): not a topic for readers yet. The exists-watch
				// armed on the state brings it in when it is created.
				whole = false
				continue
			}
			st := api.PartitionState{Leader: -1, LeaderEpoch: -1}
			ver := int32(-1)
			if json.Unmarshal(sn.data, &st) == nil {
				ver = sn.version
			}
			tm.States = append(tm.States, st)
			tm.StateVersions = append(tm.StateVersions, ver)
		}
		if whole {
			md.Topics[name] = tm
		}
	}
	return md, nil
}

// cached returns a node's data if its watch is armed and the data known good.
func (v *View) cached(p string) (nodeData, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.watched[p]
	return n, ok && n.version != -2
}

// newWatch returns a watch for p and the WatchFunc to arm it with: when it
// fires, p is forgotten (if its data is still held under this watch) and
// the loop wakes to read it again.
func (v *View) newWatch(p string) (*viewWatch, coord.WatchFunc) {
	w := &viewWatch{}
	return w, func(coord.Event) {
		v.mu.Lock()
		w.fired = true
		if n, ok := v.watched[p]; ok && n.watch == w {
			delete(v.watched, p)
		}
		v.mu.Unlock()
		v.trigger()
	}
}

// arm records a read of p. With w set the read armed that new watch;
// otherwise it relied on the watch of an earlier read. Either way, if the
// watch fired while the read was in flight, the data is left uncached so
// the next refresh reads p again and arms a new watch: caching it would
// leave p with no watch at all, its later changes never seen.
func (v *View) arm(p string, n nodeData, w *viewWatch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if w == nil {
		if cur, ok := v.watched[p]; ok {
			n.watch = cur.watch
			v.watched[p] = n
		}
		return
	}
	if !w.fired {
		n.watch = w
		v.watched[p] = n
	}
}

// isArmed reports whether a watch is armed for p (cached data may be stale).
func (v *View) isArmed(p string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.watched[p]
	return ok
}

func (v *View) data(ctx context.Context, p string) (nodeData, error) {
	if n, ok := v.cached(p); ok {
		return n, nil
	}
	armed := v.isArmed(p)
	var (
		n   nodeData
		w   *viewWatch
		err error
	)
	if armed {
		var st coord.Stat
		n.data, st, err = v.c.Get(ctx, p)
		n.version, n.exists = st.Version, err == nil
	} else {
		var ok bool
		var st coord.Stat
		var fn coord.WatchFunc
		w, fn = v.newWatch(p)
		ok, st, err = v.c.ExistsW(ctx, p, fn)
		if err == nil && ok {
			// The exists-watch fires on data change and deletion too.
			n.data, st, err = v.c.Get(ctx, p)
			n.version, n.exists = st.Version, err == nil
		}
	}
	if errors.Is(err, coord.ErrNoNode) {
		n, err = nodeData{}, nil
	}
	if err != nil {
		return nodeData{}, err
	}
	v.arm(p, n, w)
	return n, nil
}

func (v *View) children(ctx context.Context, p string) ([]string, error) {
	if n, ok := v.cached(p); ok {
		return n.children, nil
	}
	armed := v.isArmed(p)
	var (
		kids []string
		w    *viewWatch
		err  error
	)
	if armed {
		kids, _, err = v.c.Children(ctx, p)
	} else {
		var fn coord.WatchFunc
		w, fn = v.newWatch(p)
		kids, _, err = v.c.ChildrenW(ctx, p, fn)
	}
	if errors.Is(err, coord.ErrNoNode) {
		// Not created yet: poll until it is (the retry timer re-runs read).
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	v.arm(p, nodeData{children: kids, exists: true}, w)
	return kids, nil
}
