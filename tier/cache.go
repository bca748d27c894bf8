package tier

import (
	"container/list"
	"sync"
)

type chunkKey struct {
	seg   string
	chunk int64
}

// chunkCache is an LRU of object chunks bounded in bytes.
type chunkCache struct {
	mu    sync.Mutex // guards the fields below
	limit int64
	size  int64
	order *list.List // front: most recently used; values are *chunkEntry
	byKey map[chunkKey]*list.Element
}

type chunkEntry struct {
	key  chunkKey
	data []byte
}

func newChunkCache(limit int64) *chunkCache {
	return &chunkCache{limit: limit, order: list.New(), byKey: map[chunkKey]*list.Element{}}
}

func (c *chunkCache) get(k chunkKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*chunkEntry).data, true
	}
	return nil, false
}

func (c *chunkCache) put(k chunkKey, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[k]; ok {
		return
	}
	c.byKey[k] = c.order.PushFront(&chunkEntry{k, data})
	c.size += int64(len(data))
	for c.size > c.limit && c.order.Len() > 1 {
		c.removeLocked(c.order.Back())
	}
}

func (c *chunkCache) dropSegment(seg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Front(); e != nil; {
		next := e.Next()
		if e.Value.(*chunkEntry).key.seg == seg {
			c.removeLocked(e)
		}
		e = next
	}
}

func (c *chunkCache) removeLocked(e *list.Element) {
	ce := e.Value.(*chunkEntry)
	c.order.Remove(e)
	delete(c.byKey, ce.key)
	c.size -= int64(len(ce.data))
}
