package tier

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// diskCache keeps whole remote log objects on local disk, bounded in bytes
// with LRU eviction, so that a segment read again (by another consumer, a
// second replay, or after a restart) is served from a file with sendfile as
// a hot segment is, instead of through ranged GETs.
//
// A file is named by the identity of the record it was fetched for
// (recordIdent: key, upload ID, sizes and the log object's SHA-256), so a
// re-uploaded segment, whatever its name or offsets, never finds another's
// file. A file holds exactly the log object's bytes. It is assembled from
// the chunks the cold reader fetches (<ident>.part, written at their
// offsets) and becomes <ident>.seg only once its SHA-256 equals the
// record's; a .seg is hashed again before this process first serves it and
// whenever its size or modification time changes, so a file damaged on
// disk, or left by an older record, is dropped and fetched again, never
// served. The index is rebuilt from the directory on start: .seg files in
// modification-time order (their LRU order at the last fill), .part files
// and orphaned .idx files removed, files of other names left alone.
type diskCache struct {
	root  *os.Root // the cache directory; names never leave it
	dir   string
	limit int64
	log   *slog.Logger

	mu     sync.Mutex // guards closed, size, order, byName and the entries in them
	closed bool
	size   int64      // bytes of every entry (a .part counts its full size)
	order  *list.List // front: most recently used; values are *diskEntry
	byName map[string]*list.Element

	hits, misses, evictions, corrupt atomic.Int64
}

// diskEntry is one cached log object, complete (.seg) or being assembled
// (.part).
type diskEntry struct {
	ident string
	size  int64
	// complete: the .seg file. verified: its SHA-256 matched a record in
	// this process, when it had modTime and the entry's size.
	complete bool
	verified bool
	modTime  time.Time
	// indexSize is the bytes of the .idx file beside a .seg (0: none):
	// the segment's offset index, once checked against the .seg.
	indexSize int64
	// Assembling: the .part file (written with WriteAt), which chunks it
	// holds, and how many.
	part  *os.File
	have  []bool
	nHave int
}

// DiskCacheStats counts a disk cache's use since it opened.
type DiskCacheStats struct {
	// Hits and Misses count reads that found (or did not find) a verified
	// file for their segment; Evictions files removed to stay in the
	// bound; Corrupt files whose bytes no longer matched their record
	// (removed, and read from the object store again).
	Hits, Misses, Evictions, Corrupt int64
	// Bytes is the disk the cache holds, files being assembled included.
	Bytes int64
}

const (
	segSuffix   = ".seg"
	partSuffix  = ".part"
	indexSuffix = ".idx"
)

// recordIdent names the files cached for seg: a hash over everything in
// its record that identifies the log object's bytes.
func recordIdent(seg RemoteSegment) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%s\x00%s", seg.Key, seg.ID, seg.Size, seg.IndexSize, seg.SHA256, seg.CRC64NVME)
	return hex.EncodeToString(h.Sum(nil)[:20])
}

