package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// ColdReader serves fetches below the local log start from the object store:
// ranged GETs of fixed-size chunks through a bounded cache, with read-ahead of
// the next chunk for sequential consumers. Its object-store traffic is bounded
// (MaxConcurrent GETs at once) so that a consumer replaying history cannot
// starve producers or local reads of CPU, memory or connections.
//
// It trusts nothing it reads back: an index is checked against its segment's
// record before use, and every byte range against the index (whole batches,
// good CRCs, the offsets and positions the index gives) before it is served.
// A segment that fails is REMOTE_CORRUPT (retriable), counted in Stats, and
// dropped from the caches, so a repaired object is read again; nothing past
// it is served, so a reader never skips it. Memory is bounded by the record,
// never by what an object claims.
type ColdReader struct {
	bucket  Bucket
	chunk   int64
	sem     chan struct{} // bounds concurrent GETs, read-ahead included
	cache   *chunkCache
	disk    *diskCache // nil: memory only
	log     *slog.Logger
	ctx     context.Context // read-ahead's parent; ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	indexMu sync.Mutex              // guards indexes and onDisk
	indexes map[string][]indexEntry // by segment ID; small, kept for every segment read
	// onDisk says, by segment ID, whether the segment's index matched its
	// file in the disk cache (false: it did not, so the segment is read
	// from the object store, whose reads check every batch); absent: not
	// checked yet.
	onDisk map[string]bool

	forgets        atomic.Uint64 // Forget calls; a chunk fetched across one is not cached
	corruptIndexes atomic.Int64
	corruptLogs    atomic.Int64
}

// ColdReaderStats counts what a ColdReader found since it started.
type ColdReaderStats struct {
	// CorruptIndexes counts index objects (or records) that failed their
	// checks; CorruptLogs byte ranges of log objects that did.
	CorruptIndexes, CorruptLogs int64
	// Disk counts the on-disk cache's use (zero without one).
	Disk DiskCacheStats
}

// Stats returns the reader's counts.
func (r *ColdReader) Stats() ColdReaderStats {
	st := ColdReaderStats{CorruptIndexes: r.corruptIndexes.Load(), CorruptLogs: r.corruptLogs.Load()}
	if r.disk != nil {
		st.Disk = r.disk.Stats()
	}
	return st
}

// ColdReaderOptions tune a ColdReader; zero values take the defaults.
type ColdReaderOptions struct {
	ChunkBytes    int64 // default 1 MiB
	CacheBytes    int64 // default 64 MiB
	MaxConcurrent int   // default 4
	// DiskCacheDir holds whole log objects read before (diskcache.go),
	// bounded by DiskCacheBytes; either unset: no disk cache, the memory
	// one only. A directory that cannot be opened is logged and leaves the
	// reader memory-only.
	DiskCacheDir   string
	DiskCacheBytes int64
	Logger         *slog.Logger
}

// NewColdReader returns a reader over bkt.
func NewColdReader(bkt Bucket, o ColdReaderOptions) *ColdReader {
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 1 << 20
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 4
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &ColdReader{bucket: bkt, chunk: o.ChunkBytes, sem: make(chan struct{}, o.MaxConcurrent),
		cache: newChunkCache(o.CacheBytes), log: o.Logger, ctx: ctx, cancel: cancel, indexes: map[string][]indexEntry{}, onDisk: map[string]bool{}}
	if o.DiskCacheDir != "" && o.DiskCacheBytes > 0 {
		d, err := openDiskCache(o.DiskCacheDir, o.DiskCacheBytes, o.Logger)
		if err != nil {
			o.Logger.Error("remote cache: cannot open its directory; cold reads use memory only", "dir", o.DiskCacheDir, "err", err)
		} else {
			r.disk = d
		}
	}
	return r
}

// Close stops read-ahead, waits for it, then closes the disk cache.
func (r *ColdReader) Close() {
	// 1. No new read-ahead; the running ones end at their next wait.
	r.cancel()
	// 2. Read-ahead writes into the disk cache: wait for it first.
	r.wg.Wait()
	// 3. Reads still running find the disk cache closed and go on from
	// memory and the object store.
	if r.disk != nil {
		_ = r.disk.Close()
	}
}

// ColdRange is what ReadRange returns: whole batches of a segment as views
// of cached chunks (Pieces), or as a range of the cached log object on
// local disk (File, from Position), for sendfile.
type ColdRange struct {
	Pieces   Pieces
	File     *os.File // the caller's own descriptor, to Close; nil with Pieces
	Position int64
	Size     int64
	Next     int64 // the offset to read next
}

