package sink

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/tier"
)

// Objects is what the S3 archive needs of an object store: conditional
// puts checked by the server. *tier.S3 implements it.
type Objects interface {
	// PutIf stores data under key if the key does not exist (ifMatch "")
	// or holds the ETag ifMatch, and returns the new ETag. Errors:
	// tier.ErrPrecondition when the condition fails (nothing stored);
	// tier.ErrUnavailable (retriable; the put may have happened).
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (etag string, err error)
	// ReadObject returns an object and the ETag of those bytes, or
	// tier.ErrNotExist.
	ReadObject(ctx context.Context, key string) ([]byte, string, error)
	// Stat returns an object's metadata, or tier.ErrNotExist.
	Stat(ctx context.Context, key string) (tier.ObjectInfo, error)
	// List calls fn for every key starting with prefix, in ascending order.
	List(ctx context.Context, prefix string, fn func(tier.ObjectInfo) error) error
	// Delete removes an object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
}

var _ Objects = (*tier.S3)(nil)

// ReadLogFunc returns the records of tp with offsets first..last, in
// offset order (all of them: a compacted range has fewer). The S3 archive
// uses it to rebuild a range that was reserved but never uploaded.
type ReadLogFunc func(ctx context.Context, tp api.TopicPartition, first, last int64) ([]Record, error)