// openDiskCache opens (creating it) the cache in dir, bounded by limit
// bytes, and rebuilds its index from the files there.
func openDiskCache(dir string, limit int64, log *slog.Logger) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	c := &diskCache{root: root, dir: dir, limit: limit, log: log, order: list.New(), byName: map[string]*list.Element{}}
	ents, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		_ = root.Close()
		return nil, err
	}
	type found struct {
		ident string
		size  int64
		mod   time.Time
	}
	var segs []found
	indexes := map[string]int64{}
	for _, de := range ents {
		name := de.Name()
		if ident, ok := strings.CutSuffix(name, indexSuffix); ok && de.Type().IsRegular() && validIdent(ident) {
			if fi, err := de.Info(); err == nil {
				indexes[ident] = fi.Size()
				continue
			}
		}
		ident, ok := strings.CutSuffix(name, segSuffix)
		if ok && de.Type().IsRegular() && validIdent(ident) {
			if fi, err := de.Info(); err == nil {
				segs = append(segs, found{ident, fi.Size(), fi.ModTime()})
				continue
			}
		}
		// A file being assembled when the broker stopped, or one of ours
		// that is not a regular file with a valid name. Anything else is
		// not the cache's: left alone (and not counted), so that a
		// directory given by mistake loses nothing.
		if strings.HasSuffix(name, partSuffix) || strings.HasSuffix(name, segSuffix) || strings.HasSuffix(name, indexSuffix) {
			if err := root.Remove(name); err != nil {
				log.Warn("remote cache: removing a stray file", "file", name, "err", err)
			}
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].mod.Before(segs[j].mod) })
	for _, s := range segs { // oldest first, so the newest ends at the front
		e := &diskEntry{ident: s.ident, size: s.size, complete: true, indexSize: indexes[s.ident]}
		delete(indexes, s.ident)
		c.byName[s.ident] = c.order.PushFront(e)
		c.size += s.size + e.indexSize
	}
	for ident := range indexes { // no log object beside it
		_ = root.Remove(ident + indexSuffix)
	}
	c.mu.Lock()
	c.evictLocked(0)
	c.mu.Unlock()
	return c, nil
}

func validIdent(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Close closes the files being assembled and the directory. The cold
// reader calls it after its own goroutines stopped.
func (c *diskCache) Close() error {
	c.mu.Lock()
	c.closed = true
	for e := c.order.Front(); e != nil; e = e.Next() {
		if de := e.Value.(*diskEntry); de.part != nil {
			_ = de.part.Close()
		}
	}
	c.mu.Unlock()
	return c.root.Close()
}

// Stats returns the cache's counts.
func (c *diskCache) Stats() DiskCacheStats {
	c.mu.Lock()
	size := c.size
	c.mu.Unlock()
	return DiskCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load(), Bytes: size}
}

// has reports whether seg's whole log object is cached (verified or not).
func (c *diskCache) has(seg RemoteSegment) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byName[recordIdent(seg)]
	return ok && e.Value.(*diskEntry).complete
}

// index returns the offset index stored beside seg's cached log object, or
// false. The caller decodes and checks it as it would the object store's.
func (c *diskCache) index(seg RemoteSegment) ([]byte, bool) {
	ident := recordIdent(seg)
	c.mu.Lock()
	el, ok := c.byName[ident]
	ok = ok && !c.closed && el.Value.(*diskEntry).indexSize > 0
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	f, err := c.root.Open(ident + indexSuffix)
	if err != nil {
		return nil, false
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, seg.IndexSize+1)) // bounded by the record
	return b, err == nil
}

// putIndex stores seg's offset index beside its cached log object, once
// the reader checked the two against each other, so that a restarted
// broker serves the segment without asking the object store anything.
func (c *diskCache) putIndex(seg RemoteSegment, b []byte) {
	ident := recordIdent(seg)
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byName[ident]
	if c.closed || !ok || !el.Value.(*diskEntry).complete || el.Value.(*diskEntry).indexSize > 0 {
		return
	}
	// Small (16 bytes a batch) and written once: under the lock, so that
	// an eviction never races the write.
	if err := c.root.WriteFile(ident+indexSuffix, b, 0o644); err != nil {
		c.log.Warn("remote cache: writing an index", "err", err)
		_ = c.root.Remove(ident + indexSuffix)
		return
	}
	e := el.Value.(*diskEntry)
	e.indexSize = int64(len(b))
	c.size += e.indexSize
	c.evictLocked(0)
}

