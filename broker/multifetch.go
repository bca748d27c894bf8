package broker

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/tier"
)

// FetchSpec is one fetch over any number of this broker's partitions: the
// raw /fetch route (one partition), a follower's replication stream (every
// partition it follows here) and the Kafka listener's Fetch all read
// through FetchPartitions.
type FetchSpec struct {
	// ReplicaID is the fetching broker for a follower (reads reach the log
	// end, and each partition's fetch offset is that follower's progress);
	// 0 for a consumer (reads reach the HW).
	ReplicaID int32
	// MaxWait bounds the long poll: the answer comes once MinBytes are
	// there, a partition has an error, or MaxWait passed.
	MaxWait  time.Duration
	MinBytes int64
	// Wake, when it receives, ends the long poll early (a follower's
	// stream has a partition to add to it); nil: only the above do.
	Wake <-chan struct{}
	// MaxBytes bounds the answer's data over all partitions (0: no bound
	// but the partitions' own). The first partition with data gets at
	// least one whole batch even when it is larger.
	MaxBytes   int64
	Partitions []FetchPartitionSpec
	// Cold, when set, lets a consumer's fetch below a partition's local
	// log start read from the object store (a follower never does).
	Cold bool
}

// FetchPartitionSpec is one partition of a FetchSpec.
type FetchPartitionSpec struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1: not checked
	MaxBytes    int64 // this partition's data bound
	// MaxRecords stops the read after the batch holding the
	// MaxRecords-th record from Offset (0: no such bound).
	MaxRecords int64
}

// FetchedPartition is what FetchPartitions read for one partition. Either
// Local (a segment file range, for sendfile: a local segment's, or a
// remote one's in the disk cache) or Cold (views of cached object-store
// chunks) holds the data; Size is their length. Close gives Local's
// descriptor back.
type FetchedPartition struct {
	Err           error
	NextOffset    int64
	HighWatermark int64
	LogStart      int64 // the local log start
	LogEnd        int64
	Local         commitlog.ReadResult
	Cold          tier.Pieces
	Size          int64
	// Remote says the data came from the object store's records (Cold, or
	// Local from the disk cache).
	Remote bool
	cold   tier.ColdRange // the disk cache's descriptor, closed by Close
}

// Close gives back what the read holds. It may be called more than once.
func (f *FetchedPartition) Close() {
	_ = f.Local.Close()
	f.cold.Close()
	f.Cold = nil
}

// CloseFetched closes every result of a FetchPartitions call.
func CloseFetched(res []FetchedPartition) {
	for i := range res {
		res[i].Close()
	}
}

// FetchPartitions reads spec's partitions, long-polling until MinBytes are
// there, a partition answers an error, MaxWait passes or ctx ends. The
// results come in spec's order; the caller closes them (CloseFetched).
//
// A follower's fetch offsets record its progress on each partition it
// leads (ISR and HW) once, at the start; the wait is one Watcher over every
// partition, so a long poll over a thousand idle partitions holds one
// goroutine and wakes when any of them moves: for a follower, when its log
// end moves; for a consumer, when its HW does.
func (b *Broker) FetchPartitions(ctx context.Context, spec FetchSpec) []FetchedPartition {
	res := make([]FetchedPartition, len(spec.Partitions))
	parts := make([]*Partition, len(spec.Partitions))
	md := b.view.Current()
	failed := false
	for i, ps := range spec.Partitions {
		p, err := b.parts.get(md, ps.Topic, ps.Partition)
		if err == nil {
			if spec.ReplicaID > 0 {
				err = p.onFollowerFetch(spec.ReplicaID, ps.Offset, ps.LeaderEpoch)
			} else {
				err = p.checkLeader(ps.LeaderEpoch)
			}
		}
		if err != nil {
			res[i] = FetchedPartition{Err: err, NextOffset: ps.Offset}
			failed = true
			continue
		}
		parts[i] = p
	}
	if failed {
		b.fillPositions(res, parts)
		return res
	}
	wctx, cancel := context.WithTimeout(ctx, spec.MaxWait)
	defer cancel()
	var w *commitlog.Watcher
	defer func() {
		if w != nil {
			for _, p := range parts {
				p.log.Unwatch(w)
			}
		}
	}()
	woken := false
	for {
		total, failed := b.readPartitions(ctx, spec, parts, res)
		if failed || total >= spec.MinBytes || wctx.Err() != nil || woken {
			return res
		}
		CloseFetched(res)
		if w == nil {
			// Watch, then read once more: a move between the read above
			// and the watch would otherwise go unseen.
			// A follower reads up to the log end, a consumer up to
			// the HW (readPartition): each wakes only for the move it
			// can use.
			on := commitlog.HWMoves
			if spec.ReplicaID > 0 {
				on = commitlog.EndMoves
			}
			w = commitlog.NewWatcher(on)
			for _, p := range parts {
				p.log.Watch(w)
			}
			continue
		}
		select {
		case <-w.C():
		case <-wctx.Done():
		case <-spec.Wake:
			woken = true // read once more, then answer
		}
	}
}