// S3Options configure an S3Store. Group and ReadLog are required.
type S3Options struct {
	// Group is written into every fence object; a store refuses a
	// partition whose fence object names another group (ErrStoreConflict).
	Group string
	// Prefix is the folder the archive's topics go under. Default "" (the
	// bucket's root, below the bucket's own prefix).
	Prefix string
	// MaxRecords, MaxBytes (of uncompressed NDJSON) and MaxInterval (since
	// the object's first record was buffered) roll an object: whichever is
	// reached first. Defaults 100,000 records, 64 MiB, 1 minute.
	MaxRecords  int
	MaxBytes    int64
	MaxInterval time.Duration
	// Compression of the objects this store creates: CompressionGzip (the
	// default) or CompressionNone. A range is rebuilt with the compression
	// it was reserved with, whatever this store's, so an archive may hold
	// both kinds of object; readers take either.
	Compression string
	// ReadLog rebuilds reserved ranges from the log. Required.
	ReadLog ReadLogFunc
	// Metrics count the objects created (share the sink's to serve them
	// together). Default none.
	Metrics *Metrics
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (o *S3Options) validate() error {
	if err := api.ValidateGroupID(o.Group); err != nil {
		return err
	}
	if o.ReadLog == nil {
		return errors.New("sink: s3: ReadLog is required")
	}
	if o.Compression == "" {
		o.Compression = CompressionGzip
	}
	if !validCompression(o.Compression) {
		return fmt.Errorf("sink: s3: compression %q: want %s or %s", o.Compression, CompressionGzip, CompressionNone)
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 100_000
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MaxInterval == 0 {
		o.MaxInterval = time.Minute
	}
	if o.MaxRecords < 0 || o.MaxBytes < 0 || o.MaxInterval < 0 {
		return errors.New("sink: s3: roll limits must be positive")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// fenceState is a partition's fence object. Offsets below Next are
// reserved: every range of them is in an object, except perhaps the last
// one reserved, First..Next-1, whose upload may not have happened; its
// object is compressed as Compression says ("" is gzip: fence objects
// from before the field), so that a rebuild stores the bytes, under the
// key, of the upload it stands in for. -1 in Next and First: nothing
// reserved yet (read from the group's position).
type fenceState struct {
	Group       string `json:"group"`
	Fence       int64  `json:"fence"`
	Next        int64  `json:"next"`
	First       int64  `json:"first"`
	Compression string `json:"compression,omitempty"`
}

// S3Store is the S3 archive Store. Per partition, a fence object (see
// archive.go) updated only with If-Match on the ETag this store last saw
// is the commit point: an object's range is reserved there, under the
// writer's fence, before the object is created with If-None-Match: *.
// A writer whose fence was superseded finds the ETag changed (412) and
// changes nothing. A reserved range whose object is missing (a crash
// between the two puts) is rebuilt from the log by the next Claim; since
// the bytes are a function of the records, a late upload by the old
// writer and the rebuild store the same object.
//
// Records are gathered across Write calls per partition and rolled into
// an object by S3Options' limits; Write and Flush return the next offset
// that is durable in objects, which trails what was handed over.
type S3Store struct {
	objs Objects
	opts S3Options
	log  *slog.Logger

	// mu guards parts and left, and is never held across a round trip:
	// each partition's calls take its s3Part's own lock for their round
	// trips, so a sink writing several partitions at once (ParallelWrites)
	// renders, compresses and uploads them side by side. Lock order: an
	// s3Part's mu, then mu.
	mu    sync.Mutex
	parts map[api.TopicPartition]*s3Part
	// left are reserved ranges of forgotten partitions whose objects were
	// not stored yet, for Finish (at most maxLeft, the oldest dropped: the
	// ranges' next owners rebuild them).
	left []*pendingObject

	objects, bytes, rawBytes atomic.Int64
}

var (
	_ Store    = (*S3Store)(nil)
	_ Flusher  = (*S3Store)(nil)
	_ Finisher = (*S3Store)(nil)
)

// s3Part is what an S3Store knows of a partition it claimed.
type s3Part struct {
	// mu guards the rest, held across the partition's round trips.
	mu      sync.Mutex
	dropped atomic.Bool // no longer the store's (forgotten, claimed again, fenced)

	fence int64
	etag  string     // the fence object's ETag as this store last wrote or read it
	state fenceState // the fence object's contents at etag
	// pending is the reserved range state.First..state.Next-1 while its
	// object is not known to be stored.
	pending *pendingObject
	// uncertain is the range of a reservation whose put failed without an
	// answer; for Finish, which stores its object if the put landed.
	uncertain *pendingObject
	// The buffer: NDJSON lines of offsets first..last, not yet reserved.
	lines       []byte
	first, last int64 // -1: empty
	n           int
	since       time.Time
}

type pendingObject struct {
	topic    string
	key      string
	data     []byte
	rawBytes int
	// ifReserved, when set, makes the object a reservation whose put's
	// outcome is unknown (its answer was lost, or the sink stopped while it
	// was in flight): it is stored only if the fence object under fenceKey
	// still says *ifReserved.
	ifReserved *fenceState
	fenceKey   string
}

// durable is the next offset every object below is stored.
func (p *s3Part) durable() int64 {
	if p.pending != nil {
		return p.state.First
	}
	return p.state.Next
}

// end is the next offset the buffer takes; -1 while nothing is known.
func (p *s3Part) end() int64 {
	if p.n > 0 {
		return p.last + 1
	}
	return p.state.Next
}

// S3Stats are an S3Store's running totals.
type S3Stats struct {
	Objects  int64 // objects uploaded (rebuilds included)
	Bytes    int64 // their compressed bytes
	RawBytes int64 // their NDJSON bytes
}

// NewS3Store returns an archive store over objs. Call
// ProbeConditionalWrites first: without them there is no fencing.
func NewS3Store(objs Objects, opts S3Options) (*S3Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &S3Store{objs: objs, opts: opts, log: opts.Logger, parts: map[api.TopicPartition]*s3Part{}}, nil
}

// Stats returns the running totals; safe from any goroutine.
func (s *S3Store) Stats() S3Stats {
	return S3Stats{Objects: s.objects.Load(), Bytes: s.bytes.Load(), RawBytes: s.rawBytes.Load()}
}

// FenceKey is the key of tp's fence object.
func (s *S3Store) FenceKey(tp api.TopicPartition) string {
	return partDir(s.opts.Prefix, tp) + fenceName
}

// Claim implements Store: it reads the fence object (or, when there is
// none, lists the partition's objects and resumes after the last), stores
// fence in it with If-Match, and rebuilds the last reserved range from the
// log if its object is missing. A higher stored fence is ErrFenced; a
// fence object of another group ErrStoreConflict.
func (s *S3Store) Claim(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	s.drop(tp)
	key := s.FenceKey(tp)
	for range 5 {
		cur, etag, err := s.readFence(ctx, key)
		switch {
		case tier.IsNotExist(err):
			cur, err = s.fromListing(ctx, tp)
			if err != nil {
				return 0, err
			}
			cur.Fence = fence
			etag, err = s.putFence(ctx, key, cur, "")
		case err != nil:
			return 0, err
		case cur.Group != s.opts.Group:
			return 0, fmt.Errorf("%w: %s belongs to group %q", ErrStoreConflict, key, cur.Group)
		case cur.Fence > fence:
			return 0, fmt.Errorf("%w: %s is held at fence %d, above %d", ErrFenced, key, cur.Fence, fence)
		case cur.Fence < fence:
			cur.Fence = fence
			etag, err = s.putFence(ctx, key, cur, etag)
		}
		if errors.Is(err, tier.ErrPrecondition) {
			continue // changed since read: read again
		} else if err != nil {
			return 0, err
		}
		p := &s3Part{fence: fence, etag: etag, state: cur, first: -1, last: -1}
		if err := s.repair(ctx, tp, p); err != nil {
			return 0, err
		}
		s.mu.Lock()
		if old := s.parts[tp]; old != nil {
			old.markDropped()
		}
		s.parts[tp] = p
		s.mu.Unlock()
		return p.durable(), nil
	}
	return 0, fmt.Errorf("sink: s3: %s keeps changing under the claim", key)
}

// fromListing derives a fence state from the partition's objects: next
// after the last one.
func (s *S3Store) fromListing(ctx context.Context, tp api.TopicPartition) (fenceState, error) {
	objs, err := ListArchive(ctx, s.objs, s.opts.Prefix, tp)
	if err != nil {
		return fenceState{}, err
	}
	st := fenceState{Group: s.opts.Group, Next: -1, First: -1}
	if len(objs) > 0 {
		last := objs[len(objs)-1]
		st.Next, st.First, st.Compression = last.Last+1, last.First, last.Compression
	}
	return st, nil
}

// repair makes sure the last reserved range is stored: if its object is
// missing, it is rebuilt from the log and uploaded.
func (s *S3Store) repair(ctx context.Context, tp api.TopicPartition, p *s3Part) error {
	if p.state.First < 0 || p.state.Next <= p.state.First {
		return nil
	}
	if !validCompression(p.state.Compression) {
		return fmt.Errorf("%w: %s reserves a range compressed as %q", ErrStoreConflict, s.FenceKey(tp), p.state.Compression)
	}
	key := ObjectKey(s.opts.Prefix, tp, p.state.First, p.state.Next-1, p.state.Compression)
	_, err := s.objs.Stat(ctx, key)
	if err == nil || !tier.IsNotExist(err) {
		return err
	}
	recs, err := s.opts.ReadLog(ctx, tp, p.state.First, p.state.Next-1)
	if err != nil {
		return fmt.Errorf("rebuilding %s from the log: %w", key, err)
	}
	data, raw, err := encodeRecords(recs, p.state.Compression)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadBatch, key, err)
	}
	s.log.Info("sink: s3: rebuilding a reserved range from the log", "key", key, "records", len(recs))
	p.pending = &pendingObject{topic: tp.Topic, key: key, data: data, rawBytes: raw}
	return s.upload(ctx, p)
}

// Write implements Store: records at or above the partition's buffered
// end are added to the buffer, and an object is rolled if a limit is
// reached. It returns the durable next offset. Errors: ErrFenced (the
// fence object moved on, or the partition is not claimed at fence);
// ErrBadBatch (offsets not ascending, before anything is taken; or a
// record that cannot be rendered); retriable store errors, after which the same call, or the
// next, carries on where this one stopped.
func (s *S3Store) Write(ctx context.Context, tp api.TopicPartition, fence int64, recs []Record) (int64, error) {
	p, err := s.claimed(tp, fence)
	if err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	for i, r := range recs {
		if r.Offset < 0 || i > 0 && r.Offset <= recs[i-1].Offset {
			return p.durable(), fmt.Errorf("%w: offsets must be ascending and not negative: %d at index %d", ErrBadBatch, r.Offset, i)
		}
	}
	end := p.end()
	for _, r := range recs {
		if end >= 0 && r.Offset < end {
			continue
		}
		lines, err := appendArchiveLine(p.lines, r)
		if err != nil {
			return p.durable(), fmt.Errorf("%w: offset %d: %v", ErrBadBatch, r.Offset, err)
		}
		if p.n == 0 {
			p.first, p.since = r.Offset, time.Now()
		}
		p.lines = lines
		p.last, p.n = r.Offset, p.n+1
		end = r.Offset + 1
		if p.n >= s.opts.MaxRecords || int64(len(p.lines)) >= s.opts.MaxBytes {
			// Full: roll before taking more. On an error the records after
			// this one are not taken; a retry of the call skips the rest.
			if _, err := s.roll(ctx, tp, p, true); err != nil {
				return p.durable(), err
			}
		}
	}
	return s.roll(ctx, tp, p, false)
}

// Flush implements Flusher: it uploads what is pending and rolls the
// buffer if it is due by age.
func (s *S3Store) Flush(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	return s.Write(ctx, tp, fence, nil)
}

// FlushAll rolls tp's buffer whatever its size or age: for a clean
// shutdown that wants everything handed over stored.
func (s *S3Store) FlushAll(ctx context.Context, tp api.TopicPartition, fence int64) (int64, error) {
	p, err := s.claimed(tp, fence)
	if err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	return s.roll(ctx, tp, p, true)
}

// Forget implements Flusher: tp is no longer held; its buffer is dropped.
// A range it reserved whose object is not stored yet is kept for Finish:
// its object may come late (it holds what the range's next owner would
// rebuild, under the same key, created only if absent), and a sink that
// stops right after losing the partition would otherwise leave it to be
// rebuilt.
func (s *S3Store) Forget(tp api.TopicPartition) {
	p := s.drop(tp)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, po := range []*pendingObject{p.pending, p.uncertain} {
		if po != nil {
			s.left = append(s.left, po)
		}
	}
	if len(s.left) > maxLeft {
		s.left = s.left[len(s.left)-maxLeft:]
	}
}

// drop removes tp's state from the store and marks it dropped, so a call
// waiting for its lock finds it gone; it returns what it removed.
func (s *S3Store) drop(tp api.TopicPartition) *s3Part {
	s.mu.Lock()
	p := s.parts[tp]
	delete(s.parts, tp)
	s.mu.Unlock()
	if p != nil {
		p.markDropped()
	}
	return p
}

// markDropped marks p as no longer the store's: a call that found p in
// the map and then waited for its lock sees it and refuses.
func (p *s3Part) markDropped() { p.dropped.Store(true) }

// maxLeft bounds the reserved objects of forgotten partitions an S3Store
// keeps for Finish.
const maxLeft = 64

// claimed returns tp's state, locked, if this store holds tp at fence.
func (s *S3Store) claimed(tp api.TopicPartition, fence int64) (*s3Part, error) {
	s.mu.Lock()
	p := s.parts[tp]
	s.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		if p.fence == fence && !p.dropped.Load() {
			return p, nil
		}
		p.mu.Unlock()
	}
	return nil, fmt.Errorf("%w: %s/%d is not claimed at fence %d by this store", ErrFenced, tp.Topic, tp.Partition, fence)
}

// roll uploads the pending object, then, when the buffer is due (or force),
// reserves its range in the fence object and uploads it.
func (s *S3Store) roll(ctx context.Context, tp api.TopicPartition, p *s3Part, force bool) (int64, error) {
	if err := s.upload(ctx, p); err != nil {
		return p.durable(), err
	}
	due := p.n >= s.opts.MaxRecords || int64(len(p.lines)) >= s.opts.MaxBytes || time.Since(p.since) >= s.opts.MaxInterval
	if p.n == 0 || !(due || force) {
		return p.durable(), nil
	}
	data, err := encodeObject(p.lines, s.opts.Compression)
	if err != nil {
		return p.durable(), err
	}
	want := fenceState{Group: s.opts.Group, Fence: p.fence, Next: p.last + 1, First: p.first, Compression: s.opts.Compression}
	key := s.FenceKey(tp)
	etag, err := s.putFence(ctx, key, want, p.etag)
	if errors.Is(err, tier.ErrPrecondition) {
		// Either this store's own put landed and its answer was lost, or
		// another owner moved the fence object on.
		cur, curTag, rerr := s.readFence(ctx, key)
		switch {
		case rerr != nil:
			return p.durable(), rerr
		case cur != want:
			s.mu.Lock()
			if s.parts[tp] == p {
				delete(s.parts, tp)
			}
			s.mu.Unlock()
			p.markDropped()
			return p.durable(), fmt.Errorf("%w: %s holds fence %d next %d; this writer has fence %d", ErrFenced, key, cur.Fence, cur.Next, p.fence)
		}
		etag, err = curTag, nil
	}
	if err != nil {
		// The put may have landed (a lost answer, or a stop while it was in
		// flight): a retry of the write finds out through the precondition;
		// should none come, Finish looks.
		p.uncertain = &pendingObject{topic: tp.Topic, key: ObjectKey(s.opts.Prefix, tp, want.First, want.Next-1, want.Compression), data: data,
			rawBytes: len(p.lines), ifReserved: &want, fenceKey: key}
		return p.durable(), err
	}
	p.uncertain = nil
	p.etag, p.state = etag, want
	p.pending = &pendingObject{topic: tp.Topic, key: ObjectKey(s.opts.Prefix, tp, want.First, want.Next-1, want.Compression), data: data, rawBytes: len(p.lines)}
	p.lines, p.first, p.last, p.n = nil, -1, -1, 0
	failpoint(StepAfterReserve)
	if err := s.upload(ctx, p); err != nil {
		return p.durable(), err
	}
	return p.durable(), nil
}

// upload creates the pending object with If-None-Match: *. An object
// already there holds the same range (an earlier attempt, or the old owner
// uploading late what it reserved): it stays.
func (s *S3Store) upload(ctx context.Context, p *s3Part) error {
	po := p.pending
	if po == nil {
		return nil
	}
	start := time.Now()
	_, err := s.objs.PutIf(ctx, po.key, po.data, "")
	if errors.Is(err, tier.ErrPrecondition) {
		if info, serr := s.objs.Stat(ctx, po.key); serr == nil && info.ETag != "" && info.ETag != md5Hex(po.data) {
			s.log.Warn("sink: s3: the object of a reserved range exists with other bytes (a compacted range rebuilt?); kept", "key", po.key)
		}
		err = nil
	} else if err == nil {
		s.objects.Add(1)
		s.bytes.Add(int64(len(po.data)))
		s.rawBytes.Add(int64(po.rawBytes))
		s.opts.Metrics.objectStored(po.topic, len(po.data), po.rawBytes, time.Since(start))
		failpoint(StepAfterUpload)
	}
	if err != nil {
		return err
	}
	p.pending = nil
	return nil
}

// Finish implements Finisher: the ranges this store reserved whose objects
// are not stored yet (of partitions it holds or forgot) are uploaded,
// within ctx. Records gathered but not
// reserved are dropped: nothing names them, and the next owner reads them
// from the log again. A range left unfinished (ctx ended, the store
// failed) stays reserved, and the next owner's Claim rebuilds it. An
// upload is one PUT, so no object is ever half-written.
func (s *S3Store) Finish(ctx context.Context) error {
	s.mu.Lock()
	left := s.left
	s.left = nil
	parts := make(map[api.TopicPartition]*s3Part, len(s.parts))
	maps.Copy(parts, s.parts)
	s.mu.Unlock()
	var errs []error
	for _, po := range left {
		if err := s.finishObject(ctx, po); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", po.key, err))
		}
	}
	for tp, p := range parts {
		p.mu.Lock()
		if p.dropped.Load() {
			p.mu.Unlock()
			continue
		}
		po := p.pending
		if po == nil {
			po = p.uncertain
		}
		if po != nil {
			if err := s.finishObject(ctx, po); err != nil {
				errs = append(errs, fmt.Errorf("%s/%d: %w", tp.Topic, tp.Partition, err))
			}
		}
		p.pending, p.uncertain = nil, nil
		p.lines, p.first, p.last, p.n = nil, -1, -1, 0
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// finishObject stores a reserved range's object; one whose reservation is
// uncertain only if the fence object shows the reservation landed.
func (s *S3Store) finishObject(ctx context.Context, po *pendingObject) error {
	if po.ifReserved != nil {
		cur, _, err := s.readFence(ctx, po.fenceKey)
		if errors.Is(err, tier.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur != *po.ifReserved {
			return nil // the put did not land, or another owner moved on
		}
	}
	return s.upload(ctx, &s3Part{pending: po})
}

func (s *S3Store) readFence(ctx context.Context, key string) (fenceState, string, error) {
	data, etag, err := s.objs.ReadObject(ctx, key)
	if err != nil {
		return fenceState{}, "", err
	}
	var st fenceState
	if err := json.Unmarshal(data, &st); err != nil {
		return fenceState{}, "", fmt.Errorf("%w: %s: %v", ErrStoreConflict, key, err)
	}
	return st, etag, nil
}

// putFence writes st under key: created when ifMatch is "", else replacing
// the object with ETag ifMatch.
func (s *S3Store) putFence(ctx context.Context, key string, st fenceState, ifMatch string) (string, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	return s.objs.PutIf(ctx, key, b, ifMatch)
}

func md5Hex(b []byte) string {
	h := md5.Sum(b)
	return hex.EncodeToString(h[:])
}

// ProbeConditionalWrites checks that the store refuses conditional puts
// whose condition fails: a create over an existing key and a replace with
// a stale ETag must both fail with 412. A store that ignores the headers
// would let a paused old owner overwrite the archive, so the S3 sink does
// not start on one. The probe object, under prefix, is deleted after.
func ProbeConditionalWrites(ctx context.Context, objs Objects, prefix string) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := prefixSlash(prefix) + ".sluice-probe-" + hex.EncodeToString(rnd[:])
	defer func() { _ = objs.Delete(context.WithoutCancel(ctx), key) }()
	etag, err := objs.PutIf(ctx, key, []byte("1"), "")
	if err != nil {
		return fmt.Errorf("sink: s3 probe: create-only put: %w", err)
	}
	if _, err := objs.PutIf(ctx, key, []byte("2"), ""); !errors.Is(err, tier.ErrPrecondition) {
		return fmt.Errorf("sink: s3 probe: the store does not refuse If-None-Match: * over an existing object (got %v): it cannot fence writers; refusing to start", err)
	}
	if _, err := objs.PutIf(ctx, key, []byte("3"), "0123456789abcdef0123456789abcdef"); !errors.Is(err, tier.ErrPrecondition) {
		return fmt.Errorf("sink: s3 probe: the store does not refuse If-Match with a stale ETag (got %v): it cannot fence writers; refusing to start", err)
	}
	if _, err := objs.PutIf(ctx, key, []byte("4"), etag); err != nil {
		return fmt.Errorf("sink: s3 probe: If-Match with the current ETag: %w", err)
	}
	return nil
}