// open returns a descriptor of seg's cached log object, of its own (the
// caller closes it), or false. A file not yet verified in this process, or
// changed since, is hashed first; one that does not match seg's record is
// removed and counted, and open returns false: the caller reads the object
// store.
func (c *diskCache) open(seg RemoteSegment, count bool) (*os.File, bool) {
	hit, miss := c.hits.Add, c.misses.Add
	if !count {
		hit = func(int64) int64 { return 0 }
		miss = hit
	}
	ident := recordIdent(seg)
	c.mu.Lock()
	el, ok := c.byName[ident]
	if c.closed || !ok || !el.Value.(*diskEntry).complete {
		c.mu.Unlock()
		miss(1)
		return nil, false
	}
	e := el.Value.(*diskEntry)
	c.order.MoveToFront(el)
	verified, mod := e.verified, e.modTime
	c.mu.Unlock()

	f, err := c.root.Open(ident + segSuffix)
	if err != nil { // evicted since, or removed under us
		c.dropIf(e, false)
		miss(1)
		return nil, false
	}
	fi, err := f.Stat()
	if err == nil && verified && fi.Size() == seg.Size && fi.ModTime().Equal(mod) {
		hit(1)
		return f, true
	}
	if err == nil {
		err = checkObject(f, seg)
	}
	if err != nil {
		_ = f.Close()
		c.corrupt.Add(1)
		miss(1)
		c.log.Warn("remote cache: a cached segment does not match its record; fetching it again", "key", seg.LogKey(), "file", ident+segSuffix, "err", err)
		c.dropIf(e, true)
		return nil, false
	}
	c.mu.Lock()
	e.verified, e.modTime = true, fi.ModTime()
	c.mu.Unlock()
	hit(1)
	return f, true
}

// checkObject checks that f holds exactly seg's log object: its size and
// checksum are the record's. The checksum is the CRC-64/NVME when the
// record has one (about 50 times cheaper than SHA-256 here, and as sure
// against damage: the batches inside carry their own CRCs as well), else
// the SHA-256.
func checkObject(f *os.File, seg RemoteSegment) error {
	var h hash.Hash
	want := seg.SHA256
	if seg.CRC64NVME != "" {
		h, want = NewCRC64NVME(), seg.CRC64NVME
	} else {
		h = sha256.New()
	}
	n, err := io.Copy(h, io.NewSectionReader(f, 0, seg.Size+1))
	switch {
	case err != nil:
		return err
	case n != seg.Size:
		return fmt.Errorf("%d bytes, the record says %d", n, seg.Size)
	case hex.EncodeToString(h.Sum(nil)) != want:
		return errors.New("checksum differs from the record's")
	}
	return nil
}

// fill writes chunk c (of chunkBytes-sized chunks) of seg's log object,
// as fetched, into the file being assembled for it, starting one if there
// is none and the object fits the bound. The chunk that completes the file
// has the whole checked against the record before it becomes servable.
// Errors only log: the cache is an optimisation, the read goes on. It
// reports whether this chunk completed a file that is now servable.
func (c *diskCache) fill(seg RemoteSegment, chunkBytes, chunk int64, data []byte) bool {
	e := c.reserve(seg, chunkBytes, chunk)
	return e != nil && c.write(seg, e, chunk, chunkBytes, data)
}

// reserve returns the entry chunk is to be written into (starting one),
// or nil when there is nothing to write: the object does not fit or has
// no checksum, the cache is closed, or the file has the chunk already.
func (c *diskCache) reserve(seg RemoteSegment, chunkBytes, chunk int64) *diskEntry {
	if seg.SHA256 == "" && seg.CRC64NVME == "" || seg.Size <= 0 || seg.Size > c.limit {
		return nil
	}
	ident := recordIdent(seg)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if el, ok := c.byName[ident]; ok {
		e := el.Value.(*diskEntry)
		if e.complete || e.have[chunk] {
			return nil
		}
		return e
	}
	c.evictLocked(seg.Size)
	f, err := c.root.OpenFile(ident+partSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		c.log.Warn("remote cache: creating a file", "err", err)
		return nil
	}
	e := &diskEntry{ident: ident, size: seg.Size, part: f, have: make([]bool, (seg.Size+chunkBytes-1)/chunkBytes)}
	c.byName[ident] = c.order.PushFront(e)
	c.size += seg.Size
	return e
}

