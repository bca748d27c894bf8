package broker

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/recordbatch"
	"github.com/sluice-io/sluice/tier"
)

// offsetForTimestamp is ListOffsets by time over the whole log: the first
// record at or after ts, in the object store when the log there reaches
// that time, else on local disk. ok is false when every record is older.
func (b *Broker) offsetForTimestamp(ctx context.Context, p *Partition, ts int64) (int64, bool, error) {
	if seg, ok := b.firstRemoteAtOrAfter(ctx, p, ts); ok {
		if off, found, err := b.remoteOffsetForTimestamp(ctx, seg, ts); err != nil || found {
			return off, found, err
		}
	}
	return p.log.OffsetForTimestamp(ts)
}

// firstRemoteAtOrAfter is the first remote segment below the local log
// start whose newest record is at or after ts.
func (b *Broker) firstRemoteAtOrAfter(ctx context.Context, p *Partition, ts int64) (tier.RemoteSegment, bool) {
	if b.cold == nil || !p.config().RemoteStorage {
		return tier.RemoteSegment{}, false
	}
	epoch, _, leader := p.leaderState()
	if !leader || b.loadRemote(ctx, p, epoch) != nil {
		return tier.RemoteSegment{}, false
	}
	segs, _ := p.tier.snapshot()
	localStart := p.log.Offsets().LogStart
	for _, s := range segs {
		if s.Base >= localStart {
			break // from here the local log has it, with its time index
		}
		if s.MaxTimestamp >= ts {
			return s, true
		}
	}
	return tier.RemoteSegment{}, false
}

// remoteOffsetForTimestamp scans a remote segment's batches (through the
// cold reader's cache) for the first record at or after ts.
func (b *Broker) remoteOffsetForTimestamp(ctx context.Context, seg tier.RemoteSegment, ts int64) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for off := seg.Base; off < seg.Next; {
		data, next, err := b.cold.Read(ctx, seg, off, 1<<20)
		if err != nil {
			return 0, false, err
		}
		found, at := false, int64(0)
		_, err = recordbatch.Scan(data, false, func(h recordbatch.Header, batch []byte) error {
			if found || h.MaxTimestamp < ts {
				return nil
			}
			_, recs, err := recordbatch.Decode(batch)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Offset >= off && r.Timestamp >= ts {
					found, at = true, r.Offset
					return nil
				}
			}
			return nil
		})
		if err != nil || found {
			return at, found, err
		}
		if next <= off {
			break
		}
		off = next
	}
	return 0, false, nil
}
