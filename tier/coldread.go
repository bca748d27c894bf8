package tier

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/sluice-io/sluice/api"
)

// ColdReader serves fetches below the local log start from the object store:
// ranged GETs of fixed-size chunks through a bounded cache, with read-ahead of
// the next chunk for sequential consumers. Its object-store traffic is bounded
// (MaxConcurrent GETs at once) so that a consumer replaying history cannot
// starve producers or local reads of CPU, memory or connections.
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
// failures come back as BROKER_UNAVAILABLE (retriable): the consumer tries
// again; nothing else waits on it.
func (r *ColdReader) Read(ctx context.Context, seg RemoteSegment, offset, maxBytes int64) ([]byte, int64, error) {
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
	for last+1 < len(idx) && endOf(last+1)-start <= maxBytes {
		last++
	}
	end := endOf(last)
	next := seg.Next
	if last+1 < len(idx) {
		next = idx[last+1].offset
	}
	buf, err := r.readRange(ctx, seg, start, end)
	if err != nil {
		return nil, offset, err
	}
	return buf, next, nil
}

// readRange assembles [start, end) of the segment's log object from chunks,
// fetching the missing ones in parallel (within the GET bound).
func (r *ColdReader) readRange(ctx context.Context, seg RemoteSegment, start, end int64) ([]byte, error) {
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
	out := make([]byte, 0, end-start)
	for i, data := range chunks {
		if errs[i] != nil {
			return nil, errs[i]
		}
		c := first + int64(i)
		lo := max(start-c*r.chunk, 0)
		hi := min(end-c*r.chunk, int64(len(data)))
		out = append(out, data[lo:hi]...)
	}
	// Sequential consumers come back for what follows: fetch the next few
	// chunks now.
	for next := last + 1; next <= last+readAheadChunks && next*r.chunk < seg.Size; next++ {
		r.readAhead(seg, next)
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
	off := c * r.chunk
	n := min(r.chunk, seg.Size-off)
	rc, err := r.bucket.GetRange(ctx, seg.LogKey(), off, n)
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store: %v", err)
	}
	defer rc.Close()
	data := make([]byte, n)
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store read of %s cut short: %v", seg.LogKey(), err)
	}
	r.cache.put(key, data)
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
	rc, err := r.bucket.Get(ctx, seg.IndexKey())
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, seg.IndexSize+1))
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "object store read of %s cut short: %v", seg.IndexKey(), err)
	}
	if int64(len(b)) != seg.IndexSize {
		return nil, api.Errorf(api.CodeStorageError, "%s holds %d bytes, its record says %d", seg.IndexKey(), len(b), seg.IndexSize)
	}
	idx, err = decodeIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrStorage, err)
	}
	r.indexMu.Lock()
	r.indexes[seg.ID] = idx
	r.indexMu.Unlock()
	return idx, nil
}

// Forget drops what is cached for a segment that retention deleted.
func (r *ColdReader) Forget(seg RemoteSegment) {
	r.indexMu.Lock()
	delete(r.indexes, seg.ID)
	r.indexMu.Unlock()
	r.cache.dropSegment(seg.ID)
}