// write writes a reserved chunk into e's file and records it there,
// finishing the file with the last one. Another writer of the same chunk
// may have completed (or evicted) e meanwhile: then nothing is recorded.
func (c *diskCache) write(seg RemoteSegment, e *diskEntry, chunk, chunkBytes int64, data []byte) bool {
	c.mu.Lock()
	part := e.part
	c.mu.Unlock()
	// Outside the lock: an eviction or completion meanwhile closes part
	// and this write fails, which is fine.
	if _, err := part.WriteAt(data, chunk*chunkBytes); err != nil {
		if !errors.Is(err, os.ErrClosed) && !errors.Is(err, os.ErrInvalid) {
			c.log.Warn("remote cache: writing a chunk", "file", e.ident+partSuffix, "err", err)
			c.dropIf(e, true)
		}
		return false
	}
	c.mu.Lock()
	if el, ok := c.byName[e.ident]; !ok || el.Value.(*diskEntry) != e || e.complete || e.have[chunk] {
		c.mu.Unlock()
		return false
	}
	e.have[chunk] = true
	e.nHave++
	done := e.nHave == len(e.have)
	c.mu.Unlock()
	return done && c.finish(seg, e)
}

// finish turns a fully written .part into a servable .seg once its bytes
// are proven to be the record's log object.
func (c *diskCache) finish(seg RemoteSegment, e *diskEntry) bool {
	if err := checkObject(e.part, seg); err != nil {
		if !errors.Is(err, os.ErrClosed) {
			// The chunks were the object store's; the reads that served
			// them checked their batches, so this is a bad object (counted
			// there) or a bad write here. Either way, not kept.
			c.log.Warn("remote cache: an assembled segment does not match its record; not kept", "key", seg.LogKey(), "err", err)
			c.dropIf(e, true)
		}
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byName[e.ident]; !ok || el.Value.(*diskEntry) != e {
		return false // evicted while it was hashed
	}
	fi, err := e.part.Stat()
	if err == nil {
		err = c.root.Rename(e.ident+partSuffix, e.ident+segSuffix)
	}
	_ = e.part.Close()
	e.part, e.have = nil, nil
	if err != nil {
		c.log.Warn("remote cache: keeping an assembled segment", "err", err)
		c.removeLocked(c.byName[e.ident], true)
		return false
	}
	e.complete, e.verified, e.modTime = true, true, fi.ModTime()
	return true
}

// drop removes what is cached for seg.
func (c *diskCache) drop(seg RemoteSegment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byName[recordIdent(seg)]; ok {
		c.removeLocked(el, true)
	}
}

// dropIf removes e if it is still the entry for its name; removeFile says
// whether its file goes too (false: it is gone already).
func (c *diskCache) dropIf(e *diskEntry, removeFile bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byName[e.ident]; ok && el.Value.(*diskEntry) == e {
		c.removeLocked(el, removeFile)
	}
}

// evictLocked removes least recently used entries until need more bytes
// fit the bound. Readers holding an evicted .seg open keep reading it: the
// name goes, the inode stays until they close it.
func (c *diskCache) evictLocked(need int64) {
	for c.size+need > c.limit && c.order.Len() > 0 {
		c.removeLocked(c.order.Back(), true)
		c.evictions.Add(1)
	}
}

func (c *diskCache) removeLocked(el *list.Element, removeFile bool) {
	e := el.Value.(*diskEntry)
	c.order.Remove(el)
	delete(c.byName, e.ident)
	c.size -= e.size + e.indexSize
	if e.indexSize > 0 && removeFile {
		_ = c.root.Remove(e.ident + indexSuffix)
	}
	name := e.ident + segSuffix
	if !e.complete {
		name = e.ident + partSuffix
		_ = e.part.Close()
	}
	if removeFile {
		if err := c.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("remote cache: removing a file", "file", name, "err", err)
		}
	}
}
