// Package commitlog is a partition's log on local disk: segments of Kafka
// RecordBatch v2 bytes with sparse offset and time indexes, crash recovery,
// retention, an explicit fsync policy, the high-watermark checkpoint and the
// leader-epoch lineage. One Log is one partition; it knows nothing about
// replication beyond storing what it is told (HW, epochs).
package commitlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Sentinel errors.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("commitlog: log closed")
)

// Log is one partition's log. It is safe for concurrent use: appends are
// serialized, reads run in parallel with each other and with appends.
type Log struct {
	fs    FS
	dir   string
	files *FilePool // where segment descriptors come from (Options.Files)
	// opts is fixed at Open but for the fields Retune replaces, which are
	// read and written under mu.
	opts Options

	// mu guards every field below. Appends, truncation, roll and retention take
	// it exclusively; reads take it shared only to locate bytes and lease a
	// descriptor, never while data is copied to a client. FilePool.mu is
	// taken inside it.
	mu       sync.RWMutex
	segments []*segment // ordered by base offset; the last one takes appends
	hw       int64
	epochs   epochCache
	// epochsUnsaved: an AssignEpoch entry is in memory only; the next
	// append or cut saves the lineage with it.
	epochsUnsaved bool
	producers     producerState
	snapshots     []int64       // offsets of the producer snapshot files, ascending
	writeErr      error         // sticky: once set the log refuses appends
	unflushed     int64         // records appended since the last fsync
	flushTimer    *time.Timer   // armed while unflushed data waits for FlushInterval
	hwCh          chan struct{} // closed and replaced whenever hw or the log end moves
	watch         watchers      // woken with hwCh
	hwSaved       int64         // the HW last written to the checkpoint file
	closed        bool
	truncs        uint64 // TruncateTo and ResetTo calls: a clean spanning one is abandoned

	// cleanMu serializes Clean. Order: cleanMu before mu. A clean holds it
	// throughout and takes mu only briefly, to plan and to swap.
	cleanMu sync.Mutex
	// syncMu is held by the interval fsync across its Sync, which runs
	// without mu (appends and reads go on meanwhile), and by Close, so
	// Close never writes the clean-shutdown marker while an interval
	// fsync it cannot see is still to report. Order: syncMu before mu.
	syncMu sync.Mutex
	// ckMu is held by CheckpointHW across its write, which runs without
	// mu, and by Close, so no checkpoint lands after Close's own. Order:
	// ckMu before syncMu before mu.
	ckMu sync.Mutex
}

// Open opens or creates the log in dir (relative to fsys), recovering it if the
// last shutdown was not clean.
func Open(fsys FS, dir string, opts Options) (*Log, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %v", api.ErrStorage, dir, err)
	}
	l := &Log{fs: fsys, dir: dir, files: opts.Files, opts: opts, hwCh: make(chan struct{})}
	if err := l.load(); err != nil {
		_ = l.closeSegments() // the load error is the one to report
		return nil, err
	}
	return l, nil
}

// AppendInfo describes what one Append wrote.
type AppendInfo struct {
	FirstOffset  int64
	LastOffset   int64
	Records      int64
	MaxTimestamp int64
	// Duplicate is set when the batch was an idempotent producer's retry of
	// a batch already in the log: nothing was written, and the offsets are
	// the original ones.
	Duplicate bool
}

