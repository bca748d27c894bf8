package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// memFileFormat is the version of the persisted tree's layout.
const memFileFormat = 1

// memFile is the persisted tree: every persistent node, parents before children.
type memFile struct {
	Format int           `json:"format"`
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

// loadTree reads the tree persisted at path. A missing file is a tree with only the
// root. Temporary files left by a write that crashed are removed.
func loadTree(path string) (map[string]*memNode, error) {
	if stale, err := filepath.Glob(filepath.Join(filepath.Dir(path), tempPattern(path))); err == nil {
		for _, f := range stale {
			_ = os.Remove(f) // best effort: a leftover temp file is only clutter
		}
	}
	nodes := map[string]*memNode{"/": newMemNode(nil, 0, time.UnixMilli(0))}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nodes, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: load %s: %w", path, err)
	}
	var f memFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("coord: load %s: %w", path, err)
	}
	if f.Format != memFileFormat {
		return nil, fmt.Errorf("coord: load %s: format %d, want %d", path, f.Format, memFileFormat)
	}
	// A parent's path is a prefix of its child's, so sorting puts it first.
	slices.SortFunc(f.Nodes, func(a, b memFileNode) int { return strings.Compare(a.Path, b.Path) })
	for i, fn := range f.Nodes {
		if err := ValidatePath(fn.Path); err != nil {
			return nil, fmt.Errorf("coord: load %s: node %d: %w", path, i, err)
		}
		n := &memNode{
			data:     fn.Data,
			version:  fn.Version,
			cversion: fn.CVersion,
			ctime:    time.UnixMilli(fn.Ctime),
			mtime:    time.UnixMilli(fn.Mtime),
			children: make(map[string]struct{}),
		}
		if fn.Path == "/" {
			n.children = nodes["/"].children
			nodes["/"] = n
			continue
		}
		if nodes[fn.Path] != nil {
			return nil, fmt.Errorf("coord: load %s: node %s appears twice", path, fn.Path)
		}
		parent := nodes[parentPath(fn.Path)]
		if parent == nil {
			return nil, fmt.Errorf("coord: load %s: node %s has no parent", path, fn.Path)
		}
		parent.children[baseName(fn.Path)] = struct{}{}
		nodes[fn.Path] = n
	}
	return nodes, nil
}

// persistLocked writes every persistent node to the store file: a temporary file in
// the same directory, fsynced, renamed over the old one, then the directory fsynced,
// so a crash leaves either the old tree or the new one. Callers hold m.mu.
func (m *MemStore) persistLocked() error {
	if m.path == "" {
		return nil
	}
	f := memFile{Format: memFileFormat, Nodes: make([]memFileNode, 0, len(m.nodes))}
	for p, n := range m.nodes {
		if n.owner != 0 {
			continue
		}
		f.Nodes = append(f.Nodes, memFileNode{
			Path:     p,
			Data:     n.data,
			Version:  n.version,
			CVersion: n.cversion,
			Ctime:    n.ctime.UnixMilli(),
			Mtime:    n.mtime.UnixMilli(),
		})
	}
	slices.SortFunc(f.Nodes, func(a, b memFileNode) int { return strings.Compare(a.Path, b.Path) })
	raw, err := json.Marshal(&f)
	if err != nil {
		return fmt.Errorf("coord: persist %s: %w", m.path, err)
	}
	if err := writeFileAtomic(m.path, raw); err != nil {
		return fmt.Errorf("coord: persist %s: %w", m.path, err)
	}
	return nil
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
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
