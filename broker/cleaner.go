package broker

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/commitlog"
)

// cleanerLoop compacts the local replicas of compacted topics
// (cleanup.policy compact or compact,delete) every CleanerInterval. Every
// replica, leader or follower, cleans its own log, as in Kafka: the result
// depends only on the committed records, so replicas converge.
func (b *Broker) cleanerLoop(ctx context.Context) {
	if b.opts.CleanerInterval <= 0 {
		return // turned off
	}
	every(ctx, b.opts.CleanerInterval, func() { b.cleanLogs(ctx) })
}

// cleanLogs runs one clean on every local partition of a compacted topic
// whose dirty ratio (or a due tombstone) calls for it. Partitions are
// cleaned one after another; a failure is logged and the next goes on.
func (b *Broker) cleanLogs(ctx context.Context) {
	for _, p := range b.parts.all() {
		if ctx.Err() != nil {
			return
		}
		cfg := p.config()
		if !cfg.Compact || p.log.Err() != nil {
			continue // not compacted, or read-only after a disk error (health reports it)
		}
		start := time.Now()
		st, err := p.log.Clean(ctx, start, commitlog.CleanOptions{
			MinCleanableDirtyRatio: cfg.MinCleanableDirtyRatio,
			DeleteRetention:        cfg.DeleteRetention,
			MinCompactionLag:       cfg.MinCompactionLag,
		})
		switch {
		case errors.Is(err, commitlog.ErrCleanRaced):
			b.log.Debug("clean abandoned: segments changed meanwhile", "partition", p.String())
		case errors.Is(err, commitlog.ErrClosed), errors.Is(err, context.Canceled):
			// The partition was deleted or the broker is closing.
		case err != nil:
			b.log.Error("log clean failed", "partition", p.String(), "err", err)
		case st.Cleaned:
			b.log.Info("log cleaned", "partition", p.String(), "dirty_ratio", st.DirtyRatio,
				"segments", st.Segments, "records", st.Records, "removed", st.Removed,
				"tombstones_removed", st.Tombstones, "bytes_before", st.BytesIn, "bytes_after", st.BytesOut,
				"cleaned_to", st.CleanedTo, "took", time.Since(start))
		}
	}
}