// Append validates whole RecordBatch v2 batches in buf (CRC, layout, and the
// records inside: see recordbatch.Validate with Produced), stamps each with its base offset and leaderEpoch in place, and writes
// them at the end of the log. It either writes all batches or none. After a
// disk error the log refuses appends with STORAGE_ERROR until it is reopened.
// When the flush policy asks for it, the data is fsynced before Append returns.
func (l *Log) Append(buf []byte, leaderEpoch int32) (AppendInfo, error) {
	hs, err := validateBatches(buf, false)
	if err != nil {
		return AppendInfo{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return AppendInfo{}, err
	}
	if hs[0].ProducerID >= 0 {
		if len(hs) != 1 {
			return AppendInfo{}, api.Errorf(api.CodeInvalidRecord, "an idempotent producer's batch must come alone")
		}
		dup, err := l.producers.dupOrCheck(hs[0])
		if err != nil {
			return AppendInfo{}, err
		}
		if dup != nil {
			return AppendInfo{FirstOffset: dup.firstOffset, LastOffset: dup.lastOffset, Records: dup.lastOffset - dup.firstOffset + 1, MaxTimestamp: -1, Duplicate: true}, nil
		}
	}
	next := l.endLocked()
	pos := 0
	for i := range hs {
		h := &hs[i]
		recordbatch.SetBaseOffset(buf[pos:], next)
		recordbatch.SetLeaderEpoch(buf[pos:], leaderEpoch)
		pos += h.Size()
		h.BaseOffset, h.PartitionLeaderEpoch = next, leaderEpoch
		next = h.NextOffset()
	}
	return l.writeBatchesLocked(buf, hs)
}

// AppendReplica writes batches that already carry their offsets and epochs, as a
// follower copies them from its leader. The first batch must start at or
// after the log end (after it when the leader's log was compacted there).
// Each batch's header, size and CRC are checked (recordbatch.VerifyReplicated),
// not its records: the leader checked those when it took the batch.
func (l *Log) AppendReplica(buf []byte) (AppendInfo, error) {
	hs, err := validateBatches(buf, true)
	if err != nil {
		return AppendInfo{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return AppendInfo{}, err
	}
	next := l.endLocked()
	for _, h := range hs {
		// Offsets only go up, but need not be dense: log compaction drops
		// batches whose records all went, and a follower copies the gaps.
		if h.BaseOffset < next {
			return AppendInfo{}, api.Errorf(api.CodeCorruptRecord, "replica batch at offset %d, log ends at %d", h.BaseOffset, next)
		}
		next = h.NextOffset()
	}
	return l.writeBatchesLocked(buf, hs)
}

// writeBatchesLocked writes batches whose offsets and epochs are final (the
// leader stamped them, or a follower copied them), extends the epoch lineage
// and applies the flush policy.
func (l *Log) writeBatchesLocked(buf []byte, hs []recordbatch.Header) (AppendInfo, error) {
	info := AppendInfo{FirstOffset: hs[0].BaseOffset, LastOffset: hs[len(hs)-1].LastOffset(), MaxTimestamp: -1}
	for _, h := range hs {
		info.Records += int64(h.RecordCount)
		info.MaxTimestamp = max(info.MaxTimestamp, h.MaxTimestamp)
	}
	if err := l.writeLocked(buf, hs); err != nil {
		return AppendInfo{}, err
	}
	changed := false
	for _, h := range hs {
		changed = l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset) || changed
	}
	if changed || l.epochsUnsaved {
		if err := l.saveEpochsLocked(); err != nil {
			return info, l.failLocked(err)
		}
	}
	return info, l.afterAppendLocked(info.Records)
}

// validateBatches checks that buf is one or more whole batches. A
// producer's (replica false) must pass recordbatch.Validate: CRC, layout, and
// every record inside (decompressed if need be), so that no batch in the log
// can stall a reader. A follower's copy of its leader's batches (replica
// true) must pass recordbatch.VerifyReplicated: CRC and header, with what log
// compaction leaves allowed (fewer records than offsets, down to none); its
// records were checked when the leader took them, and the CRC proves they are
// the same bytes.
func validateBatches(buf []byte, replica bool) ([]recordbatch.Header, error) {
	if len(buf) == 0 {
		return nil, api.Errorf(api.CodeInvalidRecord, "no record batch in the request")
	}
	check := func(b []byte) (recordbatch.Header, error) { return recordbatch.Validate(b, recordbatch.Produced) }
	if replica {
		check = recordbatch.VerifyReplicated
	}
	var hs []recordbatch.Header
	n, err := recordbatch.Scan(buf, false, func(_ recordbatch.Header, batch []byte) error {
		h, err := check(batch)
		if err != nil {
			return err
		}
		hs = append(hs, h)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n != len(buf) {
		return nil, api.Errorf(api.CodeCorruptRecord, "%d trailing bytes are not a whole record batch", len(buf)-n)
	}
	return hs, nil
}

func (l *Log) writableLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.writeErr
}

// writeLocked rolls if needed and writes buf (whole batches described by hs) to
// the active segment. A failed write sets the sticky error.
func (l *Log) writeLocked(buf []byte, hs []recordbatch.Header) error {
	now := l.opts.Now()
	if err := l.maybeRollLocked(int64(len(buf)), now); err != nil {
		if errors.Is(err, errNoDescriptors) {
			return err // nothing changed; the next append rolls again
		}
		return l.failLocked(err)
	}
	seg := l.activeLocked()
	if err := seg.appendBatches(buf, hs, l.opts.IndexIntervalBytes, now); err != nil {
		if outOfDescriptors(err) {
			// The active segment's descriptor was closed while idle and
			// cannot be opened again now: passing, like a roll's; nothing
			// was written.
			return fmt.Errorf("%w: %w: %s: no file descriptor for the active segment: %v", api.ErrStorage, errNoDescriptors, l.dir, err)
		}
		// Whatever reached the file past seg.size is never read, and the next
		// recovery truncates it; try to cut it now too.
		if seg.wlease != nil {
			_ = seg.wlease.f.Truncate(seg.size)
		}
		return l.failLocked(err)
	}
	for _, h := range hs {
		l.producers.record(h)
	}
	l.notifyLocked(EndMoves)
	return nil
}

// failLocked makes a disk error sticky: the log turns read-only.
func (l *Log) failLocked(err error) error {
	if l.writeErr == nil {
		l.writeErr = fmt.Errorf("%w: %s: %v", api.ErrStorage, l.dir, err)
		l.opts.Logger.Error("log is read-only after a disk error", "dir", l.dir, "err", err)
		if l.opts.OnFail != nil {
			l.opts.OnFail(l.writeErr)
		}
	}
	return l.writeErr
}

// Err returns the sticky disk error that made the log read-only, or nil.
func (l *Log) Err() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.writeErr
}

func (l *Log) afterAppendLocked(records int64) error {
	l.unflushed += records
	if l.opts.FlushMessages > 0 && l.unflushed >= l.opts.FlushMessages {
		return l.flushLocked()
	}
	if l.opts.FlushInterval > 0 && l.flushTimer == nil {
		l.flushTimer = time.AfterFunc(l.opts.FlushInterval, l.flushFromTimer)
	}
	return nil
}

// flushFromTimer is the interval fsync. It fsyncs the active segment
// without holding mu: an fsync can take a long time on a busy disk, and
// holding mu through it stalled every append and read of the partition
// (and with them acks=all, which waits on followers' appends). What is
// synced and when is as before; only the lock differs:
//   - it fsyncs the writer's descriptor (segment.wlease) through a lease of
//     its own, so neither a roll nor a deletion meanwhile closes it;
//   - appends made during the Sync may or may not be in it; they stay
//     counted in unflushed and the timer is armed again for them; without
//     any, the writer's lease ends: everything written through it is on
//     disk, and the descriptor may go idle;
//   - a roll meanwhile fsyncs the segment itself (two fsyncs of one file);
//   - a truncation or reset that deleted the file meanwhile leaves the
//     Sync to an unlinked file: those bytes are gone from the log;
//   - any Sync error fails the log (sticky, read-only), as before,
//     whichever segment is active by then: an fsync error is reported once
//     per descriptor, so the roll's own fsync may not have seen it.
func (l *Log) flushFromTimer() {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	l.flushTimer = nil
	seg := l.activeLocked()
	if l.closed || l.unflushed == 0 || l.writeErr != nil || seg.wlease == nil {
		l.mu.Unlock()
		return
	}
	n, writes, sl := l.unflushed, seg.writes, seg.wlease.share()
	l.mu.Unlock()

	err := sl.f.Sync()
	sl.release()

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		_ = l.failLocked(err) // sticky; reported by Err and appends
		return
	}
	if l.closed || l.writeErr != nil {
		return
	}
	if err == nil && l.activeLocked() == seg {
		// A roll meanwhile zeroed unflushed itself, for the new segment.
		l.unflushed = max(0, l.unflushed-n)
		if seg.writes == writes && seg.wlease != nil {
			seg.wlease.release()
			seg.wlease = nil
		}
	}
	if l.unflushed > 0 && l.flushTimer == nil && l.opts.FlushInterval > 0 {
		l.flushTimer = time.AfterFunc(l.opts.FlushInterval, l.flushFromTimer)
	}
}

