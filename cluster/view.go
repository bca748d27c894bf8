package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
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
// A refresh reads what it has to in three rounds (the lists and the
// controller; each broker's registration and topic's record; each
// partition's state), each round's reads made at once (coord.Pipeline), so
// a round costs about one round trip however many nodes changed: after a
// failover a broker learns a thousand new partition states in a few
// milliseconds, not a thousand round trips.
//
// Goroutines: one refresh loop (started by Start, stopped by Close), and
// while a round reads, at most viewInFlight readers it waits for. Watches
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
	changed map[string]bool       // topics with a node whose watch fired since the last refresh began
	reread  bool                  // Reload: the next refresh rebuilds every topic
	subs    []chan struct{}       // cap-1 notification channels
	next    chan struct{}         // closed when the next snapshot is published (Published)
	synced  map[chan error]uint64 // Refresh callers waiting for a refresh at or past a generation
	gen     uint64                // refreshes requested so far
	done1   bool

	reads int // nodes the current refresh read from the coordinator; owned by loop
}

type nodeData struct {
	data     []byte
	children []string
	version  int32
	exists   bool
	decoded  any        // data as the round that read it parsed it (see decoder)
	watch    *viewWatch // the armed watch this data is good under
}

// viewInFlight bounds the reads one round has outstanding.
const viewInFlight = coord.DefaultInFlight

// A decoder parses a node's data once, when it is read; snapshots built
// while the node stays cached reuse the result (never modified: snapshots
// share it). nil for a children read.
type decoder func(data []byte) any

// nodeReq is one node a round needs: its data (decode set) or its children.
type nodeReq struct {
	path   string
	decode decoder
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
		changed: map[string]bool{},
		synced:  map[chan error]uint64{},
		next:    make(chan struct{}),
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

// Published returns a channel closed once a snapshot newer than Current
// is published: take it before reading Current, and a wait on it misses
// no change. Any number of waiters may share it, and one that gives up
// leaves nothing behind.
func (v *View) Published() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.next
}

// Refresh waits until a published snapshot holds every change the
// coordinator had applied when Refresh was called: this process's own
// writes, and those another process made before (a topic the controller
// just created, for the gateway that asked for it). It costs one
// coord.Sync, after which the watches have named every node those changes
// touched, and the reads of those nodes alone.
func (v *View) Refresh(ctx context.Context) error {
	if err := v.c.Sync(ctx); err != nil {
		return err
	}
	return v.await(ctx, false)
}

// Reload forgets every cached node and waits until a snapshot re-read
// from the coordinator whole is published. It is for after the link to the
// coordinator was lost (the broker's fence): a Sync does not cover the
// changes made while disconnected, whose notifications the client may
// deliver late (coord.Coordinator.Sync). The reads go through the watches
// already armed, a round's reads at once.
func (v *View) Reload(ctx context.Context) error { return v.await(ctx, true) }

