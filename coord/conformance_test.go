package coord

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testwait"
)

// sessionControl is what the suite needs from an implementation beyond Coordinator.
type sessionControl interface {
	// Expire makes the service expire the session, as it does when a handle has
	// been out of touch for longer than the session timeout. It returns once the
	// service has done it; the handle may learn it later, on its own.
	Expire(t *testing.T)
}

// newSessionFunc opens a new session; every session a suite run opens sees the same
// tree. The session is closed when t ends.
type newSessionFunc func(t *testing.T) (Coordinator, sessionControl)

// runConformance is the one contract test every Coordinator passes.
func runConformance(t *testing.T, newSession newSessionFunc) {
	cases := []struct {
		name string
		run  func(*testing.T, newSessionFunc)
	}{
		{"CreateGetSetDelete", testCreateGetSetDelete},
		{"Errors", testErrors},
		{"Sequential", testSequential},
		{"SequentialConcurrent", testSequentialConcurrent},
		{"EphemeralGoneOnClose", testEphemeralGoneOnClose},
		{"EphemeralGoneOnExpire", testEphemeralGoneOnExpire},
		{"Watches", testWatches},
		{"WatchIgnoresChildData", testWatchIgnoresChildData},
		{"WatchesEndOnClose", testWatchesEndOnClose},
		{"Multi", testMulti},
		{"MultiAllOrNothing", testMultiAllOrNothing},
		{"CASRace", testCASRace},
		{"SessionLifecycle", testSessionLifecycle},
		{"PathHelpers", testPathHelpers},
		{"ContextCanceled", testContextCanceled},
		{"Sync", testSync},
		{"Pipelined", testPipelined},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newSession) })
	}
}

// waitFor bounds every wait in the suite; real ZooKeeper answers in milliseconds,
// and an expiry takes a reconnect.
const waitFor = 20 * time.Second

// testBase creates and returns a node of the test's own, so tests that share a tree
// do not see each other.
func testBase(t *testing.T, c Coordinator) string {
	t.Helper()
	base := "/" + strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if err := EnsurePath(t.Context(), c, base); err != nil {
		t.Fatalf("EnsurePath(%s): %v", base, err)
	}
	return base
}

func mustCreate(t *testing.T, c Coordinator, p string, data []byte, flags CreateFlags) string {
	t.Helper()
	got, err := c.Create(t.Context(), p, data, flags)
	if err != nil {
		t.Fatalf("Create(%s): %v", p, err)
	}
	return got
}

func mustGet(t *testing.T, c Coordinator, p string) ([]byte, Stat) {
	t.Helper()
	data, st, err := c.Get(t.Context(), p)
	if err != nil {
		t.Fatalf("Get(%s): %v", p, err)
	}
	return data, st
}

func mustExist(t *testing.T, c Coordinator, p string, want bool) Stat {
	t.Helper()
	ok, st, err := c.Exists(t.Context(), p)
	if err != nil {
		t.Fatalf("Exists(%s): %v", p, err)
	}
	if ok != want {
		t.Fatalf("Exists(%s) = %v, want %v", p, ok, want)
	}
	return st
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// nextEvent returns the one event a watch delivers and checks that the channel is
// closed right after it.
func nextEvent(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	var ev Event
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed without an event")
		}
		ev = e
	case <-time.After(waitFor):
		t.Fatal("no watch event")
	}
	select {
	case e, ok := <-ch:
		if ok {
			t.Fatalf("second event on a one-shot watch: %v (first %v)", e, ev)
		}
	case <-time.After(waitFor):
		t.Fatal("watch channel not closed after its event")
	}
	return ev
}

func noEvent(t *testing.T, ch <-chan Event, within time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected watch event %v", ev)
	case <-time.After(within):
	}
}

// waitState reads session states until want, skipping others (a ZooKeeper handle
// may report Disconnected on its way to Expired).
func waitState(t *testing.T, ch <-chan SessionState, want SessionState) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatalf("session events closed while waiting for %v", want)
			}
			if s == want {
				return
			}
			t.Logf("session state %v while waiting for %v", s, want)
		case <-deadline:
			t.Fatalf("no session state %v", want)
		}
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, waitFor, what, cond)
}

