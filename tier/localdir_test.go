package tier

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func openTestLocalDir(t *testing.T, dir string) *LocalDir {
	t.Helper()
	bkt, err := OpenLocalDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bkt.Close() })
	return bkt
}

func TestLocalDirAcceptance(t *testing.T) {
	AcceptanceTest(t, openTestLocalDir(t, t.TempDir()))
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestLocalDirLayout checks where objects and temp files live, that failed
// uploads leave no temp file, and that Delete prunes empty directories.
func TestLocalDirLayout(t *testing.T) {
	dir := t.TempDir()
	bkt := openTestLocalDir(t, dir)
	mustPut(t, bkt, "topic-0/00000000000000000000.log", []byte("segment"))
	got, err := os.ReadFile(filepath.Join(dir, "objects", "topic-0", "00000000000000000000.log"))
	if err != nil || string(got) != "segment" {
		t.Fatalf("object file: %q, %v", got, err)
	}
	// A failed upload leaves no temp file.
	err = bkt.Put(t.Context(), "topic-0/short.log", plainReader{bytes.NewReader([]byte("abc"))}, 10)
	wantErr(t, "short Put", err, io.ErrUnexpectedEOF)
	if names := dirEntries(t, filepath.Join(dir, "tmp")); len(names) != 0 {
		t.Fatalf("tmp/ holds %q after a failed Put", names)
	}
	// Delete prunes the directories it empties, up to objects/.
	mustPut(t, bkt, "a/b/c/d", []byte("x"))
	if err := bkt.Delete(t.Context(), "a/b/c/d"); err != nil {
		t.Fatal(err)
	}
	if names := dirEntries(t, filepath.Join(dir, "objects")); !slices.Equal(names, []string{"topic-0"}) {
		t.Fatalf("objects/ holds %q after Delete, want only topic-0", names)
	}
}

// TestLocalDirEscape plants symlinks that point out of the directory: no
// operation may follow them out.
func TestLocalDirEscape(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	bkt := openTestLocalDir(t, dir)
	objects := filepath.Join(dir, "objects")
	if err := os.Symlink(outside, filepath.Join(objects, "evil-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(objects, "evil-file")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"evil-dir/secret", "evil-file"} {
		if rc, err := bkt.Get(t.Context(), key); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("Get(%q) escaped the root and read %q", key, b)
		}
		if _, err := bkt.Stat(t.Context(), key); err == nil {
			t.Fatalf("Stat(%q) escaped the root", key)
		}
	}
	if err := bkt.Put(t.Context(), "evil-dir/planted", bytes.NewReader([]byte("x")), 1); err == nil {
		t.Fatal("Put through a symlink out of the root succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file appeared outside the root: %v", err)
	}
	if got := keysOf(listAll(t, bkt, "")); len(got) != 0 {
		t.Fatalf("List shows symlinks: %q", got)
	}
}

// TestLocalDirReopen checks that objects survive a reopen and that stale
// temp files of crashed uploads are removed while fresh ones stay.
func TestLocalDirReopen(t *testing.T) {
	dir := t.TempDir()
	bkt, err := OpenLocalDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, bkt, "k/v", []byte("kept"))
	if err := bkt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bkt.Put(t.Context(), "k/w", bytes.NewReader([]byte("x")), 1); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	stale, fresh := filepath.Join(dir, "tmp", "stale"), filepath.Join(dir, "tmp", "fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * localStaleTmp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	bkt = openTestLocalDir(t, dir)
	equalBytes(t, "Get after reopen", mustGet(t, bkt, "k/v"), []byte("kept"))
	if names := dirEntries(t, filepath.Join(dir, "tmp")); !slices.Equal(names, []string{"fresh"}) {
		t.Fatalf("tmp/ after reopen holds %q, want only the fresh temp file", names)
	}
}

// TestLocalDirShared runs two LocalDirs on one directory, as two brokers of
// `sluice dev` would: each sees the other's objects.
func TestLocalDirShared(t *testing.T) {
	dir := t.TempDir()
	a, b := openTestLocalDir(t, dir), openTestLocalDir(t, dir)
	mustPut(t, a, "shared/x", []byte("from a"))
	equalBytes(t, "Get via b", mustGet(t, b, "shared/x"), []byte("from a"))
	if err := b.Delete(t.Context(), "shared/x"); err != nil {
		t.Fatal(err)
	}
	wantNotExist(t, a, "shared/x")
}
