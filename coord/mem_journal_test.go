package coord

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reopen closes store and opens the files at path again.
func reopen(t *testing.T, store *MemStore, path string) *MemStore {
	t.Helper()
	if store != nil {
		_ = store.Close()
	}
	s, err := NewMemStore(MemOptions{Path: path, CompactBytes: 16 << 10})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Many writes: the journal is compacted into the snapshot as it grows, so
// the files stay within a few times the tree's size, and a restart finds
// every write.
func TestMemJournalCompacts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coord.json")
	store := reopen(t, nil, path)
	s := store.Session()
	mustCreate(t, s, "/ids", nil, 0)
	mustCreate(t, s, "/counter", []byte("0"), 0)
	const n = 1_000
	var last string
	for i := range n {
		last = mustCreate(t, s, "/ids/p-", []byte(`{"epoch":0}`), Sequential)
		if _, err := s.Set(ctx, "/counter", []byte(fmt.Sprint(i+1)), AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ := os.Stat(path)
	journal, _ := os.Stat(path + ".journal")
	if snap == nil || journal == nil {
		t.Fatalf("snapshot %v, journal %v", snap, journal)
	}
	t.Logf("%d creates and sets: snapshot %d bytes, journal %d bytes", n, snap.Size(), journal.Size())
	if journal.Size() > max(16<<10, snap.Size())+4096 {
		t.Fatalf("journal of %d bytes beside a %d-byte snapshot: not compacted", journal.Size(), snap.Size())
	}
	r := reopen(t, store, path).Session()
	if data, st := mustGet(t, r, "/counter"); string(data) != fmt.Sprint(n) || st.Version != n {
		t.Fatalf("/counter after restart: %q version %d", data, st.Version)
	}
	kids, _, err := r.Children(ctx, "/ids")
	if err != nil || len(kids) != n {
		t.Fatalf("%d children of /ids after restart, %v", len(kids), err)
	}
	if got := mustCreate(t, r, "/ids/p-", nil, Sequential); got <= last {
		t.Fatalf("sequential name after restart %q, not after %q", got, last)
	}
}

// A crash mid-append leaves a torn last entry: it is cut off, the writes
// before it are kept, and the store takes writes again.
func TestMemJournalTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coord.json")
	store := reopen(t, nil, path)
	s := store.Session()
	mustCreate(t, s, "/a", []byte("1"), 0)
	mustCreate(t, s, "/b", []byte("2"), 0)
	raw, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	cut := bytes.LastIndexByte(raw[:len(raw)-1], '\n') + 1
	for _, torn := range [][]byte{raw[:len(raw)-1], raw[:cut+5], append(raw[:cut:cut], []byte("deadbeef {\"seq\":2}\n")...)} {
		if err := os.WriteFile(path+".journal", torn, 0o644); err != nil {
			t.Fatal(err)
		}
		r := reopen(t, store, path)
		store = r
		rs := r.Session()
		mustExist(t, rs, "/a", true)
		mustExist(t, rs, "/b", false)
		mustCreate(t, rs, "/b", []byte("2"), 0)
		if err := rs.Delete(context.Background(), "/b", AnyVersion); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		mustExist(t, reopen(t, nil, path).Session(), "/b", false)
		if err := os.WriteFile(path+".journal", raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A damaged entry with good ones after it is corruption, not a torn
// append: the store refuses to load rather than lose the entries after it.
func TestMemJournalDamagedMiddle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coord.json")
	store := reopen(t, nil, path)
	s := store.Session()
	for _, p := range []string{"/a", "/b", "/c"} {
		mustCreate(t, s, p, nil, 0)
	}
	_ = store.Close()
	raw, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(raw), `"/b"`)
	raw[i+2] = 'x'
	if err := os.WriteFile(path+".journal", raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := NewMemStore(MemOptions{Path: path}); err == nil {
		_ = s.Close()
		t.Fatal("a journal damaged in the middle was loaded")
	}
}

// A crash after a compaction wrote its snapshot but before it emptied the
// journal: the entries the snapshot holds are not applied twice.
func TestMemJournalCrashMidCompaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coord.json")
	store := reopen(t, nil, path)
	s := store.Session()
	mustCreate(t, s, "/x", []byte("0"), 0)
	mustCreate(t, s, "/gone", nil, 0)
	if err := s.Delete(ctx, "/gone", AnyVersion); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Set(ctx, "/x", []byte(fmt.Sprint(i+1)), AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	journal, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	_, err = store.snapshotLocked(store.disk.seq)
	store.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// The journal was not emptied: every entry in it is in the snapshot too.
	r := reopen(t, store, path).Session()
	if data, st := mustGet(t, r, "/x"); string(data) != "3" || st.Version != 3 {
		t.Fatalf("/x: %q version %d", data, st.Version)
	}
	mustExist(t, r, "/gone", false)
	if _, err := r.Set(ctx, "/x", []byte("4"), 3); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path + ".journal")
	if !bytes.HasPrefix(after, journal) {
		t.Fatal("the journal lost entries")
	}
	if data, _ := mustGet(t, reopen(t, nil, path).Session(), "/x"); string(data) != "4" {
		t.Fatalf("/x after a write past the snapshot: %q", data)
	}
}