func testCreateGetSetDelete(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	p := base + "/n"

	if got := mustCreate(t, c, p, []byte("v0"), 0); got != p {
		t.Fatalf("Create returned %q, want %q", got, p)
	}
	data, st := mustGet(t, c, p)
	if string(data) != "v0" || st.Version != 0 || st.DataLength != 2 || st.EphemeralOwner != 0 || st.NumChildren != 0 {
		t.Fatalf("after create: data %q stat %+v", data, st)
	}
	if st.Ctime.IsZero() || st.Mtime.Before(st.Ctime) {
		t.Fatalf("after create: times %v %v", st.Ctime, st.Mtime)
	}

	st, err := c.Set(ctx, p, []byte("v1"), 0)
	if err != nil || st.Version != 1 {
		t.Fatalf("Set(version 0) = %+v, %v; want version 1", st, err)
	}
	st, err = c.Set(ctx, p, []byte("v2"), AnyVersion)
	if err != nil || st.Version != 2 {
		t.Fatalf("Set(any) = %+v, %v; want version 2", st, err)
	}
	_, err = c.Set(ctx, p, []byte("stale"), 1)
	wantErr(t, "Set(stale version)", err, ErrBadVersion)
	if data, st = mustGet(t, c, p); string(data) != "v2" || st.Version != 2 {
		t.Fatalf("after sets: data %q version %d", data, st.Version)
	}
	if st := mustExist(t, c, p, true); st.Version != 2 {
		t.Fatalf("Exists stat version %d, want 2", st.Version)
	}

	for _, name := range []string{"b", "a", "c"} {
		mustCreate(t, c, JoinPath(p, name), nil, 0)
	}
	names, st, err := c.Children(ctx, p)
	if err != nil || !slices.Equal(names, []string{"a", "b", "c"}) || st.NumChildren != 3 || st.CVersion != 3 {
		t.Fatalf("Children = %v %+v %v", names, st, err)
	}
	wantErr(t, "Delete(non-empty)", c.Delete(ctx, p, AnyVersion), ErrNotEmpty)
	for _, name := range names {
		if err := c.Delete(ctx, JoinPath(p, name), 0); err != nil {
			t.Fatalf("Delete child %s: %v", name, err)
		}
	}
	wantErr(t, "Delete(stale version)", c.Delete(ctx, p, 1), ErrBadVersion)
	if err := c.Delete(ctx, p, 2); err != nil {
		t.Fatalf("Delete(version 2): %v", err)
	}
	mustExist(t, c, p, false)
	_, _, err = c.Get(ctx, p)
	wantErr(t, "Get(deleted)", err, ErrNoNode)

	// Empty data and the root.
	mustCreate(t, c, base+"/empty", nil, 0)
	if data, st := mustGet(t, c, base+"/empty"); len(data) != 0 || st.DataLength != 0 {
		t.Fatalf("empty node: data %q stat %+v", data, st)
	}
	rootNames, _, err := c.Children(ctx, "/")
	if err != nil || !slices.Contains(rootNames, base[1:]) {
		t.Fatalf("Children(/) = %v, %v; want it to hold %s", rootNames, err, base[1:])
	}
}

