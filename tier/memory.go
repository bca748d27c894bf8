package tier

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a Bucket in memory, for unit tests: it keeps the S3 semantics of
// the contract (including the object/folder clash of Put), reports an
// MD5 ETag and a CRC-64/NVME like S3 does, and loses everything on Close.
type Memory struct {
	// mu guards objects and closed. Object bytes are never modified once
	// stored (an overwrite stores a new slice), so bodies read them unlocked.
	mu      sync.Mutex
	objects map[string]memObject
	closed  bool
}

type memObject struct {
	data []byte
	info ObjectInfo
}

var _ Bucket = (*Memory)(nil)

// NewMemory returns an empty Memory bucket.
func NewMemory() *Memory { return &Memory{objects: make(map[string]memObject)} }

// String names the bucket for logs.
func (m *Memory) String() string { return "memory" }

// Put implements Bucket.
func (m *Memory) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkPut(key, size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: memory put %q: %w", key, ctxError(err))
	}
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, size)
	if err == io.EOF {
		return fmt.Errorf("tier: memory put %q: %w", key, &errShortBody{got: n, want: size})
	}
	if err != nil {
		return fmt.Errorf("tier: memory put %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: memory put %q: %w", key, ctxError(err))
	}
	data := buf.Bytes()
	sum := md5.Sum(data)
	crc := NewCRC64NVME()
	crc.Write(data)
	obj := memObject{data: data, info: ObjectInfo{
		Key:          key,
		Size:         size,
		LastModified: time.Now(),
		ETag:         hex.EncodeToString(sum[:]),
		CRC64NVME:    crc.Sum64(),
		HasCRC64NVME: true,
	}}

	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(); err != nil {
		return err
	}
	if err := m.clashLocked(key); err != nil {
		return err
	}
	m.objects[key] = obj
	return nil
}

// clashLocked reports whether storing key would make an object and a folder
// of objects coincide.
func (m *Memory) clashLocked(key string) error {
	for i := range len(key) {
		if key[i] == '/' {
			if _, ok := m.objects[key[:i]]; ok {
				return fmt.Errorf("tier: memory put %q: %w: %q is an object", key, ErrInvalidKey, key[:i])
			}
		}
	}
	for k := range m.objects {
		if strings.HasPrefix(k, key+"/") {
			return fmt.Errorf("tier: memory put %q: %w: it is a folder of %q", key, ErrInvalidKey, k)
		}
	}
	return nil
}

func (m *Memory) usableLocked() error {
	if m.closed {
		return fmt.Errorf("tier: memory bucket: %w", fs.ErrClosed)
	}
	return nil
}

func (m *Memory) lookup(ctx context.Context, op, key string) (memObject, error) {
	if err := CheckKey(key); err != nil {
		return memObject{}, err
	}
	if err := ctx.Err(); err != nil {
		return memObject{}, fmt.Errorf("tier: memory %s %q: %w", op, key, ctxError(err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(); err != nil {
		return memObject{}, err
	}
	obj, ok := m.objects[key]
	if !ok {
		return memObject{}, fmt.Errorf("tier: memory %s %q: %w", op, key, ErrNotExist)
	}
	return obj, nil
}

// Get implements Bucket.
func (m *Memory) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := m.lookup(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(obj.data)), nil
}

// GetRange implements Bucket.
func (m *Memory) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := checkRange(off, length); err != nil {
		return nil, err
	}
	obj, err := m.lookup(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	size := int64(len(obj.data))
	if off >= size {
		return nil, fmt.Errorf("tier: memory get %q: %w: offset %d of a %d-byte object", key, ErrInvalidRange, off, size)
	}
	end := min(rangeEnd(off, length), size-1)
	return io.NopCloser(bytes.NewReader(obj.data[off : end+1])), nil
}

// Stat implements Bucket.
func (m *Memory) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	obj, err := m.lookup(ctx, "stat", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return obj.info, nil
}

// List implements Bucket. fn runs without the lock held, so it may call m.
func (m *Memory) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: memory list %q: %w", prefix, ctxError(err))
	}
	m.mu.Lock()
	if err := m.usableLocked(); err != nil {
		m.mu.Unlock()
		return err
	}
	var infos []ObjectInfo
	for k, obj := range m.objects {
		if strings.HasPrefix(k, prefix) {
			info := obj.info
			info.CRC64NVME, info.HasCRC64NVME = 0, false // as S3's listing
			infos = append(infos, info)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(infos, func(x, y ObjectInfo) int { return strings.Compare(x.Key, y.Key) })
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Bucket.
func (m *Memory) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: memory delete %q: %w", key, ctxError(err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(); err != nil {
		return err
	}
	delete(m.objects, key)
	return nil
}

// Close implements Bucket: it drops every object.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed, m.objects = true, nil
	return nil
}