// Flush fsyncs everything appended so far.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return l.flushLocked()
}

func (l *Log) flushLocked() error {
	if l.writeErr != nil {
		return l.writeErr
	}
	if err := l.activeLocked().syncLog(); err != nil {
		return l.failLocked(err)
	}
	l.unflushed = 0
	if l.flushTimer != nil {
		l.flushTimer.Stop()
		l.flushTimer = nil
	}
	return nil
}

// maybeRollLocked starts a new segment when the incoming bytes would not fit the
// active one, or the active one is older than SegmentAge. The closed segment is
// fsynced first, so only the active segment can ever hold unsynced bytes.
func (l *Log) maybeRollLocked(incoming int64, now time.Time) error {
	seg := l.activeLocked()
	if seg.size == 0 {
		return nil
	}
	if seg.size+incoming <= l.opts.SegmentBytes && now.Sub(seg.rollAt) < l.opts.SegmentAge {
		return nil
	}
	return l.rollLocked()
}

func (l *Log) rollLocked() error {
	seg := l.activeLocked()
	if err := seg.syncLog(); err != nil {
		return err
	}
	l.unflushed = 0
	if err := seg.saveIndexes(); err != nil {
		if outOfDescriptors(err) {
			// As below: the active segment, synced, stays active; its
			// indexes are written at the next roll.
			return fmt.Errorf("%w: %w: %s: no file descriptor to write the closing segment's indexes: %v", api.ErrStorage, errNoDescriptors, l.dir, err)
		}
		return err
	}
	ns, err := createSegment(l.fs, l.files, l.dir, seg.next, "", false)
	if err != nil {
		if outOfDescriptors(err) {
			// Out of file descriptors: passing, not a disk failure. The log
			// stays as it was (the active segment is synced and stays
			// active) and writable; the append fails retriably. A file
			// the failed open left is empty: it goes.
			for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				_ = l.fs.Remove(segmentName(l.dir, seg.next, suf))
			}
			return fmt.Errorf("%w: %w: %s: no file descriptor for a new segment: %v", api.ErrStorage, errNoDescriptors, l.dir, err)
		}
		return err
	}
	l.segments = append(l.segments, ns)
	if err := l.fs.SyncDir(l.dir); err != nil {
		return err
	}
	// The closed segment may be deleted from now on (retention, tiering):
	// its producers' sequences must outlive it.
	return l.saveProducerSnapshotLocked()
}

