package sink_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

// memBackend is a sink store's state in memory: per partition, the fence,
// the next offset and the records written, in order. It is the Store
// contract (store.go) and nothing more: the reference the contract suites
// hold the Redis store and the S3 archive to. memStores over one backend
// share it, as processes share a Redis.
type memBackend struct {
	mu    sync.Mutex // guards parts
	parts map[api.TopicPartition]*memPart
}

type memPart struct {
	fence int64
	next  int64 // -1: nothing written yet
	recs  []sink.Record
}

func newMemBackend() *memBackend {
	return &memBackend{parts: map[api.TopicPartition]*memPart{}}
}

// memStore is a Store over a memBackend: every call is one step under the
// backend's lock, so it changes everything it says or nothing.
type memStore struct{ b *memBackend }

var _ sink.Store = memStore{}

// partLocked returns tp's state, created empty when missing.
func (b *memBackend) partLocked(tp api.TopicPartition) *memPart {
	p := b.parts[tp]
	if p == nil {
		p = &memPart{next: -1}
		b.parts[tp] = p
	}
	return p
}

// Claim implements sink.Store.
func (s memStore) Claim(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	p := s.b.partLocked(tp)
	if p.fence > fence {
		return 0, fmt.Errorf("%w: %s/%d is held at fence %d, above %d", sink.ErrFenced, tp.Topic, tp.Partition, p.fence, fence)
	}
	p.fence = fence
	return p.next, nil
}

// Write implements sink.Store.
func (s memStore) Write(ctx context.Context, tp api.TopicPartition, fence int64, recs []sink.Record) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for i, r := range recs {
		if r.Offset < 0 || i > 0 && r.Offset <= recs[i-1].Offset {
			return 0, fmt.Errorf("%w: offsets must be ascending and not negative: %d at index %d", sink.ErrBadBatch, r.Offset, i)
		}
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	p := s.b.partLocked(tp)
	if p.fence > fence {
		return 0, fmt.Errorf("%w: %s/%d is held at fence %d, above %d", sink.ErrFenced, tp.Topic, tp.Partition, p.fence, fence)
	}
	for _, r := range recs {
		if r.Offset < p.next {
			continue // written before
		}
		p.recs = append(p.recs, sink.Record{Offset: r.Offset, Timestamp: r.Timestamp,
			Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Headers: maps.Clone(r.Headers)})
		p.next = r.Offset + 1
	}
	p.fence = fence
	return p.next, nil
}

// records returns a copy of what tp holds.
func (b *memBackend) records(tp api.TopicPartition) []sink.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.parts[tp]; p != nil {
		return slices.Clone(p.recs)
	}
	return nil
}

// next returns tp's next offset, -1 when nothing was written.
func (b *memBackend) next(tp api.TopicPartition) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.parts[tp]; p != nil {
		return p.next
	}
	return -1
}

// state renders everything the backend holds.
func (b *memBackend) state() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for tp, p := range b.parts {
		out = append(out, fmt.Sprintf("%s/%d fence %d next %d %v", tp.Topic, tp.Partition, p.fence, p.next, renderRecords(p.recs)))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
