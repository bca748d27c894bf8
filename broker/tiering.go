package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/tier"
)

// partitionTier is a partition's view of its remote segments. Guarded by mu.
// The leader keeps the full list (it is the only writer of records while it
// leads); every replica keeps the remote end, which bounds its local
// retention.
type partitionTier struct {
	mu     sync.Mutex
	remote []tier.RemoteSegment // valid when loaded
	loaded bool                 // remote was read in the current leadership
	epoch  int32                // the leader epoch remote was loaded in
	// start and end are the remote bounds a follower keeps instead of the
	// list (-1 when none); unused while loaded.
	start, end int64
	// lastSweep is when the orphan sweep last ran; only the tier loop
	// touches it.
	lastSweep time.Time
}

func (t *partitionTier) snapshot() ([]tier.RemoteSegment, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.remote, t.loaded
}

// remoteBounds returns the first remote offset and the remote end (-1, -1 when none).
func (t *partitionTier) remoteBounds() (start, end int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.loaded {
		if t.remote == nil && t.end > 0 {
			return t.start, t.end
		}
	}
	if len(t.remote) == 0 {
		return -1, -1
	}
	return t.remote[0].Base, t.remote[len(t.remote)-1].Next
}

// tierLoop runs tiered storage for this broker's partitions every
// TierInterval: as leader, copy closed segments to the object store and apply
// whole-log retention to remote segments; as any replica, trim local
// segments that are in the object store by local retention.
func (b *Broker) tierLoop(ctx context.Context) {
	every(ctx, b.opts.TierInterval, func() {
		for _, p := range b.parts.all() {
			if !p.config().RemoteStorage {
				continue
			}
			// Each partition's pass is bounded, so a stalled object store
			// holds up the others for at most this long; local retention
			// (which needs no object store) runs whatever happened.
			pctx, cancel := context.WithTimeout(ctx, tierPassTimeout(p.log.ClosedSegments()))
			err := b.tierPartition(pctx, p)
			cancel()
			if err != nil && ctx.Err() == nil {
				b.log.Warn("tiering", "partition", p.String(), "err", err)
			}
			if err := b.localRetention(p); err != nil {
				b.log.Warn("local retention", "partition", p.String(), "err", err)
			}
		}
	})
}

func (b *Broker) tierPartition(ctx context.Context, p *Partition) error {
	epoch, _, leader := p.leaderState()
	if leader {
		if err := b.loadRemote(ctx, p, epoch); err != nil {
			return err
		}
		up := &tier.Uploader{
			Bucket: b.opts.Bucket, Log: p.log, Logger: b.log.With("partition", p.String()),
			KeyPrefix: b.keyPrefix(p),
			Meta:      remoteMeta{c: b.opts.Coord, topic: p.Topic, p: p, statePV: p.leaderState},
		}
		for ctx.Err() == nil {
			segs, _ := p.tier.snapshot()
			rec, err := up.UploadNext(ctx, epoch, segs)
			if err != nil {
				p.tier.mu.Lock()
				p.tier.loaded = false // re-read: someone else may have committed
				p.tier.mu.Unlock()
				return err
			}
			if rec == nil {
				break
			}
			p.tier.mu.Lock()
			p.tier.remote = append(p.tier.remote, *rec)
			p.tier.mu.Unlock()
		}
		if err := b.remoteRetention(ctx, p); err != nil {
			return err
		}
		if time.Since(p.tier.lastSweep) > b.opts.OrphanGrace/2 {
			segs, _ := p.tier.snapshot()
			n, err := b.sweepOrphans(ctx, p, segs)
			if err != nil {
				return err
			}
			p.tier.lastSweep = time.Now()
			if n > 0 {
				b.log.Info("deleted orphaned objects", "partition", p.String(), "objects", n)
			}
		}
	} else {
		// A follower needs only the bounds: the first record's name and the
		// last record's end.
		start, end, err := remoteBoundsOf(ctx, b.opts.Coord, p.Topic, p.ID)
		if err != nil {
			return err
		}
		p.tier.mu.Lock()
		p.tier.remote, p.tier.loaded, p.tier.epoch = nil, false, -1
		p.tier.start, p.tier.end = start, end
		p.tier.mu.Unlock()
	}
	return nil
}