func testErrors(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	mustCreate(t, c, base+"/exists", []byte("keep"), 0)
	mustCreate(t, c, base+"/parent", nil, 0)
	mustCreate(t, c, base+"/parent/child", nil, 0)
	mustCreate(t, c, base+"/eph", nil, Ephemeral)

	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"create existing", func() error { _, err := c.Create(ctx, base+"/exists", nil, 0); return err }, ErrNodeExists},
		{"create without parent", func() error { _, err := c.Create(ctx, base+"/missing/child", nil, 0); return err }, ErrNoParent},
		{"create sequential without parent", func() error {
			_, err := c.Create(ctx, base+"/missing/s-", nil, Sequential)
			return err
		}, ErrNoParent},
		{"create under ephemeral", func() error { _, err := c.Create(ctx, base+"/eph/child", nil, 0); return err }, ErrNoChildrenForEphemerals},
		{"create root", func() error { _, err := c.Create(ctx, "/", nil, 0); return err }, ErrInvalidPath},
		{"create too large", func() error {
			_, err := c.Create(ctx, base+"/big", make([]byte, MaxDataSize+1), 0)
			return err
		}, ErrDataTooLarge},
		{"get missing", func() error { _, _, err := c.Get(ctx, base+"/missing"); return err }, ErrNoNode},
		{"children missing", func() error { _, _, err := c.Children(ctx, base+"/missing"); return err }, ErrNoNode},
		{"set missing", func() error { _, err := c.Set(ctx, base+"/missing", nil, AnyVersion); return err }, ErrNoNode},
		{"set bad version", func() error { _, err := c.Set(ctx, base+"/exists", []byte("x"), 7); return err }, ErrBadVersion},
		{"set too large", func() error {
			_, err := c.Set(ctx, base+"/exists", make([]byte, MaxDataSize+1), AnyVersion)
			return err
		}, ErrDataTooLarge},
		{"delete missing", func() error { return c.Delete(ctx, base+"/missing", AnyVersion) }, ErrNoNode},
		{"delete bad version", func() error { return c.Delete(ctx, base+"/exists", 3) }, ErrBadVersion},
		{"delete non-empty", func() error { return c.Delete(ctx, base+"/parent", AnyVersion) }, ErrNotEmpty},
		{"delete root", func() error { return c.Delete(ctx, "/", AnyVersion) }, ErrInvalidPath},
		{"relative path", func() error { _, _, err := c.Get(ctx, "a/b"); return err }, ErrInvalidPath},
		{"empty path", func() error { _, _, err := c.Get(ctx, ""); return err }, ErrInvalidPath},
		{"trailing slash", func() error { _, _, err := c.Get(ctx, base+"/"); return err }, ErrInvalidPath},
		{"double slash", func() error { _, _, err := c.Exists(ctx, "//a"); return err }, ErrInvalidPath},
		{"dot component", func() error { _, _, err := c.Children(ctx, base+"/./x"); return err }, ErrInvalidPath},
		{"dot-dot component", func() error { _, err := c.Create(ctx, base+"/../x", nil, 0); return err }, ErrInvalidPath},
		{"control character", func() error { _, err := c.Create(ctx, base+"/a\x01b", nil, 0); return err }, ErrInvalidPath},
		{"multi invalid op", func() error { _, err := c.Multi(ctx, CheckOp("nope", AnyVersion)); return err }, ErrInvalidPath},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, tc.do(), tc.want)
		})
	}
	// Nothing above changed anything.
	if data, st := mustGet(t, c, base+"/exists"); string(data) != "keep" || st.Version != 0 {
		t.Fatalf("after failures: data %q version %d", data, st.Version)
	}
	mustExist(t, c, base+"/parent/child", true)
	mustExist(t, c, base+"/big", false)
}

var seqSuffix = regexp.MustCompile(`^[0-9]{10}$`)