// Roll closes the active segment (if it holds anything) and starts a new one.
func (l *Log) Roll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if l.activeLocked().size == 0 {
		return nil
	}
	if err := l.rollLocked(); err != nil {
		if errors.Is(err, errNoDescriptors) {
			return err
		}
		return l.failLocked(err)
	}
	return nil
}

// errNoDescriptors marks an append that found no file descriptor for the
// segment it writes (a new one, or the active one after the pool closed
// its idle descriptor): retriable, and the log stays writable.
var errNoDescriptors = errors.New("out of file descriptors")

// outOfDescriptors reports whether err is an open that failed for want of
// a file descriptor: passing, not a disk failure.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

func (l *Log) activeLocked() *segment { return l.segments[len(l.segments)-1] }
func (l *Log) endLocked() int64       { return l.activeLocked().next }
func (l *Log) startLocked() int64     { return l.segments[0].base }

// notifyLocked wakes the readers waiting for the log to move: every Wait,
// and the Watchers waiting for one of the moves in m (AnyMoves for a change
// that is neither an append nor an HW move: a truncation, a new log start,
// a compaction swap, a close).
func (l *Log) notifyLocked(m Moves) {
	close(l.hwCh)
	l.hwCh = make(chan struct{})
	l.watch.wake(m)
}

// Offsets is a snapshot of a log's positions.
type Offsets struct {
	LogStart      int64 // first offset still stored
	HighWatermark int64 // first offset not yet committed; consumers read below it
	LogEnd        int64 // offset the next append gets (LEO)
}

// Offsets returns the log's current positions.
func (l *Log) Offsets() Offsets {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return Offsets{LogStart: l.startLocked(), HighWatermark: l.hw, LogEnd: l.endLocked()}
}

// SetHighWatermark moves the HW, clamped to [log start, log end]. It never moves
// it backwards except through TruncateTo.
func (l *Log) SetHighWatermark(hw int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hw = min(max(hw, l.startLocked()), l.endLocked())
	if hw > l.hw {
		l.hw = hw
		l.notifyLocked(HWMoves)
	}
}