// readPartitions reads each partition once into res, in order, within the
// answer's byte budget. failed reports a partition error.
func (b *Broker) readPartitions(ctx context.Context, spec FetchSpec, parts []*Partition, res []FetchedPartition) (total int64, failed bool) {
	for i, p := range parts {
		ps := spec.Partitions[i]
		budget := ps.MaxBytes
		if spec.MaxBytes > 0 {
			budget = min(budget, spec.MaxBytes-total)
		}
		if budget <= 0 {
			o := p.log.Offsets()
			res[i] = FetchedPartition{NextOffset: ps.Offset, HighWatermark: o.HighWatermark, LogStart: o.LogStart, LogEnd: o.LogEnd}
			continue
		}
		f := b.readPartition(ctx, spec, p, ps, budget)
		if f.Err != nil {
			failed = true
		} else if total > 0 && f.Size > budget {
			// Only the first partition with data may pass the budget.
			f.Close()
			f.Size, f.NextOffset = 0, ps.Offset
		}
		total += f.Size
		res[i] = f
	}
	return total, failed
}

// readPartition reads one partition: locally, or from the object store for
// a consumer below the local log start.
func (b *Broker) readPartition(ctx context.Context, spec FetchSpec, p *Partition, ps FetchPartitionSpec, budget int64) FetchedPartition {
	o := p.log.Offsets()
	if spec.Cold && spec.ReplicaID == 0 && ps.Offset < o.LogStart {
		if f, ok := b.readCold(ctx, p, ps, budget); ok {
			return f
		}
	}
	limit := o.HighWatermark
	if spec.ReplicaID > 0 {
		limit = o.LogEnd // followers copy what is not committed yet
	}
	r, err := p.log.ReadRecords(ps.Offset, budget, limit, ps.MaxRecords)
	if err != nil && spec.Cold && spec.ReplicaID == 0 && errors.Is(err, api.ErrOffsetOutOfRange) && ps.Offset < r.LogStart {
		// Local retention moved the local start past the offset since
		// the positions above: the object store has it now.
		if f, ok := b.readCold(ctx, p, ps, budget); ok {
			return f
		}
	}
	return FetchedPartition{Err: err, NextOffset: r.NextOffset, HighWatermark: r.HighWatermark, LogStart: r.LogStart, LogEnd: r.LogEnd, Local: r, Size: r.Size}
}

// readCold reads a consumer's fetch below the local log start from the
// object store, through the cold reader's cache. ok is false when the
// partition has no remote segment holding the offset.
func (b *Broker) readCold(ctx context.Context, p *Partition, ps FetchPartitionSpec, budget int64) (FetchedPartition, bool) {
	seg, ok := b.coldSegment(ctx, p, ps.Offset)
	if !ok {
		return FetchedPartition{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cr, err := b.cold.ReadRange(cctx, seg, ps.Offset, budget, ps.MaxRecords)
	pos := p.positions()
	f := FetchedPartition{Err: err, NextOffset: ps.Offset, HighWatermark: pos.HighWatermark, LogStart: pos.LocalStartOffset, LogEnd: pos.LogEndOffset, Remote: true}
	if err != nil {
		return f, true
	}
	next := cr.Next
	if next == seg.Next {
		// The consumer crosses into the next segment with its next fetch.
		segs, _ := p.tier.snapshot()
		if following, ok := tier.Covering(segs, next); ok {
			b.cold.Prefetch(following)
		}
	}
	if cr.File != nil {
		// The disk cache's file: written out as a local segment's is.
		f.cold = cr
		f.Local = commitlog.ReadResult{File: cr.File, Position: cr.Position, Size: cr.Size, NextOffset: next}
		f.Size, f.NextOffset = cr.Size, next
		return f, true
	}
	f.Cold, f.Size, f.NextOffset = cr.Pieces, cr.Size, next
	return f, true
}

// fillPositions gives the partitions of an answer that failed early their
// positions, so the ones without an error still say where they stand.
func (b *Broker) fillPositions(res []FetchedPartition, parts []*Partition) {
	for i, p := range parts {
		if p == nil {
			continue
		}
		o := p.log.Offsets()
		res[i].HighWatermark, res[i].LogStart, res[i].LogEnd = o.HighWatermark, o.LogStart, o.LogEnd
	}
}
