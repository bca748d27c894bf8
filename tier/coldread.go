package tier

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
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
	log     *slog.Logger
	ctx     context.Context // read-ahead's parent; ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	indexMu sync.Mutex              // guards indexes
	indexes map[string][]indexEntry // by segment ID; small, kept for every segment read

	forgets        atomic.Uint64 // Forget calls; a chunk fetched across one is not cached
	corruptIndexes atomic.Int64
	corruptLogs    atomic.Int64
}

// ColdReaderStats counts what a ColdReader found since it started.
type ColdReaderStats struct {
	// CorruptIndexes counts index objects (or records) that failed their
	// checks; CorruptLogs byte ranges of log objects that did.
	CorruptIndexes, CorruptLogs int64
}

// Stats returns the reader's counts.
func (r *ColdReader) Stats() ColdReaderStats {
	return ColdReaderStats{CorruptIndexes: r.corruptIndexes.Load(), CorruptLogs: r.corruptLogs.Load()}
}

// ColdReaderOptions tune a ColdReader; zero values take the defaults.
type ColdReaderOptions struct {
	ChunkBytes    int64 // default 1 MiB
	CacheBytes    int64 // default 64 MiB
	MaxConcurrent int   // default 4
	Logger        *slog.Logger
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
	return &ColdReader{bucket: bkt, chunk: o.ChunkBytes, sem: make(chan struct{}, o.MaxConcurrent),
		cache: newChunkCache(o.CacheBytes), log: o.Logger, ctx: ctx, cancel: cancel, indexes: map[string][]indexEntry{}}
}

// Close stops read-ahead and waits for it.
func (r *ColdReader) Close() {
	r.cancel()
	r.wg.Wait()
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
	idx, err := r.index(ctx, seg)
	if err != nil {
		return nil, offset, err
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
		return nil, offset, api.Errorf(api.CodeOffsetOutOfRange, "offset %d is below remote segment %d", offset, seg.Base)
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
	buf, err := r.readRange(ctx, seg, start, end)
	if err != nil {
		if errors.Is(err, api.ErrRemoteCorrupt) {
			err = r.corrupt(seg, &r.corruptLogs, err)
		}
		return nil, offset, err
	}
	good, err := verifyRange(seg, buf, start, idx[first:last+1], next)
	if err != nil {
		if good == 0 {
			return nil, offset, r.corrupt(seg, &r.corruptLogs, err)
		}
		// Serve the whole batches before the bad one; the reader's next
		// fetch starts at it and gets the error. Nothing is skipped.
		r.Forget(seg)
		return buf.Slice(0, idx[first+good].pos-start), idx[first+good].offset, nil
	}
	// Sequential consumers come back for what follows: fetch the next few
	// chunks now.
	lastChunk := (end - 1) / r.chunk
	for c := lastChunk + 1; c <= lastChunk+readAheadChunks && c*r.chunk < seg.Size; c++ {
		r.readAhead(seg, c)
	}
	return buf, next, nil
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
	r.indexMu.Unlock()
	r.cache.dropSegment(seg.ID)
}
