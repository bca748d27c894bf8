package sink

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// committer sends the store's next offsets to the group, for lag only: the
// store is the source of truth, so a lost or refused commit costs nothing
// but a stale lag figure. Writers add offsets without waiting; the run
// goroutine sends the latest per partition, and reads the lag gauges from
// the group's description every LagInterval.
type committer struct {
	gc   *client.GroupConsumer
	c    *client.Client
	opts Options
	log  *slog.Logger
	wake chan struct{} // capacity 1: pending has something

	// mu guards pending: per partition, the latest next offset and the
	// member epoch of the poll its records came from.
	mu      sync.Mutex
	pending map[api.TopicPartition]pendingCommit
}

type pendingCommit struct {
	offset int64
	epoch  int32
}

func newCommitter(gc *client.GroupConsumer, c *client.Client, opts Options, log *slog.Logger) *committer {
	return &committer{gc: gc, c: c, opts: opts, log: log, wake: make(chan struct{}, 1), pending: map[api.TopicPartition]pendingCommit{}}
}

// add queues a commit; it never blocks.
func (c *committer) add(tp api.TopicPartition, offset int64, epoch int32) {
	c.mu.Lock()
	c.pending[tp] = pendingCommit{offset: offset, epoch: epoch}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run sends commits until ctx ends, then sends what is pending once more,
// within a second.
func (c *committer) run(ctx context.Context) {
	var lagC <-chan time.Time
	if c.opts.LagInterval > 0 {
		t := time.NewTicker(c.opts.LagInterval)
		defer t.Stop()
		lagC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.flush(fctx)
			cancel()
			return
		case <-c.wake:
			c.flush(ctx)
		case <-lagC:
			c.readLag(ctx)
		}
	}
}

// flush commits the pending offsets, one request per member epoch.
func (c *committer) flush(ctx context.Context) {
	c.mu.Lock()
	pending := c.pending
	c.pending = map[api.TopicPartition]pendingCommit{}
	c.mu.Unlock()
	byEpoch := map[int32][]api.PartitionOffset{}
	for tp, p := range pending {
		byEpoch[p.epoch] = append(byEpoch[p.epoch], api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: p.offset})
	}
	for epoch, offs := range byEpoch {
		if _, err := c.gc.CommitOffsets(ctx, epoch, offs); err != nil {
			// FENCED_MEMBER_EPOCH: the partition moved; its new owner
			// commits from the store's offsets. Anything else: the next
			// commit of the partition carries a later offset anyway.
			if !errors.Is(err, context.Canceled) {
				c.log.Debug("sink: group commit failed", "err", err)
			}
			continue
		}
		failpoint(StepAfterCommit)
	}
}

// readLag sets the lag gauges of the partitions this member owns from the
// group's description.
func (c *committer) readLag(ctx context.Context) {
	d, err := c.c.DescribeGroup(ctx, c.opts.Group)
	if err != nil {
		return
	}
	me := c.gc.MemberID()
	for _, p := range d.Partitions {
		if p.Owner == me && p.Lag >= 0 {
			c.opts.Metrics.lag.WithLabelValues(p.Topic, partLabel(p.Partition)).Set(float64(p.Lag))
		}
	}
}
