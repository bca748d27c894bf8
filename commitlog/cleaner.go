package commitlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Log compaction (Kafka's log cleaner) for topics with cleanup.policy
// compact: every key keeps at least its latest record, offsets never change.
//
// A clean covers the closed segments wholly below the HW (never the active
// segment, never uncommitted data). It reads them twice without the log's
// lock, through descriptors leased from the pool (closed segments do not
// change until retention deletes them, and a deleted file stays readable
// through a leased descriptor; only a truncation cuts one, and then the
// clean is abandoned):
// first to map every key to the offset of its latest record,
// then to write each segment again, one for one, with only the records that
// stay. It takes the lock only to check that the segments are still the ones
// it read and to swap the new files in (see cleaner_swap.go).

// Sentinel errors of Clean.
var (
	// ErrCleanRaced means the segments changed while they were being cleaned
	// (retention, truncation or a reset deleted or cut one): nothing was
	// swapped in, and the next clean starts over.
	ErrCleanRaced = errors.New("commitlog: segments changed during the clean")
)

// CleanOptions are a compacted topic's cleaner settings. The zero value
// cleans whenever there is anything dirty, removes tombstones at the second
// clean that sees them and protects no record by age.
type CleanOptions struct {
	// MinCleanableDirtyRatio: clean only when the bytes of closed segments
	// written since the last clean are at least this share of all cleanable
	// bytes (min.cleanable.dirty.ratio; Kafka's default is 0.5).
	MinCleanableDirtyRatio float64
	// DeleteRetention: a tombstone (a null value) goes only once this long has
	// passed since the clean that first covered it (delete.retention.ms), and
	// never at that first clean.
	DeleteRetention time.Duration
	// MinCompactionLag: a record whose timestamp is less than this before now
	// is never removed (min.compaction.lag.ms).
	MinCompactionLag time.Duration
	// Force cleans whatever the dirty ratio says.
	Force bool
}

// CleanStats describes one Clean.
type CleanStats struct {
	// Cleaned is false when there was nothing to do: no closed segment below
	// the HW, or a dirty ratio below the minimum and no tombstone due.
	Cleaned    bool
	DirtyRatio float64 // dirty bytes / cleanable bytes, before the clean
	CleanedTo  int64   // every offset below this has been covered by a clean
	Segments   int     // segments rewritten (those that lost nothing are kept as they were)
	Records    int64   // records read
	Removed    int64   // records removed, tombstones included
	Tombstones int64   // tombstones removed
	BytesIn    int64   // bytes of the segments rewritten, before
	BytesOut   int64   // and after
}

// Clean compacts the log if its dirty ratio (or a due tombstone) calls for
// it. In the rewritten segments, per key, every record older than the key's
// latest one goes (unless it is younger than MinCompactionLag); a key's
// latest record stays, unless it is a tombstone whose DeleteRetention has
// run out and no older record of the key is left. Records with a null key
// stay. Batches keep their offsets (a batch that loses records keeps its base
// and last offset; a batch that loses all of them is dropped, so readers see
// gaps, never a reordering).
//
// Clean blocks while it reads and writes; appends and reads go on meanwhile.
// Calls are serialized. It returns ErrCleanRaced when retention or a
// truncation changed the segments meanwhile, ErrClosed after Close, the
// sticky error of a read-only log, ctx's error when ctx ends first, and
// STORAGE_ERROR when reading or writing failed: before the swap that leaves
// the log as it was and writable; a failure during the swap makes the log
// read-only (the next Open finishes or drops the swap).
func (l *Log) Clean(ctx context.Context, now time.Time, opts CleanOptions) (CleanStats, error) {
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	l.mu.RLock()
	err := l.writableLocked()
	l.mu.RUnlock()
	if err != nil {
		return CleanStats{}, err
	}
	if err := l.removeStaleCleaned(); err != nil {
		return CleanStats{}, fmt.Errorf("%w: removing an earlier clean's files: %v", api.ErrStorage, err)
	}
	p, stats, err := l.planClean(now, opts)
	if err != nil || p == nil {
		return stats, err
	}
	defer p.closeSources()
	keys, err := p.mapKeys(ctx)
	if err != nil {
		return stats, p.raced(err)
	}
	outs, err := p.rewrite(ctx, keys, &stats)
	if err != nil {
		removeCleaned(l.fs, outs)
		return stats, p.raced(err)
	}
	next := p.nextCheckpoint()
	if err := l.commitClean(p, outs, next); err != nil {
		return stats, err
	}
	stats.Cleaned, stats.CleanedTo = true, next.CleanedTo
	for _, o := range outs {
		stats.Segments++
		stats.BytesIn += o.oldSize
		stats.BytesOut += o.seg.size
	}
	return stats, nil
}

// cleanPlan is one clean: the segments it covers, as they were when it
// started, and what it has learnt so far.
type cleanPlan struct {
	l      *Log
	now    time.Time
	opts   CleanOptions
	limit  int64  // offsets below it are covered: the end of the last segment
	start  int64  // the log start when the clean began
	truncs uint64 // the log's truncation count then
	cp     cleanerCheckpoint
	next   cleanerCheckpoint // cp with this pass; tombstone counts filled in by rewrite
	srcs   []cleanSource
	// Tombstones kept per range of next.Passes, and of those, how many were
	// not yet due.
	tombstones, pending []int64
	// indexInterval is the log's IndexIntervalBytes when the clean began
	// (Retune may change the log's, under mu).
	indexInterval int64
}

// cleanSource is one segment being cleaned: the segment as the log holds it
// (compared, at the swap, with what the log holds then) and a descriptor
// leased on its .log file, which it reads positionally.
type cleanSource struct {
	seg  *segment
	f    File
	l    *lease
	size int64
}

// planClean decides whether to clean, and if so snapshots the segments and
// opens them. It returns a nil plan when there is nothing to do.
func (l *Log) planClean(now time.Time, opts CleanOptions) (*cleanPlan, CleanStats, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var stats CleanStats
	if err := l.writableLocked(); err != nil {
		return nil, stats, err
	}
	// Read under the lock: a truncation rewrites it under the lock too.
	cp := l.loadCleanerCheckpoint()
	var total, dirty int64
	var segs []*segment
	for _, s := range l.segments[:len(l.segments)-1] {
		if s.next > l.hw {
			break
		}
		segs = append(segs, s)
		total += s.size
		if s.next > cp.CleanedTo {
			dirty += s.size
		}
	}
	stats.CleanedTo = cp.CleanedTo
	if total == 0 {
		return nil, stats, nil
	}
	stats.DirtyRatio = float64(dirty) / float64(total)
	due := cp.tombstonesDue(now, opts.DeleteRetention)
	if !opts.Force && !due && (dirty == 0 || stats.DirtyRatio < opts.MinCleanableDirtyRatio) {
		return nil, stats, nil
	}
	p := &cleanPlan{l: l, now: now, opts: opts, limit: segs[len(segs)-1].next, start: l.startLocked(), truncs: l.truncs, cp: cp}
	p.indexInterval = l.opts.IndexIntervalBytes
	p.next = cp.withPass(p.limit, now)
	p.tombstones = make([]int64, len(p.next.Passes))
	p.pending = make([]int64, len(p.next.Passes))
	for _, s := range segs {
		sl, err := s.use()
		if err != nil {
			p.closeSources()
			return nil, stats, fmt.Errorf("%w: opening segment %d to clean: %v", api.ErrStorage, s.base, err)
		}
		p.srcs = append(p.srcs, cleanSource{seg: s, f: sl.f, l: sl, size: s.size})
	}
	return p, stats, nil
}

// raced turns a failure to read the segments into ErrCleanRaced when they
// changed meanwhile: a truncation cuts a closed segment's file in place.
func (p *cleanPlan) raced(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	p.l.mu.RLock()
	defer p.l.mu.RUnlock()
	if !p.unchangedLocked() {
		return ErrCleanRaced
	}
	return err
}

// unchangedLocked reports whether every segment the clean read is still in
// the log and closed, as it was, and no truncation happened meanwhile (one
// that cut only above the clean's segments still made its checkpoint stale).
func (p *cleanPlan) unchangedLocked() bool {
	if p.l.truncs != p.truncs {
		return false
	}
	for _, src := range p.srcs {
		if i := p.l.indexOfLocked(src.seg); i < 0 || i == len(p.l.segments)-1 {
			return false
		}
	}
	return true
}

func (p *cleanPlan) closeSources() {
	for _, s := range p.srcs {
		s.l.release()
	}
	p.srcs = nil
}

// keyMap is what the first pass learns: the offset of every key's latest
// record, and each idempotent producer's last batch.
type keyMap struct {
	latest       map[string]int64
	lastProduced map[int64]int64 // producer id → base offset of its last batch
	// keptOlder holds keys of which the second pass kept a record older than
	// the latest (too young to go): their tombstone must stay too, or the
	// older value would come back.
	keptOlder map[string]bool
}

// mapKeys is the first pass.
func (p *cleanPlan) mapKeys(ctx context.Context) (*keyMap, error) {
	km := &keyMap{latest: map[string]int64{}, lastProduced: map[int64]int64{}, keptOlder: map[string]bool{}}
	for _, src := range p.srcs {
		err := forEachBatch(ctx, src, func(h recordbatch.Header, b []byte, _, _ bool) error {
			if h.ProducerID >= 0 {
				km.lastProduced[h.ProducerID] = h.BaseOffset
			}
			if h.Control() {
				return nil
			}
			_, recs, err := recordbatch.Decode(b)
			if err != nil {
				return err
			}
			for i := range recs {
				if recs[i].Key != nil {
					km.latest[string(recs[i].Key)] = recs[i].Offset
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return km, nil
}

// keep decides one record's fate in the second pass.
func (p *cleanPlan) keep(km *keyMap, r *recordbatch.Record, stats *CleanStats) bool {
	stats.Records++
	if r.Key == nil {
		return true // nothing can supersede it
	}
	young := p.now.UnixMilli()-r.Timestamp < p.opts.MinCompactionLag.Milliseconds()
	if r.Offset < km.latest[string(r.Key)] {
		if young {
			km.keptOlder[string(r.Key)] = true
			return true
		}
		stats.Removed++
		if r.Value == nil {
			stats.Tombstones++
		}
		return false
	}
	if r.Value != nil {
		return true
	}
	// The key's latest record is a tombstone.
	at, cleaned := p.cp.firstCleaned(r.Offset)
	due := cleaned && p.now.Sub(at) >= p.opts.DeleteRetention
	if due && !young && !km.keptOlder[string(r.Key)] {
		stats.Removed++
		stats.Tombstones++
		return false
	}
	if i := p.next.passIndex(r.Offset); i >= 0 {
		p.tombstones[i]++
		if !due {
			p.pending[i]++
		}
	}
	return true
}

// cleanedSegment is one segment written anew, not yet in the log.
type cleanedSegment struct {
	old     *segment // the segment it replaces
	oldSize int64
	seg     *segment // on the ".cleaned" files until the swap renames them
}

// rewriteFlushBytes is how much output the second pass gathers before
// writing it.
const rewriteFlushBytes = 1 << 20

// rewrite is the second pass: every segment is written again with the
// records that stay, to ".cleaned" files that are fsynced before it returns.
// A segment that loses nothing is left out (its new files removed). On error
// the caller removes what was written (the returned segments).
func (p *cleanPlan) rewrite(ctx context.Context, km *keyMap, stats *CleanStats) ([]cleanedSegment, error) {
	var outs []cleanedSegment
	for _, src := range p.srcs {
		ns, err := createCleanedSegment(p.l.fs, p.l.files, p.l.dir, src.seg.base)
		if err != nil {
			return outs, fmt.Errorf("%w: %v", api.ErrStorage, err)
		}
		out := cleanedSegment{old: src.seg, oldSize: src.size, seg: ns}
		outs = append(outs, out)
		changed, err := p.rewriteSegment(ctx, km, src, ns, stats)
		if err != nil {
			return outs, err
		}
		if !changed {
			outs = outs[:len(outs)-1]
			removeCleaned(p.l.fs, []cleanedSegment{out})
			continue
		}
		if err := ns.sync(); err != nil {
			return outs, fmt.Errorf("%w: syncing cleaned segment %d: %v", api.ErrStorage, ns.base, err)
		}
	}
	return outs, nil
}

// rewriteSegment writes src's surviving batches to ns and reports whether
// anything was removed.
func (p *cleanPlan) rewriteSegment(ctx context.Context, km *keyMap, src cleanSource, ns *segment, stats *CleanStats) (bool, error) {
	var buf []byte
	var hs []recordbatch.Header
	changed := false
	flush := func() error {
		if len(hs) == 0 {
			return nil
		}
		if err := ns.appendBatches(buf, hs, p.indexInterval, p.now); err != nil {
			return fmt.Errorf("%w: writing cleaned segment %d: %v", api.ErrStorage, ns.base, err)
		}
		buf, hs = buf[:0], hs[:0]
		return nil
	}
	err := forEachBatch(ctx, src, func(h recordbatch.Header, b []byte, first, last bool) error {
		start := len(buf)
		if h.Control() {
			buf = append(buf, b...)
		} else {
			var kept int
			var err error
			buf, kept, err = recordbatch.Filter(buf, b, func(r *recordbatch.Record) bool { return p.keep(km, r, stats) })
			if err != nil {
				return err
			}
			if kept < int(h.RecordCount) {
				changed = true
			}
			// An emptied batch goes, except:
			//   - the segment's first and last batches, which stay (empty) so
			//     the segment keeps its base offset (its name) and its end: the
			//     segments still chain, as recovery requires;
			//   - an idempotent producer's last batch: producer state is rebuilt
			//     from batch headers when the snapshot is missing, and by every
			//     follower that copies this log, so the header carrying the
			//     producer's epoch and last sequence must outlive its records
			//     (Kafka keeps it for the same reason).
			if kept == 0 && !first && !last && !(h.ProducerID >= 0 && km.lastProduced[h.ProducerID] == h.BaseOffset) {
				buf = buf[:start]
				return nil
			}
		}
		nh, err := recordbatch.ParseHeader(buf[start:])
		if err != nil {
			return err
		}
		hs = append(hs, nh)
		if len(buf) >= rewriteFlushBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return changed, flush()
}

// forEachBatch reads src's batches in order, with fn told whether each is
// the segment's first or last. b is reused between calls.
func forEachBatch(ctx context.Context, src cleanSource, fn func(h recordbatch.Header, b []byte, first, last bool) error) error {
	r := bufio.NewReaderSize(io.NewSectionReader(src.f, 0, src.size), 256<<10)
	var b []byte
	for pos := int64(0); pos < src.size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if cap(b) < recordbatch.HeaderSize {
			b = make([]byte, recordbatch.HeaderSize, 64<<10)
		}
		b = b[:recordbatch.HeaderSize]
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("%w: reading segment %d at %d: %v", api.ErrStorage, src.seg.base, pos, err)
		}
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return err
		}
		if h.Size() > cap(b) {
			nb := make([]byte, h.Size())
			copy(nb, b)
			b = nb
		}
		b = b[:h.Size()]
		if _, err := io.ReadFull(r, b[recordbatch.HeaderSize:]); err != nil {
			return fmt.Errorf("%w: reading segment %d at %d: %v", api.ErrStorage, src.seg.base, pos, err)
		}
		end := pos + int64(h.Size())
		if err := fn(h, b, pos == 0, end == src.size); err != nil {
			return err
		}
		pos = end
	}
	return nil
}

// nextCheckpoint is the checkpoint to write once the swap is done: this pass
// added, tombstone counts as the second pass found them (ranges past the
// pass's limit keep theirs: it did not read them), then compacted.
func (p *cleanPlan) nextCheckpoint() cleanerCheckpoint {
	next := p.next
	next.Passes = append([]cleanPass(nil), next.Passes...)
	for i := range next.Passes {
		if next.Passes[i].To <= p.limit {
			next.Passes[i].Tombstones, next.Passes[i].Pending = p.tombstones[i], p.pending[i]
		}
	}
	return next.compacted(p.start, p.now, p.opts.DeleteRetention)
}
