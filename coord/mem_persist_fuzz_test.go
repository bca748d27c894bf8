package coord

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzLoadTree: a persisted MemStore (the coordinator of `sluice dev`) is
// read back at start from its snapshot and journal. Loading any pair of
// files never panics; what it accepts is a tree (every node's parent
// present, listing it as a child), and a snapshot of that tree loads back
// equal.
func FuzzLoadTree(f *testing.F) {
	// Real files: a store's snapshot and journal after creates, sets,
	// deletes and sequential names, one compaction in between.
	dir := f.TempDir()
	path := filepath.Join(dir, "coord.json")
	store, err := NewMemStore(MemOptions{Path: path, CompactBytes: 1 << 10})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	s := store.Session()
	addFiles := func() {
		snap, _ := os.ReadFile(path)
		journal, _ := os.ReadFile(path + ".journal")
		f.Add(snap, journal)
	}
	for _, p := range []string{"/brokers", "/brokers/ids", "/topics", "/topics/orders"} {
		if _, err := s.Create(ctx, p, []byte(`{"p":"`+p+`"}`), 0); err != nil {
			f.Fatal(err)
		}
	}
	addFiles()
	for i := range 40 {
		if _, err := s.Create(ctx, "/brokers/ids/id-", []byte(fmt.Sprint(i)), Sequential); err != nil {
			f.Fatal(err)
		}
		if _, err := s.Set(ctx, "/topics/orders", []byte(fmt.Sprintf(`{"partitions":%d}`, i)), AnyVersion); err != nil {
			f.Fatal(err)
		}
	}
	addFiles()
	if err := s.Delete(ctx, "/brokers/ids/id-0000000003", AnyVersion); err != nil {
		f.Fatal(err)
	}
	if _, err := s.Create(ctx, "/ephemeral", nil, Ephemeral); err != nil {
		f.Fatal(err)
	}
	addFiles()
	if err := store.Close(); err != nil {
		f.Fatal(err)
	}
	snap, _ := os.ReadFile(path)
	journal, _ := os.ReadFile(path + ".journal")
	f.Add([]byte(nil), journal)                                         // the journal alone
	f.Add(snap, append(journal[:len(journal):len(journal)], "0000"...)) // a torn last entry
	f.Add(snap, append([]byte("00000000 {}\n"), journal...))            // a damaged first entry
	f.Add([]byte(`{"format":1,"nodes":[{"path":"/a/b"}]}`), []byte(nil))
	f.Add([]byte(`{"format":2,"nodes":[]}`), []byte(nil))

	f.Fuzz(func(t *testing.T, snapshot, journal []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "coord.json")
		writeIf(t, path, snapshot)
		writeIf(t, path+".journal", journal)
		disk, nodes, err := loadTree(path)
		if err != nil {
			return
		}
		checkTree(t, nodes)
		// A snapshot of what was loaded, alone, loads back the same tree.
		again := filepath.Join(dir, "again", "coord.json")
		if err := os.MkdirAll(filepath.Dir(again), 0o755); err != nil {
			t.Fatal(err)
		}
		raw, err := encodeSnapshot(nodes, disk.seq)
		if err != nil {
			t.Fatalf("snapshot of a loaded tree: %v", err)
		}
		writeIf(t, again, raw)
		_, back, err := loadTree(again)
		if err != nil {
			t.Fatalf("the snapshot of a loaded tree is refused: %v", err)
		}
		if a, b := renderTree(nodes), renderTree(back); a != b {
			t.Fatalf("the tree loaded from its own snapshot differs:\n%s\n----\n%s", a, b)
		}
	})
}

// writeIf writes data to path unless it is empty (the file is missing).
func writeIf(t *testing.T, path string, data []byte) {
	t.Helper()
	if len(data) == 0 {
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkTree: the root is there, every other node's parent is there and
// lists it, and every child listed is there.
func checkTree(t *testing.T, nodes map[string]*memNode) {
	t.Helper()
	if nodes["/"] == nil {
		t.Fatal("no root")
	}
	for p, n := range nodes {
		if p != "/" {
			parent := nodes[parentPath(p)]
			if parent == nil {
				t.Fatalf("%s has no parent", p)
			}
			if _, ok := parent.children[baseName(p)]; !ok {
				t.Fatalf("%s is not among its parent's children", p)
			}
		}
		for c := range n.children {
			if nodes[childPath(p, c)] == nil {
				t.Fatalf("%s lists a child %q that is not there", p, c)
			}
		}
	}
}

func childPath(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// renderTree renders every node, in path order.
func renderTree(nodes map[string]*memNode) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[p]
		fmt.Fprintf(&b, "%s data=%q v=%d cv=%d ctime=%d mtime=%d children=%v\n", p, n.data, n.version, n.cversion,
			n.ctime.UnixMilli(), n.mtime.UnixMilli(), slices.Sorted(maps.Keys(n.children)))
	}
	return b.String()
}
