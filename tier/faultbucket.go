package tier

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// Op names a kind of Bucket operation, for FaultBucket.
type Op string

// The operations of a Bucket.
const (
	OpPut      Op = "put"
	OpGet      Op = "get"
	OpGetRange Op = "get-range"
	OpStat     Op = "stat"
	OpList     Op = "list"
	OpDelete   Op = "delete"
)

// Fault is what FaultBucket does to one operation. The zero Fault does nothing.
type Fault struct {
	// Delay holds the operation this long before anything else happens. If
	// ctx ends first, the operation fails with ctx's error (a deadline is
	// classified as ErrUnavailable, as a slow store's would be).
	Delay time.Duration
	// Err, if not nil, fails the operation (after Delay) without calling the
	// wrapped bucket.
	Err error
	// Cut breaks the operation's data stream after CutAfter bytes with an
	// error wrapping ErrUnavailable, as a lost connection would: for Put, the
	// wrapped bucket reads a body that fails there (it must then store
	// nothing); for Get and GetRange, the returned body fails there. Other
	// operations ignore Cut.
	Cut      bool
	CutAfter int64
}

// FaultBucket wraps a Bucket and injects faults into chosen operations: "fail
// the next two uploads", "stall the next read for 5 s", "cut the next upload
// after 1 MiB". Operations without a pending fault pass straight through.
// Faults are queued per kind of operation and each operation consumes at most
// one. It is safe for concurrent use.
//
// Like thanos' bucket wrappers it adds behaviour without touching the
// implementations; unlike them it is for tests only.
type FaultBucket struct {
	inner Bucket

	// mu guards pending and calls.
	mu      sync.Mutex
	pending map[Op][]queuedFault // FIFO per kind of operation
	calls   map[Op]int
}

type queuedFault struct {
	fault Fault
	left  int // operations this fault still applies to
}

var _ Bucket = (*FaultBucket)(nil)

// NewFaultBucket wraps inner. It injects nothing until told to.
func NewFaultBucket(inner Bucket) *FaultBucket {
	return &FaultBucket{inner: inner, pending: make(map[Op][]queuedFault), calls: make(map[Op]int)}
}

// Inject applies fault to the next n operations of kind op, after the faults
// already queued for op.
func (f *FaultBucket) Inject(op Op, n int, fault Fault) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending[op] = append(f.pending[op], queuedFault{fault: fault, left: n})
}

// FailNext fails the next n operations of kind op with err, or, if err is
// nil, with an error wrapping ErrUnavailable.
func (f *FaultBucket) FailNext(op Op, n int, err error) {
	if err == nil {
		err = fmt.Errorf("tier: fault bucket: injected %s failure: %w", op, ErrUnavailable)
	}
	f.Inject(op, n, Fault{Err: err})
}

// DelayNext delays the next n operations of kind op by d.
func (f *FaultBucket) DelayNext(op Op, n int, d time.Duration) {
	f.Inject(op, n, Fault{Delay: d})
}

// CutNext cuts the data stream of the next n operations of kind op after
// `after` bytes (see Fault.Cut).
func (f *FaultBucket) CutNext(op Op, n int, after int64) {
	f.Inject(op, n, Fault{Cut: true, CutAfter: after})
}

// Reset drops every pending fault. The call counts stay.
func (f *FaultBucket) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.pending)
}

// Calls returns how many operations of kind op have started, faulted or not.
func (f *FaultBucket) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Pending returns how many operations of kind op faults are still queued for.
func (f *FaultBucket) Pending(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, q := range f.pending[op] {
		n += q.left
	}
	return n
}

// begin counts an operation and applies the delay and failure of the fault it
// consumes. It returns the fault so that the caller can apply Cut.
func (f *FaultBucket) begin(ctx context.Context, op Op) (Fault, error) {
	f.mu.Lock()
	f.calls[op]++
	var fault Fault
	if q := f.pending[op]; len(q) > 0 {
		fault = q[0].fault
		if q[0].left--; q[0].left == 0 {
			f.pending[op] = q[1:]
		}
	}
	f.mu.Unlock()

	if fault.Delay > 0 {
		t := time.NewTimer(fault.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fault, fmt.Errorf("tier: fault bucket: %s delayed: %w", op, ctxError(ctx.Err()))
		}
	}
	if fault.Err != nil {
		return fault, fault.Err
	}
	return fault, nil
}

// Put implements Bucket.
func (f *FaultBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	fault, err := f.begin(ctx, OpPut)
	if err != nil {
		return err
	}
	if fault.Cut {
		r = &cutReader{r: r, left: fault.CutAfter}
	}
	return f.inner.Put(ctx, key, r, size)
}

// Get implements Bucket.
func (f *FaultBucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	fault, err := f.begin(ctx, OpGet)
	if err != nil {
		return nil, err
	}
	rc, err := f.inner.Get(ctx, key)
	return cutBody(rc, err, fault)
}

// GetRange implements Bucket.
func (f *FaultBucket) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	fault, err := f.begin(ctx, OpGetRange)
	if err != nil {
		return nil, err
	}
	rc, err := f.inner.GetRange(ctx, key, off, length)
	return cutBody(rc, err, fault)
}

// cutBody wraps a body returned by the wrapped bucket as the fault says.
func cutBody(rc io.ReadCloser, err error, fault Fault) (io.ReadCloser, error) {
	if err != nil || !fault.Cut {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{&cutReader{r: rc, left: fault.CutAfter}, rc}, nil
}

// Stat implements Bucket.
func (f *FaultBucket) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if _, err := f.begin(ctx, OpStat); err != nil {
		return ObjectInfo{}, err
	}
	return f.inner.Stat(ctx, key)
}

// List implements Bucket.
func (f *FaultBucket) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if _, err := f.begin(ctx, OpList); err != nil {
		return err
	}
	return f.inner.List(ctx, prefix, fn)
}

// Delete implements Bucket.
func (f *FaultBucket) Delete(ctx context.Context, key string) error {
	if _, err := f.begin(ctx, OpDelete); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// Close implements Bucket by closing the wrapped bucket.
func (f *FaultBucket) Close() error { return f.inner.Close() }

// cutReader passes `left` bytes through, then fails as a lost connection.
type cutReader struct {
	r    io.Reader
	left int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("tier: fault bucket: stream cut: %w", ErrUnavailable)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