func testSequential(t *testing.T, newSession newSessionFunc) {
	c, _ := newSession(t)
	base := testBase(t, c)

	// A fresh parent's first sequential child gets 0000000000: the suffix is the
	// parent's child version, ZooKeeper's rule.
	mustCreate(t, c, base+"/q", nil, 0)
	if got := mustCreate(t, c, base+"/q/", nil, Sequential); got != base+"/q/0000000000" {
		t.Fatalf("first sequential child = %q", got)
	}
	prefix := base + "/seq-"
	last := ""
	for i := range 5 {
		flags := Sequential
		if i%2 == 1 {
			flags |= Ephemeral
		}
		got := mustCreate(t, c, prefix, []byte(strconv.Itoa(i)), flags)
		if !strings.HasPrefix(got, prefix) || !seqSuffix.MatchString(strings.TrimPrefix(got, prefix)) {
			t.Fatalf("sequential name %q does not look like %s<10 digits>", got, prefix)
		}
		if got <= last {
			t.Fatalf("sequential name %q not after %q", got, last)
		}
		last = got
		if data, _ := mustGet(t, c, got); string(data) != strconv.Itoa(i) {
			t.Fatalf("%s holds %q", got, data)
		}
	}
	// Deleting does not make a suffix come back.
	if err := c.Delete(t.Context(), last, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := mustCreate(t, c, prefix, nil, Sequential); got <= last {
		t.Fatalf("sequential name %q after delete not after %q", got, last)
	}
}

func testSequentialConcurrent(t *testing.T, newSession newSessionFunc) {
	const sessions, workers, each = 3, 6, 5
	cs := make([]Coordinator, sessions)
	for i := range cs {
		cs[i], _ = newSession(t)
	}
	base := testBase(t, cs[0])
	var (
		mu    sync.Mutex // guards names and errs
		names []string
		errs  []error
		wg    sync.WaitGroup
	)
	for w := range sessions * workers {
		c := cs[w%sessions]
		wg.Go(func() {
			for range each {
				got, err := c.Create(t.Context(), base+"/n-", nil, Sequential)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					names = append(names, got)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d creates failed, first: %v", len(errs), errs[0])
	}
	slices.Sort(names)
	if n := len(slices.Compact(slices.Clone(names))); n != sessions*workers*each {
		t.Fatalf("%d unique names from %d creates", n, sessions*workers*each)
	}
	children, _, err := cs[1].Children(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range children {
		if JoinPath(base, name) != names[i] {
			t.Fatalf("child %d is %s, created %s", i, name, names[i])
		}
	}
}

func testEphemeralGoneOnClose(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	a, _ := newSession(t)
	b, _ := newSession(t)
	base := testBase(t, b)
	eph, kept := base+"/eph", base+"/kept"

	mustCreate(t, a, eph, []byte("a"), Ephemeral)
	mustCreate(t, a, kept, nil, 0)
	watchFn, watch := WatchChan()
	ok, st, err := b.ExistsW(ctx, eph, watchFn)
	if err != nil || !ok {
		t.Fatalf("ExistsW(ephemeral) = %v, %v", ok, err)
	}
	if st.EphemeralOwner == 0 || st.EphemeralOwner != a.SessionID() {
		t.Fatalf("EphemeralOwner %#x, owner session %#x", st.EphemeralOwner, a.SessionID())
	}

	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ev := nextEvent(t, watch); ev.Type != EventNodeDeleted || ev.Path != eph {
		t.Fatalf("watch got %v, want NodeDeleted %s", ev, eph)
	}
	mustExist(t, b, eph, false)
	mustExist(t, b, kept, true)
}

func testEphemeralGoneOnExpire(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	a, ctl := newSession(t)
	b, _ := newSession(t)
	base := testBase(t, b)
	events := a.SessionEvents()
	waitState(t, events, StateConnected)
	oldID := a.SessionID()

	eph := base + "/eph"
	mustCreate(t, a, eph, nil, Ephemeral)
	seq := mustCreate(t, a, base+"/seq-", nil, Ephemeral|Sequential)
	mustCreate(t, a, base+"/kept", nil, 0)
	ownFn, ownWatch := WatchChan()
	_, _, err := a.GetW(ctx, base, ownFn)
	if err != nil {
		t.Fatal(err)
	}
	otherFn, otherWatch := WatchChan()
	_, _, err = b.ExistsW(ctx, eph, otherFn)
	if err != nil {
		t.Fatal(err)
	}

	ctl.Expire(t)

	if ev := nextEvent(t, otherWatch); ev.Type != EventNodeDeleted || ev.Path != eph {
		t.Fatalf("other session's watch got %v, want NodeDeleted %s", ev, eph)
	}
	mustExist(t, b, eph, false)
	mustExist(t, b, seq, false)
	mustExist(t, b, base+"/kept", true)

	waitState(t, events, StateExpired)
	if ev := nextEvent(t, ownWatch); ev.Type != EventSession || ev.State != StateExpired || ev.Path != base {
		t.Fatalf("expired session's watch got %v, want Session(Expired) %s", ev, base)
	}
	waitState(t, events, StateConnected)
	newID := a.SessionID()
	if newID == 0 || newID == oldID {
		t.Fatalf("session ID after expiry %#x (before %#x)", newID, oldID)
	}
	if s := a.State(); s != StateConnected {
		t.Fatalf("State after the new session = %v", s)
	}

	// The owner re-registers its ephemeral in the new session.
	mustCreate(t, a, eph, nil, Ephemeral)
	if st := mustExist(t, b, eph, true); st.EphemeralOwner != newID {
		t.Fatalf("re-created ephemeral owned by %#x, want %#x", st.EphemeralOwner, newID)
	}
}

func testSessionLifecycle(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	events := c.SessionEvents()
	select {
	case s := <-events:
		if s != StateConnected {
			t.Fatalf("first session event %v, want Connected", s)
		}
	case <-time.After(waitFor):
		t.Fatal("no first session event")
	}
	if s := c.State(); s != StateConnected {
		t.Fatalf("State = %v", s)
	}
	if c.SessionID() == 0 {
		t.Fatal("SessionID is 0 on a connected handle")
	}
	if c.SessionEvents() != events {
		t.Fatal("SessionEvents returned a different channel")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case s, ok := <-events:
		if ok {
			t.Fatalf("session event %v after Close", s)
		}
	case <-time.After(waitFor):
		t.Fatal("SessionEvents not closed by Close")
	}
	if s := c.State(); s != StateClosed {
		t.Fatalf("State after Close = %v", s)
	}
	if id := c.SessionID(); id != 0 {
		t.Fatalf("SessionID after Close = %#x", id)
	}
	calls := []struct {
		name string
		do   func() error
	}{
		{"create", func() error { _, err := c.Create(ctx, "/x", nil, 0); return err }},
		{"get", func() error { _, _, err := c.Get(ctx, "/"); return err }},
		{"getw", func() error { _, _, err := c.GetW(ctx, "/", func(Event) {}); return err }},
		{"exists", func() error { _, _, err := c.Exists(ctx, "/"); return err }},
		{"children", func() error { _, _, err := c.Children(ctx, "/"); return err }},
		{"set", func() error { _, err := c.Set(ctx, "/x", nil, AnyVersion); return err }},
		{"delete", func() error { return c.Delete(ctx, "/x", AnyVersion) }},
		{"multi", func() error { _, err := c.Multi(ctx, CheckOp("/", AnyVersion)); return err }},
	}
	for _, call := range calls {
		wantErr(t, call.name+" after Close", call.do(), ErrClosed)
	}
}

func testPathHelpers(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)

	deep := base + "/a/b/c"
	for range 2 { // the second call finds everything in place
		if err := EnsurePath(ctx, c, deep); err != nil {
			t.Fatalf("EnsurePath: %v", err)
		}
	}
	mustExist(t, c, deep, true)

	got, err := CreateAll(ctx, c, base+"/x/y/z", []byte("z"), 0)
	if err != nil || got != base+"/x/y/z" {
		t.Fatalf("CreateAll = %q, %v", got, err)
	}
	if data, _ := mustGet(t, c, got); string(data) != "z" {
		t.Fatalf("CreateAll data %q", data)
	}
	_, err = CreateAll(ctx, c, base+"/x/y/z", nil, 0)
	wantErr(t, "CreateAll(existing)", err, ErrNodeExists)

	got, err = CreateAll(ctx, c, base+"/q/r/", nil, Sequential|Ephemeral)
	if err != nil || got != base+"/q/r/0000000000" {
		t.Fatalf("CreateAll(sequential) = %q, %v", got, err)
	}
	wantErr(t, "EnsurePath(under ephemeral)", EnsurePath(ctx, c, got+"/child"), ErrNoChildrenForEphemerals)
}

func testContextCanceled(t *testing.T, newSession newSessionFunc) {
	c, _ := newSession(t)
	base := testBase(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Create(ctx, base+"/n", nil, 0)
	wantErr(t, "Create(canceled)", err, context.Canceled)
	_, _, err = c.Get(ctx, base)
	wantErr(t, "Get(canceled)", err, context.Canceled)
	mustExist(t, c, base+"/n", false)
}
