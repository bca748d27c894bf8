package coord

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Watch cases of the conformance suite (runConformance).

func testWatches(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	watcher, _ := newSession(t)
	writer, _ := newSession(t)
	base := testBase(t, writer)

	type watchFunc func(p string) (<-chan Event, error)
	getW := func(p string) (<-chan Event, error) {
		fn, ch := WatchChan()
		_, _, err := watcher.GetW(ctx, p, fn)
		return ch, err
	}
	existsW := func(p string) (<-chan Event, error) {
		fn, ch := WatchChan()
		_, _, err := watcher.ExistsW(ctx, p, fn)
		return ch, err
	}
	childrenW := func(p string) (<-chan Event, error) {
		fn, ch := WatchChan()
		_, _, err := watcher.ChildrenW(ctx, p, fn)
		return ch, err
	}
	set := func(p string) error { _, err := writer.Set(ctx, p, []byte("new"), AnyVersion); return err }
	del := func(p string) error { return writer.Delete(ctx, p, AnyVersion) }
	create := func(p string) error { _, err := writer.Create(ctx, p, nil, 0); return err }

	cases := []struct {
		name    string
		exists  bool // the watched node exists before the watch
		child   bool // and has a child named "c"
		watch   watchFunc
		trigger func(p string) error
		want    EventType
	}{
		{"get then set", true, false, getW, set, EventNodeDataChanged},
		{"get then delete", true, false, getW, del, EventNodeDeleted},
		{"exists absent then create", false, false, existsW, create, EventNodeCreated},
		{"exists present then set", true, false, existsW, set, EventNodeDataChanged},
		{"exists present then delete", true, false, existsW, del, EventNodeDeleted},
		{"children then create child", true, false, childrenW, func(p string) error { return create(p + "/new") }, EventNodeChildrenChanged},
		{"children then delete child", true, true, childrenW, func(p string) error { return del(p + "/c") }, EventNodeChildrenChanged},
		{"children then delete node", true, false, childrenW, del, EventNodeDeleted},
		{"get then two sets in a multi", true, false, getW, func(p string) error {
			_, err := writer.Multi(ctx, SetOp(p, []byte("1"), AnyVersion), SetOp(p, []byte("2"), AnyVersion))
			return err
		}, EventNodeDataChanged},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := fmt.Sprintf("%s/w%d", base, i)
			if tc.exists {
				mustCreate(t, writer, p, []byte("old"), 0)
			}
			if tc.child {
				mustCreate(t, writer, p+"/c", nil, 0)
			}
			ch, err := tc.watch(p)
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			// A second watch on the same node gets its own event.
			ch2, err := tc.watch(p)
			if err != nil {
				t.Fatalf("second watch: %v", err)
			}
			if err := tc.trigger(p); err != nil {
				t.Fatalf("trigger: %v", err)
			}
			for _, c := range []<-chan Event{ch, ch2} {
				if ev := nextEvent(t, c); ev.Type != tc.want || ev.Path != p {
					t.Fatalf("got %v, want %v %s", ev, tc.want, p)
				}
			}
		})
	}

	// A watch is set only when the call succeeds: the node, made and
	// changed later, fires a watch set then and not the failed one.
	failed, failedCh := WatchChan()
	if _, _, err := watcher.GetW(ctx, base+"/absent", failed); !errors.Is(err, ErrNoNode) {
		t.Fatalf("GetW(absent) = %v; want ErrNoNode", err)
	}
	mustCreate(t, writer, base+"/absent", nil, 0)
	ch, err := getW(base + "/absent")
	if err != nil {
		t.Fatal(err)
	}
	if err := set(base + "/absent"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch)
	noEvent(t, failedCh, 300*time.Millisecond)
}

func testWatchIgnoresChildData(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	mustCreate(t, c, base+"/child", nil, 0)
	fn, ch := WatchChan()
	_, _, err := c.ChildrenW(ctx, base, fn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, base+"/child", []byte("x"), AnyVersion); err != nil {
		t.Fatal(err)
	}
	noEvent(t, ch, 300*time.Millisecond)
	mustCreate(t, c, base+"/other", nil, 0)
	if ev := nextEvent(t, ch); ev.Type != EventNodeChildrenChanged {
		t.Fatalf("got %v, want NodeChildrenChanged", ev)
	}
}

func testWatchesEndOnClose(t *testing.T, newSession newSessionFunc) {
	a, _ := newSession(t)
	base := testBase(t, a)
	dataFn, data := WatchChan()
	_, _, err := a.GetW(t.Context(), base, dataFn)
	if err != nil {
		t.Fatal(err)
	}
	absentFn, absent := WatchChan()
	_, _, err = a.ExistsW(t.Context(), base+"/absent", absentFn)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan Event{data, absent} {
		if ev := nextEvent(t, ch); ev.Type != EventSession || ev.State != StateClosed {
			t.Fatalf("after Close got %v, want Session(Closed)", ev)
		}
	}
}

// testSync: Sync returns only after the watches that changes made before it
// fire have been called, whichever session made the change and however long
// a WatchFunc takes; a closed handle's Sync fails with ErrClosed.
func testSync(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	watcher, _ := newSession(t)
	writer, _ := newSession(t)
	base := testBase(t, writer)
	p := mustCreate(t, writer, base+"/n", nil, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the handles close, whatever failed
	var fired atomic.Bool
	_, _, err := watcher.GetW(ctx, p, func(Event) {
		close(entered)
		<-release // a slow watcher: the one case where Sync has to wait
		fired.Store(true)
	})
	if err != nil {
		t.Fatal(err)
	}
	setDone := make(chan error, 1)
	go func() { _, err := writer.Set(ctx, p, []byte("x"), AnyVersion); setDone <- err }()
	select {
	case <-entered:
	case <-time.After(waitFor):
		t.Fatal("the watch was not called after the change")
	}
	synced := make(chan error, 1)
	go func() { synced <- watcher.Sync(ctx) }()
	select {
	case err := <-synced:
		t.Fatalf("Sync returned (%v) while a watch of an earlier change was still being called", err)
	case <-time.After(300 * time.Millisecond):
	}
	free()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
		if !fired.Load() {
			t.Fatal("Sync returned before the watch's function did")
		}
	case <-time.After(waitFor):
		t.Fatal("Sync did not return after the watch's function did")
	}
	if err := <-setDone; err != nil {
		t.Fatal(err)
	}
	if err := watcher.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Sync after Close", watcher.Sync(ctx), ErrClosed)
}