// Close closes File, if any. It may be called more than once.
func (c *ColdRange) Close() {
	if c.File != nil {
		_ = c.File.Close()
		c.File = nil
	}
	c.Pieces = nil
}

// Read returns whole batches of seg starting with the one that holds offset,
// up to maxBytes (at least one batch), and the offset to read next. Store
// failures come back as BROKER_UNAVAILABLE and objects that fail their checks
// as REMOTE_CORRUPT (both retriable): the consumer tries again; nothing else
// waits on it.
func (r *ColdReader) Read(ctx context.Context, seg RemoteSegment, offset, maxBytes int64) ([]byte, int64, error) {
	return r.ReadRecords(ctx, seg, offset, maxBytes, 0)
}

// ReadRecords is Read that also stops after the batch that brings the
// records from offset to maxRecords (0: no such bound).
func (r *ColdReader) ReadRecords(ctx context.Context, seg RemoteSegment, offset, maxBytes, maxRecords int64) ([]byte, int64, error) {
	ps, next, err := r.ReadPieces(ctx, seg, offset, maxBytes, maxRecords)
	return ps.Bytes(), next, err
}

// ReadPieces is ReadRecords that returns the bytes as views of the chunks
// that hold them, for a caller that writes them out (a fetch answer)
// without joining them.
func (r *ColdReader) ReadPieces(ctx context.Context, seg RemoteSegment, offset, maxBytes, maxRecords int64) (Pieces, int64, error) {
	cr, err := r.ReadRange(ctx, seg, offset, maxBytes, maxRecords)
	if err != nil || cr.File == nil {
		return cr.Pieces, cr.Next, err
	}
	defer cr.Close()
	buf := make([]byte, cr.Size)
	if _, err := cr.File.ReadAt(buf, cr.Position); err != nil {
		return nil, offset, api.Errorf(api.CodeBrokerUnavailable, "remote cache read of %s: %v", seg.LogKey(), err)
	}
	return Pieces{buf}, cr.Next, nil
}

// ReadRange is ReadPieces that serves a segment held whole in the disk
// cache as a range of its file (which the caller closes) rather than
// bytes in memory. Such a file was proven to be the record's log object
// (diskcache.go), so its batches are not checked again on every read.
func (r *ColdReader) ReadRange(ctx context.Context, seg RemoteSegment, offset, maxBytes, maxRecords int64) (ColdRange, error) {
	fail := func(err error) (ColdRange, error) { return ColdRange{Next: offset}, err }
	idx, err := r.index(ctx, seg)
	if err != nil {
		return fail(err)
	}
	// The last batch starting at or before offset.
	lo, hi := 0, len(idx)
	for lo < hi {
		m := (lo + hi) / 2
		if idx[m].offset <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return fail(api.Errorf(api.CodeOffsetOutOfRange, "offset %d is below remote segment %d", offset, seg.Base))
	}
	first := lo - 1
	start := idx[first].pos
	// Batches end where the next begins; the last ends at the object's end.
	endOf := func(i int) int64 {
		if i+1 < len(idx) {
			return idx[i+1].pos
		}
		return seg.Size
	}
	last := first
	for last+1 < len(idx) && endOf(last+1)-start <= maxBytes && (maxRecords <= 0 || idx[last+1].offset-offset < maxRecords) {
		last++
	}
	end := endOf(last)
	next := seg.Next
	if last+1 < len(idx) {
		next = idx[last+1].offset
	}
	if f := r.diskFile(seg, idx, true); f != nil {
		return ColdRange{File: f, Position: start, Size: end - start, Next: next}, nil
	}
	buf, err := r.readRange(ctx, seg, start, end)
	if err != nil {
		if errors.Is(err, api.ErrRemoteCorrupt) {
			err = r.corrupt(seg, &r.corruptLogs, err)
		}
		return fail(err)
	}
	good, err := verifyRange(seg, buf, start, idx[first:last+1], next)
	if err != nil {
		if good == 0 {
			return fail(r.corrupt(seg, &r.corruptLogs, err))
		}
		// Serve the whole batches before the bad one; the reader's next
		// fetch starts at it and gets the error. Nothing is skipped.
		r.Forget(seg)
		served := buf.Slice(0, idx[first+good].pos-start)
		return ColdRange{Pieces: served, Size: served.Len(), Next: idx[first+good].offset}, nil
	}
	// Sequential consumers come back for what follows: fetch the next few
	// chunks now.
	lastChunk := (end - 1) / r.chunk
	for c := lastChunk + 1; c <= lastChunk+readAheadChunks && c*r.chunk < seg.Size; c++ {
		r.readAhead(seg, c)
	}
	return ColdRange{Pieces: buf, Size: buf.Len(), Next: next}, nil
}

