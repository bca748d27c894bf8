package coord

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

type memControl struct{ s *MemSession }

func (c memControl) Expire(*testing.T) { c.s.Expire() }

func newMemSessions(t *testing.T, opts MemOptions) newSessionFunc {
	store, err := NewMemStore(opts)
	if err != nil {
		t.Fatalf("NewMemStore: %v", err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	})
	return func(t *testing.T) (Coordinator, sessionControl) {
		s := store.Session()
		t.Cleanup(func() { _ = s.Close() })
		return s, memControl{s}
	}
}

func TestMemConformance(t *testing.T) {
	runConformance(t, newMemSessions(t, MemOptions{}))
}

// TestMemConformancePersisted runs the suite with a store file, so every mutation
// also goes through the persist path.
func TestMemConformancePersisted(t *testing.T) {
	runConformance(t, newMemSessions(t, MemOptions{Path: filepath.Join(t.TempDir(), "coord.json")}))
}

func TestMemPersistRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state", "coord.json")

	store, err := NewMemStore(MemOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	s := store.Session()
	mustCreate(t, s, "/topics", nil, 0)
	mustCreate(t, s, "/topics/orders", []byte(`{"partitions":3}`), 0)
	if _, err := s.Set(ctx, "/topics/orders", []byte(`{"partitions":6}`), 0); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "/brokers", nil, 0)
	mustCreate(t, s, "/brokers/1", []byte("eph"), Ephemeral)
	lastSeq := mustCreate(t, s, "/topics/seq-", nil, Sequential)
	mustCreate(t, s, "/topics/gone", nil, 0)
	if err := s.Delete(ctx, "/topics/gone", AnyVersion); err != nil {
		t.Fatal(err)
	}
	// The files are current before the process goes away: no Close here.
	raw, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "/brokers/1") {
		t.Fatalf("ephemeral written to the journal:\n%s", raw)
	}

	restarted, err := NewMemStore(MemOptions{Path: path})
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	t.Cleanup(func() { _ = restarted.Close() })
	r := restarted.Session()
	data, st := mustGet(t, r, "/topics/orders")
	if string(data) != `{"partitions":6}` || st.Version != 1 {
		t.Fatalf("reloaded /topics/orders: %q version %d", data, st.Version)
	}
	mustExist(t, r, "/brokers", true)
	mustExist(t, r, "/brokers/1", false)
	mustExist(t, r, "/topics/gone", false)
	// Sequential suffixes keep growing across the restart.
	if got := mustCreate(t, r, "/topics/seq-", nil, Sequential); got <= lastSeq {
		t.Fatalf("sequential name after restart %q, not after %q", got, lastSeq)
	}
	_ = store.Close()
}

func TestMemPersistLoadErrors(t *testing.T) {
	cases := []struct {
		name    string
		content string
	}{
		{"not json", "{"},
		{"wrong format", `{"format":99,"nodes":[]}`},
		{"orphan", `{"format":1,"nodes":[{"path":"/a/b"}]}`},
		{"duplicate", `{"format":1,"nodes":[{"path":"/a"},{"path":"/a"}]}`},
		{"bad path", `{"format":1,"nodes":[{"path":"a"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "coord.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if store, err := NewMemStore(MemOptions{Path: path}); err == nil {
				_ = store.Close()
				t.Fatal("NewMemStore accepted a bad file")
			}
		})
	}
}

func TestMemPersistLeftoverTempFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "coord.json")
	// A write that crashed before its rename leaves a temporary file, which is
	// ignored and swept.
	leftover := filepath.Join(dir, ".coord.json.tmp-123")
	if err := os.WriteFile(leftover, []byte("half a tree"), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := NewMemStore(MemOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover temp file still there: %v", err)
	}
	mustExist(t, store.Session(), "/", true)
}

// TestMemPersistFailure removes the store's directory: the write fails, the
// mutation is taken back, and the store turns read-only with a storage error.
func TestMemPersistFailure(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	store, err := NewMemStore(MemOptions{Path: filepath.Join(dir, "coord.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := store.Session()
	mustCreate(t, s, "/kept", []byte("k"), 0)
	watchFn, watch := WatchChan()
	_, _, err = s.GetW(ctx, "/kept", watchFn)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	_, err = s.Set(ctx, "/kept", []byte("lost"), AnyVersion)
	if !errors.Is(err, api.ErrStorage) {
		t.Fatalf("Set with the directory gone: %v, want a storage error", err)
	}
	if data, st := mustGet(t, s, "/kept"); string(data) != "k" || st.Version != 0 {
		t.Fatalf("failed Set left data %q version %d", data, st.Version)
	}
	noEvent(t, watch, 50*time.Millisecond)
	if store.Err() == nil {
		t.Fatal("store.Err() is nil after a failed write")
	}
	_, err = s.Create(ctx, "/other", nil, 0)
	if !errors.Is(err, api.ErrStorage) {
		t.Fatalf("Create on a read-only store: %v, want a storage error", err)
	}
	mustExist(t, s, "/other", false)
}

func TestMemStoreClose(t *testing.T) {
	store, err := NewMemStore(MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := store.Session()
	mustCreate(t, a, "/eph", nil, Ephemeral)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.State(); s != StateClosed {
		t.Fatalf("session state after store Close: %v", s)
	}
	late := store.Session()
	_, _, err = late.Get(context.Background(), "/")
	wantErr(t, "Get on a session of a closed store", err, ErrClosed)
	if _, ok := <-late.SessionEvents(); ok {
		t.Fatal("session of a closed store has events")
	}
}

func TestMemCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	store, err := NewMemStore(MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		s := store.Session()
		if _, _, err := s.ExistsW(context.Background(), "/x", func(Event) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "goroutines to stop", func() bool { return runtime.NumGoroutine() <= before })
}