// Wait blocks until the log has moved past the given snapshot: the HW went
// above hw or the end above leo. It returns ctx's error when ctx ends first.
func (l *Log) Wait(ctx context.Context, hw, leo int64) error {
	for {
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			return ErrClosed
		}
		moved := l.hw > hw || l.endLocked() > leo
		ch := l.hwCh
		l.mu.RUnlock()
		if moved {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// CheckpointHW writes the HW to its checkpoint file if it moved since the last
// write. A broker calls it periodically, so that after a crash the HW starts
// close to where it was instead of at the log start (it is only a starting
// point: a leader recomputes it from its ISR, a follower takes the leader's).
func (l *Log) CheckpointHW() error {
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	l.mu.RLock()
	hw, skip := l.hw, l.closed || l.writeErr != nil || l.hw == l.hwSaved
	l.mu.RUnlock()
	if skip {
		return nil
	}
	// The write and its two fsyncs run without mu: a slow disk holds
	// this checkpoint, not the appends and reads of the partition.
	err := writeInt64File(l.fs, l.dir, hwFile, hw)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		return l.failLocked(err)
	}
	if l.hw < hw {
		// A truncation took the HW below what was just written: the
		// checkpoint must not claim more than the log has committed.
		if err := writeInt64File(l.fs, l.dir, hwFile, l.hw); err != nil {
			return l.failLocked(err)
		}
		hw = l.hw
	}
	l.hwSaved = hw
	return nil
}

// LatestEpoch returns the newest leader epoch in the log's lineage, or -1.
func (l *Log) LatestEpoch() int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.epochs.latest()
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch (KIP-101) for this log.
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.epochs.endOffsetFor(epoch, l.endLocked())
}

// AssignEpoch records that leader epoch starts at the current log end, as a
// new leader does before it takes writes, so that followers asking where an
// earlier epoch ends get the right answer even before the first append.
//
// The entry is kept in memory: the checkpoint file is written (and synced)
// with the first append after it, or a cut. An epoch with no batch in it
// is not kept across a restart in any case (Open drops the epochs that
// start at the log end), and its loss changes no answer: the epoch before
// it then ends at the log end, where this one started. Syncing the file
// here cost a broker taking over a thousand leaderships an fsync pair per
// partition, one after another, before it served the last of them
// (seconds after the metadata named it).
func (l *Log) AssignEpoch(epoch int32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if l.epochs.assign(epoch, l.endLocked()) {
		l.epochsUnsaved = true
	}
	return nil
}

// Epochs returns a copy of the leader-epoch lineage.
func (l *Log) Epochs() []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return append([]EpochEntry(nil), l.epochs.entries...)
}

func (l *Log) saveEpochsLocked() error {
	if err := WriteFileAtomic(l.fs, l.dir, epochFile, l.epochs.encode()); err != nil {
		return err
	}
	l.epochsUnsaved = false
	return nil
}

// Close flushes the log, checkpoints the HW, marks the shutdown clean and
// releases every file. Later calls return ErrClosed.
func (l *Log) Close() error {
	l.ckMu.Lock() // so does an HW checkpoint
	defer l.ckMu.Unlock()
	l.syncMu.Lock() // an interval fsync in flight reports first
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closed = true
	if l.flushTimer != nil {
		l.flushTimer.Stop()
		l.flushTimer = nil
	}
	var err error
	if l.writeErr == nil {
		// Order matters: data and indexes are on disk before the HW checkpoint,
		// and both before the marker that lets the next Open skip recovery.
		for _, s := range l.segments {
			err = errors.Join(err, s.sync())
		}
		err = errors.Join(err, writeInt64File(l.fs, l.dir, hwFile, l.hw), l.saveProducerSnapshotLocked())
		if err == nil {
			err = WriteFileAtomic(l.fs, l.dir, cleanMarkerFile, nil)
		}
	}
	l.notifyLocked(AnyMoves)
	return errors.Join(err, l.closeSegments())
}

func (l *Log) closeSegments() error {
	for _, s := range l.segments {
		s.close()
	}
	return nil
}

// Delete closes the log and removes its directory.
func (l *Log) Delete() error {
	err := l.Close()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return errors.Join(err, l.fs.RemoveAll(l.dir))
}

// Dir is the log's directory, relative to its FS.
func (l *Log) Dir() string { return l.dir }

// segmentIndexLocked returns the index of the segment that may hold offset
// (the last one whose base is <= offset), or -1.
func (l *Log) segmentIndexLocked(offset int64) int {
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset })
	return i - 1
}