// diskFile returns a descriptor of seg's log object in the disk cache, or
// nil. The file's bytes are the record's (the cache checks); the first
// time in this process, the index is checked against them too, batch
// header by batch header, since a served range starts and ends where the
// index says: an index that does not match sends the segment's reads to
// the object store, whose every read checks its batches.
// count says whether the use counts as a hit or miss.
func (r *ColdReader) diskFile(seg RemoteSegment, idx []indexEntry, count bool) *os.File {
	if r.disk == nil {
		return nil
	}
	r.indexMu.Lock()
	good, checked := r.onDisk[seg.ID]
	r.indexMu.Unlock()
	if checked && !good {
		return nil
	}
	if idx == nil {
		return nil
	}
	f, ok := r.disk.open(seg, count)
	if !ok || checked {
		return f
	}
	err := checkIndexFile(f, seg, idx)
	r.indexMu.Lock()
	if _, ok := r.indexes[seg.ID]; ok { // not forgotten meanwhile
		r.onDisk[seg.ID] = err == nil
	}
	r.indexMu.Unlock()
	if err != nil {
		_ = f.Close()
		r.log.Warn("tiered segment's index does not match its log object; reading the object store", "key", seg.Key, "err", err)
		return nil
	}
	r.disk.putIndex(seg, encodeIndex(idx))
	return f
}

// checkIndexFile checks that idx, seg's index, puts a batch header at
// every entry of f, seg's log object, with the entry's base offset and a
// length that reaches the next entry (the last one the object's end).
func checkIndexFile(f *os.File, seg RemoteSegment, idx []indexEntry) error {
	var hdr [recordbatch.HeaderSize]byte
	for i, e := range idx {
		end, next := seg.Size, seg.Next
		if i+1 < len(idx) {
			end, next = idx[i+1].pos, idx[i+1].offset
		}
		if _, err := f.ReadAt(hdr[:], e.pos); err != nil {
			return err
		}
		h, err := recordbatch.ParseHeader(hdr[:])
		switch {
		case err != nil:
			return fmt.Errorf("the batch at position %d: %w", e.pos, err)
		case h.BaseOffset != e.offset || int64(h.Size()) != end-e.pos || h.NextOffset() > next:
			return fmt.Errorf("the batch at position %d is offsets [%d, %d) in %d bytes; the index says offset %d in %d bytes", e.pos, h.BaseOffset, h.NextOffset(), h.Size(), e.offset, end-e.pos)
		}
	}
	return nil
}

// readRange returns [start, end) of the segment's log object as views of
// its chunks, fetching the missing ones in parallel (within the GET bound).
func (r *ColdReader) readRange(ctx context.Context, seg RemoteSegment, start, end int64) (Pieces, error) {
	first, last := start/r.chunk, (end-1)/r.chunk
	chunks := make([][]byte, last-first+1)
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for c := first; c <= last; c++ {
		wg.Add(1)
		go func(c int64) {
			defer wg.Done()
			chunks[c-first], errs[c-first] = r.chunkOf(ctx, seg, c)
		}(c)
	}
	wg.Wait()
	out := make(Pieces, 0, len(chunks))
	for i, data := range chunks {
		if errs[i] != nil {
			return nil, errs[i]
		}
		c := first + int64(i)
		lo := max(start-c*r.chunk, 0)
		hi := max(min(end-c*r.chunk, int64(len(data))), lo)
		out = append(out, data[lo:hi:hi])
	}
	return out, nil
}

// readAheadChunks is how far ahead of a read the next chunks are fetched.
const readAheadChunks = 4