// tierPassTimeout bounds one partition's uploads, retention and sweep in one
// pass of the tier loop: two minutes, or as long as its largest closed
// segment takes at tierMinUploadRate, so that a segment larger than a slow
// link moves in two minutes still makes it. An upload cut off by it is
// retried (under a new key) in the next pass, and its objects become
// orphans.
func tierPassTimeout(closed []commitlog.SegmentInfo) time.Duration {
	var largest int64
	for _, s := range closed {
		largest = max(largest, s.Size)
	}
	return max(2*time.Minute, time.Duration(largest/tierMinUploadRate+1)*time.Second)
}

// tierMinUploadRate (bytes/s) is the slowest object-store link a pass is
// sized for: a 1 GiB segment gets about 17 minutes.
const tierMinUploadRate = 1 << 20

// loadRemote reads the records once per leadership.
func (b *Broker) loadRemote(ctx context.Context, p *Partition, epoch int32) error {
	p.tier.mu.Lock()
	ok := p.tier.loaded && p.tier.epoch == epoch
	p.tier.mu.Unlock()
	if ok {
		return nil
	}
	segs, err := listRemote(ctx, b.opts.Coord, p.Topic, p.ID)
	if err != nil {
		return err
	}
	p.tier.mu.Lock()
	p.tier.remote, p.tier.loaded, p.tier.epoch = segs, true, epoch
	p.tier.mu.Unlock()
	return nil
}

func (b *Broker) keyPrefix(p *Partition) string {
	return fmt.Sprintf("%s%s-%s/%d/", b.opts.TierPrefix, p.Topic, p.topicID, p.ID)
}

// localRetention deletes local segments that are in the object store and
// that local.retention.ms/.bytes no longer keep.
func (b *Broker) localRetention(p *Partition) error {
	_, remoteEnd := p.tier.remoteBounds()
	if remoteEnd < 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	cfg := p.config()
	segs := p.log.ClosedSegments()
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	cut := int64(-1)
	for _, s := range segs {
		if s.Next > remoteEnd {
			break
		}
		byAge := cfg.LocalRetention >= 0 && s.MaxTimestamp >= 0 && now-s.MaxTimestamp > cfg.LocalRetention.Milliseconds()
		bySize := cfg.LocalRetentionBytes >= 0 && total > cfg.LocalRetentionBytes
		if !byAge && !bySize {
			break
		}
		total -= s.Size
		cut = s.Next
	}
	if cut < 0 {
		return nil
	}
	n, err := p.log.DeleteSegmentsBelow(cut)
	if n > 0 {
		b.log.Info("local retention deleted tiered segments", "partition", p.String(), "segments", n, "local_start", cut)
	}
	return err
}

// remoteRetention applies retention.ms/.bytes to the whole log, oldest remote
// segments first: the record goes first, then the objects (a crash between
// leaves orphans, which the orphan sweep removes).
func (b *Broker) remoteRetention(ctx context.Context, p *Partition) error {
	cfg := p.config()
	if cfg.Retention < 0 && cfg.RetentionBytes < 0 {
		return nil
	}
	meta := remoteMeta{c: b.opts.Coord, topic: p.Topic, p: p, statePV: p.leaderState}
	now := time.Now().UnixMilli()
	for {
		segs, _ := p.tier.snapshot()
		if len(segs) == 0 {
			return nil
		}
		oldest := segs[0]
		var total int64
		for _, s := range segs {
			total += s.Size
		}
		// Local bytes not in the object store yet, the active segment
		// included, as Kafka counts a log's size.
		total += p.log.BytesAbove(segs[len(segs)-1].Next)
		byAge := cfg.Retention >= 0 && oldest.MaxTimestamp >= 0 && now-oldest.MaxTimestamp > cfg.Retention.Milliseconds()
		bySize := cfg.RetentionBytes >= 0 && total-oldest.Size >= cfg.RetentionBytes
		if !byAge && !bySize {
			return nil
		}
		if err := meta.Remove(ctx, oldest); err != nil {
			return err
		}
		p.tier.mu.Lock()
		p.tier.remote = p.tier.remote[1:]
		p.tier.mu.Unlock()
		if b.cold != nil {
			b.cold.Forget(oldest)
		}
		for _, k := range []string{oldest.LogKey(), oldest.IndexKey()} {
			if err := b.opts.Bucket.Delete(ctx, k); err != nil {
				b.log.Warn("deleting a retired remote object failed; the orphan sweep will retry", "key", k, "err", err)
			}
		}
		// Local copies below the new start go too.
		if _, err := p.log.DeleteSegmentsBelow(oldest.Next); err != nil {
			return err
		}
		b.log.Info("retention deleted a remote segment", "partition", p.String(), "base", oldest.Base, "next", oldest.Next)
	}
}
