package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// memFileFormat is the version of the persisted tree's layout.
const memFileFormat = 1

// memFile is a snapshot of the persisted tree: every persistent node,
// parents before children, as of journal entry Seq.
type memFile struct {
	Format int           `json:"format"`
	Seq    int64         `json:"seq,omitempty"`
	Nodes  []memFileNode `json:"nodes"`
}

type memFileNode struct {
	Path     string `json:"path"`
	Data     []byte `json:"data,omitempty"` // base64 in the file
	Version  int32  `json:"version"`
	CVersion int32  `json:"cversion"` // kept so sequential suffixes keep growing
	Ctime    int64  `json:"ctime_ms"`
	Mtime    int64  `json:"mtime_ms"`
}

// tempPattern names the temporary files persistLocked writes next to the store file.
func tempPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

// loadTree reads the tree persisted at path: the snapshot, then the
// journal entries after it. A missing snapshot is a tree with only the
// root. Temporary files left by a write that crashed are removed, and so is
// a torn last journal entry.
func loadTree(path string) (*memDisk, map[string]*memNode, error) {
	if stale, err := filepath.Glob(filepath.Join(filepath.Dir(path), tempPattern(path))); err == nil {
		for _, f := range stale {
			_ = os.Remove(f) // best effort: a leftover temp file is only clutter
		}
	}
	disk := &memDisk{path: path}
	flat := map[string]memFileNode{"/": {Path: "/"}}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("coord: load %s: %w", path, err)
	default:
		var f memFile
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, nil, fmt.Errorf("coord: load %s: %w", path, err)
		}
		if f.Format != memFileFormat {
			return nil, nil, fmt.Errorf("coord: load %s: format %d, want %d", path, f.Format, memFileFormat)
		}
		for i, fn := range f.Nodes {
			if err := ValidatePath(fn.Path); err != nil {
				return nil, nil, fmt.Errorf("coord: load %s: node %d: %w", path, i, err)
			}
			if _, dup := flat[fn.Path]; dup && fn.Path != "/" {
				return nil, nil, fmt.Errorf("coord: load %s: node %s appears twice", path, fn.Path)
			}
			flat[fn.Path] = fn
		}
		disk.seq, disk.snapshotSize = f.Seq, int64(len(raw))
	}
	if err := disk.replay(flat); err != nil {
		return nil, nil, err
	}
	nodes, err := buildTree(flat)
	if err != nil {
		return nil, nil, fmt.Errorf("coord: load %s: %w", path, err)
	}
	return disk, nodes, nil
}

// buildTree links the nodes of flat, by path, into a tree.
func buildTree(flat map[string]memFileNode) (map[string]*memNode, error) {
	// A parent's path is a prefix of its child's, so sorted order puts it first.
	paths := slices.Sorted(maps.Keys(flat))
	nodes := make(map[string]*memNode, len(paths))
	for _, p := range paths {
		fn := flat[p]
		n := &memNode{
			data:     fn.Data,
			version:  fn.Version,
			cversion: fn.CVersion,
			ctime:    time.UnixMilli(fn.Ctime),
			mtime:    time.UnixMilli(fn.Mtime),
			children: make(map[string]struct{}),
		}
		if p != "/" {
			parent := nodes[parentPath(p)]
			if parent == nil {
				return nil, fmt.Errorf("node %s has no parent", p)
			}
			parent.children[baseName(p)] = struct{}{}
		}
		nodes[p] = n
	}
	return nodes, nil
}

// snapshotLocked writes every persistent node to the snapshot file, as of
// journal entry seq: a temporary file in the same directory, fsynced,
// renamed over the old one, then the directory fsynced, so a crash leaves
// either the old snapshot or the new one. Callers hold m.mu.
func (m *MemStore) snapshotLocked(seq int64) (int, error) {
	raw, err := encodeSnapshot(m.nodes, seq)
	if err != nil {
		return 0, err
	}
	return len(raw), writeFileAtomic(m.disk.path, raw)
}

// encodeSnapshot renders the persistent nodes as the snapshot file's
// bytes, as of journal entry seq.
func encodeSnapshot(nodes map[string]*memNode, seq int64) ([]byte, error) {
	f := memFile{Format: memFileFormat, Seq: seq, Nodes: make([]memFileNode, 0, len(nodes))}
	for p, n := range nodes {
		if n.owner != 0 {
			continue
		}
		f.Nodes = append(f.Nodes, fileNode(p, n))
	}
	slices.SortFunc(f.Nodes, func(a, b memFileNode) int { return strings.Compare(a.Path, b.Path) })
	return json.Marshal(&f)
}

func fileNode(p string, n *memNode) memFileNode {
	return memFileNode{
		Path:     p,
		Data:     n.data,
		Version:  n.version,
		CVersion: n.cversion,
		Ctime:    n.ctime.UnixMilli(),
		Mtime:    n.mtime.UnixMilli(),
	}
}

func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()           // may already be closed; the write error matters
			_ = os.Remove(tmp.Name()) // best effort; loadTree sweeps leftovers
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(path)
}

// syncDir fsyncs the directory holding path, so a new or renamed entry in it
// survives a crash.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	_ = d.Close() // opened only to sync it
	return err
}