func (r *ColdReader) chunkOf(ctx context.Context, seg RemoteSegment, c int64) ([]byte, error) {
	key := chunkKey{seg.ID, c}
	if data, ok := r.cache.get(key); ok {
		return data, nil
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, api.Errorf(api.CodeRequestTimedOut, "waiting for an object-store slot: %v", ctx.Err())
	}
	defer func() { <-r.sem }()
	if data, ok := r.cache.get(key); ok { // filled while we waited
		return data, nil
	}
	gen := r.forgets.Load()
	off := c * r.chunk
	n := min(r.chunk, seg.Size-off)
	rc, err := r.bucket.GetRange(ctx, seg.LogKey(), off, n)
	if errors.Is(err, ErrInvalidRange) {
		return nil, corruptf("%s ends before byte %d; its record says %d bytes", seg.LogKey(), off, seg.Size)
	}
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store: %v", err)
	}
	defer rc.Close()
	data := make([]byte, n)
	if k, err := io.ReadFull(rc, data); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, corruptf("%s ends at byte %d; its record says %d bytes", seg.LogKey(), off+int64(k), seg.Size)
		}
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store read of %s cut short: %v", seg.LogKey(), err)
	}
	if r.forgets.Load() == gen {
		// A Forget since the GET began may be for this segment: its bytes
		// still serve this read but are not cached over the drop.
		r.cache.put(key, data)
		if r.disk != nil && r.disk.fill(seg, r.chunk, c, data) {
			// The file is whole: check the index against it now and keep
			// the index beside it, so even a restarted broker serves the
			// segment without a GET.
			r.indexMu.Lock()
			idx, ok := r.indexes[seg.ID]
			r.indexMu.Unlock()
			if f := r.diskFile(seg, idx, false); ok && f != nil {
				_ = f.Close()
			}
		}
	}
	return data, nil
}

// Prefetch starts fetching a segment's index and first chunks in the
// background, for a consumer about to cross into it from the previous one.
func (r *ColdReader) Prefetch(seg RemoteSegment) {
	select {
	case r.sem <- struct{}{}:
		<-r.sem
	default:
		return // every GET slot is busy with reads that were asked for
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if _, err := r.index(r.ctx, seg); err != nil {
			return
		}
		if r.disk != nil && r.disk.has(seg) {
			return
		}
		for c := int64(0); c < readAheadChunks && c*r.chunk < seg.Size; c++ {
			r.readAhead(seg, c)
		}
	}()
}

// readAhead fetches a chunk in the background if a GET slot is free now;
// it never queues behind consumers' own reads.
func (r *ColdReader) readAhead(seg RemoteSegment, c int64) {
	if _, ok := r.cache.get(chunkKey{seg.ID, c}); ok {
		return
	}
	if r.disk != nil && r.disk.has(seg) {
		return
	}
	select {
	case r.sem <- struct{}{}:
		<-r.sem // the slot is taken again inside chunkOf
	default:
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if _, err := r.chunkOf(r.ctx, seg, c); err != nil && r.ctx.Err() == nil {
			r.log.Debug("read-ahead failed", "key", seg.LogKey(), "chunk", c, "err", err)
		}
	}()
}

func (r *ColdReader) index(ctx context.Context, seg RemoteSegment) ([]indexEntry, error) {
	r.indexMu.Lock()
	idx, ok := r.indexes[seg.ID]
	r.indexMu.Unlock()
	if ok {
		return idx, nil
	}
	// The record bounds what is read: IndexSize, itself bounded by the log
	// object's size, and one byte more to see an object longer than that.
	if err := checkRecord(seg); err != nil {
		return nil, r.corrupt(seg, &r.corruptIndexes, err)
	}
	if r.disk != nil {
		// Checked as the object store's would be, and against the file
		// before it is used (diskFile); a bad one is fetched again.
		if b, ok := r.disk.index(seg); ok {
			if idx, err := decodeIndex(b, seg); err == nil {
				r.indexMu.Lock()
				r.indexes[seg.ID] = idx
				r.indexMu.Unlock()
				return idx, nil
			}
		}
	}
	rc, err := r.bucket.Get(ctx, seg.IndexKey())
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, seg.IndexSize+1))
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store read of %s cut short: %v", seg.IndexKey(), err)
	}
	idx, err = decodeIndex(b, seg)
	if err != nil {
		return nil, r.corrupt(seg, &r.corruptIndexes, err)
	}
	r.indexMu.Lock()
	r.indexes[seg.ID] = idx
	r.indexMu.Unlock()
	return idx, nil
}

// corrupt counts a segment that failed its checks and drops what is cached
// of it, so the next read fetches its objects again.
func (r *ColdReader) corrupt(seg RemoteSegment, counter *atomic.Int64, err error) error {
	counter.Add(1)
	r.Forget(seg)
	r.log.Warn("tiered segment fails its checks; not served", "key", seg.Key, "base", seg.Base, "next", seg.Next, "err", err)
	return err
}

// Forget drops what is cached for a segment: one that retention deleted, or
// one found corrupt.
func (r *ColdReader) Forget(seg RemoteSegment) {
	r.forgets.Add(1)
	r.indexMu.Lock()
	delete(r.indexes, seg.ID)
	delete(r.onDisk, seg.ID)
	r.indexMu.Unlock()
	r.cache.dropSegment(seg.ID)
	if r.disk != nil {
		r.disk.drop(seg)
	}
}