// await asks for a refresh, forgetting every cached node first with
// forget, and waits until a snapshot read after the request is published.
func (v *View) await(ctx context.Context, forget bool) error {
	ch := make(chan error, 1)
	v.mu.Lock()
	v.gen++
	v.synced[ch] = v.gen
	if forget {
		// The armed watches stay armed; their forwarders will only trigger
		// another refresh.
		for p, n := range v.watched {
			v.watched[p] = nodeData{version: -2, watch: n.watch}
		}
		v.reread = true
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
		changed, all := v.changed, v.reread
		v.changed, v.reread = map[string]bool{}, false
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		v.reads = 0
		md, err := v.read(ctx, v.snap.Load(), changed, all)
		cancel()
		if err != nil {
			v.log.Debug("metadata refresh failed; retrying", "err", err)
			v.mu.Lock()
			for t := range changed {
				v.changed[t] = true
			}
			v.reread = v.reread || all
			v.mu.Unlock()
			retry.Reset(250 * time.Millisecond)
			continue
		}
		v.snap.Store(md)
		v.log.Debug("metadata refreshed", "took", time.Since(start), "topics_changed", len(changed), "whole", all, "reads", v.reads)
		if first {
			close(v.loaded)
			first = false
		}
		v.mu.Lock()
		close(v.next)
		v.next = make(chan struct{})
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

// read builds a snapshot, reading only nodes whose cached data is not known
// good, in three rounds of reads made at once. A topic of prev that no
// watch has named since prev's refresh began (changed), unless all, is
// prev's TopicMeta as it was: a refresh costs what changed, not the
// partitions of the whole cluster (which, rebuilt at every watch event,
// once took a core through a failover).
func (v *View) read(ctx context.Context, prev *Metadata, changed map[string]bool, all bool) (*Metadata, error) {
	md := &Metadata{
		Brokers:    map[int32]api.BrokerRegistration{},
		Controller: api.ControllerRegistration{BrokerID: -1},
		Topics:     map[string]*TopicMeta{},
	}
	top, err := v.fetch(ctx, []nodeReq{{path: BrokersIDsPath}, {path: TopicsPath}, {path: ControllerPath, decode: decodeController}})
	if err != nil {
		return nil, err
	}
	ids, topics := top[0].children, top[1].children
	if c, ok := top[2].decoded.(api.ControllerRegistration); ok && top[2].exists {
		md.Controller = c
	}

	reqs := make([]nodeReq, 0, len(ids)+len(topics))
	for _, id := range ids {
		reqs = append(reqs, nodeReq{path: BrokersIDsPath + "/" + id, decode: decodeBroker})
	}
	var fresh []string // topics to build
	for _, name := range topics {
		if tm := prev.Topics[name]; tm != nil && !all && !changed[name] {
			md.Topics[name] = tm
			continue
		}
		fresh = append(fresh, name)
		reqs = append(reqs, nodeReq{path: TopicPath(name), decode: decodeTopic})
	}
	second, err := v.fetch(ctx, reqs)
	if err != nil {
		return nil, err
	}
	for _, n := range second[:len(ids)] {
		if reg, ok := n.decoded.(api.BrokerRegistration); ok && n.exists {
			md.Brokers[reg.ID] = reg
		}
	}

	// The topics readers may see, and their partitions' states.
	var metas []*TopicMeta
	reqs = reqs[:0]
	for i, name := range fresh {
		n := second[len(ids)+i]
		if !n.exists {
			continue
		}
		rec, ok := n.decoded.(topicRecord)
		if !ok {
			continue
		}
		if rec.err != nil {
			v.log.Warn("unreadable topic record", "topic", name, "err", rec.err)
			continue
		}
		if rec.rec.Deleting {
			continue // being deleted: gone for readers
		}
		metas = append(metas, &TopicMeta{Name: name, Record: rec.rec})
		for p := range rec.rec.Replicas {
			reqs = append(reqs, nodeReq{path: PartitionStatePath(name, int32(p)), decode: decodeState})
		}
	}
	states, err := v.fetch(ctx, reqs)
	if err != nil {
		return nil, err
	}
	for _, tm := range metas {
		np := len(tm.Record.Replicas)
		tm.States, tm.StateVersions = make([]api.PartitionState, np), make([]int32, np)
		whole := true
		for p, sn := range states[:np] {
			if !sn.exists {
				// Still being written (in several requests, the states
				// last): not a topic for readers yet. The exists-watch
				// armed on the state brings it in when it is created.
				whole = false
				break
			}
			tm.States[p], tm.StateVersions[p] = api.PartitionState{Leader: -1, LeaderEpoch: -1}, -1
			if st, ok := sn.decoded.(api.PartitionState); ok {
				tm.States[p], tm.StateVersions[p] = st, sn.version
			}
		}
		states = states[np:]
		if whole {
			md.Topics[tm.Name] = tm
		}
	}
	return md, nil
}

// topicRecord is a topic node's data, parsed.
type topicRecord struct {
	rec api.TopicRecord
	err error
}

func decodeTopic(data []byte) any {
	var r topicRecord
	r.err = json.Unmarshal(data, &r.rec)
	return r
}

// decodeState parses a partition state; unreadable data is nil, and the
// partition then reads as leaderless at version -1.
func decodeState(data []byte) any {
	st := api.PartitionState{Leader: -1, LeaderEpoch: -1}
	if json.Unmarshal(data, &st) != nil {
		return nil
	}
	return st
}

func decodeBroker(data []byte) any {
	var reg api.BrokerRegistration
	if json.Unmarshal(data, &reg) != nil {
		return nil
	}
	return reg
}

// decodeController parses /controller; unreadable data still names a
// controller (as before: the fields it could read, BrokerID -1 otherwise).
func decodeController(data []byte) any {
	c := api.ControllerRegistration{BrokerID: -1}
	_ = json.Unmarshal(data, &c)
	return c
}

// fetch returns the node of each request, from memory when its cached data
// is known good, the others read at once (at most viewInFlight at a time).
// The first failed read fails it.
func (v *View) fetch(ctx context.Context, reqs []nodeReq) ([]nodeData, error) {
	out := make([]nodeData, len(reqs))
	var miss []int
	for i, r := range reqs {
		if n, ok := v.cached(r.path); ok {
			out[i] = n
		} else {
			miss = append(miss, i)
		}
	}
	v.reads += len(miss)
	err := coord.Pipeline(ctx, len(miss), viewInFlight, func(ctx context.Context, j int) error {
		i := miss[j]
		var err error
		if reqs[i].decode == nil {
			out[i], err = v.children(ctx, reqs[i].path)
		} else {
			out[i], err = v.data(ctx, reqs[i].path, reqs[i].decode)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
	topic, isTopic := topicOf(p)
	return w, func(coord.Event) {
		v.mu.Lock()
		w.fired = true
		if n, ok := v.watched[p]; ok && n.watch == w {
			delete(v.watched, p)
		}
		if isTopic {
			v.changed[topic] = true
		}
		v.mu.Unlock()
		v.trigger()
	}
}

// topicOf names the topic a node under TopicsPath belongs to (its record,
// its partitions, their states).
func topicOf(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, TopicsPath+"/")
	if !ok || rest == "" {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, true
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

// data reads a node that is not cached: through its armed watch when one
// is (Reload forgot the data), else arming one, a data watch on a present
// node (one request), an exists-watch on an absent one (for its creation).
func (v *View) data(ctx context.Context, p string, decode decoder) (nodeData, error) {
	var (
		n   nodeData
		w   *viewWatch
		st  coord.Stat
		err error
	)
	if v.isArmed(p) {
		n.data, st, err = v.c.Get(ctx, p)
	} else {
		var fn coord.WatchFunc
		w, fn = v.newWatch(p)
		n.data, st, err = v.c.GetW(ctx, p, fn)
		if errors.Is(err, coord.ErrNoNode) {
			// GetW set no watch; watch for the creation instead.
			var ok bool
			ok, _, err = v.c.ExistsW(ctx, p, fn)
			if err == nil && ok {
				// Created in between: the exists-watch fires on its
				// changes and deletion too.
				n.data, st, err = v.c.Get(ctx, p)
			} else if err == nil {
				err = coord.ErrNoNode
			}
		}
	}
	n.version, n.exists = st.Version, err == nil
	if errors.Is(err, coord.ErrNoNode) {
		n, err = nodeData{}, nil
	}
	if err != nil {
		return nodeData{}, err
	}
	if n.exists {
		n.decoded = decode(n.data)
	}
	v.arm(p, n, w)
	return n, nil
}

func (v *View) children(ctx context.Context, p string) (nodeData, error) {
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
	if err != nil {
		// ErrNoNode: not created yet; the retry timer re-runs read until it is.
		return nodeData{}, err
	}
	n := nodeData{children: kids, exists: true}
	v.arm(p, n, w)
	return n, nil
}
