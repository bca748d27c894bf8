package main

import (
	"context"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// consumeGroup is `sluice consume TOPIC -g GROUP`: a group member that prints
// each record and commits after printing (at least once). With -e it stops at
// the first poll that finds nothing new in any of its partitions; it leaves
// the group on exit, so its partitions move at once.
func consumeGroup(ctx context.Context, cl *client.Client, p *printer, o consumeOptions) error {
	if o.partitions != nil {
		return usagef("-p and -g exclude each other: the group assigns the partitions")
	}
	opts := client.GroupConsumerOptions{Topics: strings.Split(o.topic, ","), InstanceID: o.instanceID, MaxWait: fetchWait, Rejoin: true}
	if o.exitAtEnd {
		opts.MaxWait = endWait
	}
	if o.startSet {
		switch o.start.kind {
		case startBeginning:
			opts.AutoOffsetReset = api.ResetEarliest
		case startEnd:
			opts.AutoOffsetReset = api.ResetLatest
		default:
			return usagef("with -g, -o is beginning or end (where a partition without a committed offset starts); use 'sluice groups reset' to move the group")
		}
	}
	gc := cl.NewGroupConsumer(o.group, opts)
	if err := gc.Join(ctx); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gc.Close(cctx)
	}()
	for ctx.Err() == nil {
		b, err := gc.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i := range b.Records {
			s, err := shownFromGroup(&b.Records[i])
			if err != nil {
				return err
			}
			full, err := p.print(&s)
			if err != nil {
				return err
			}
			if full {
				if err := p.w.Flush(); err != nil {
					return err
				}
				// Commit only what was printed.
				return commitPrinted(ctx, gc, b, b.Records[:i+1])
			}
		}
		if err := p.w.Flush(); err != nil {
			return err
		}
		if len(b.Records) > 0 {
			if _, err := gc.Commit(ctx, b.Cursor); err != nil {
				return err
			}
		} else if o.exitAtEnd {
			return nil
		}
	}
	return nil
}

// commitPrinted commits the offsets after the printed records of a poll.
func commitPrinted(ctx context.Context, gc *client.GroupConsumer, b client.GroupBatch, printed []api.GroupRecord) error {
	last := map[api.TopicPartition]int64{}
	for _, r := range printed {
		last[api.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	}
	offs := make([]api.PartitionOffset, 0, len(last))
	for tp, o := range last {
		offs = append(offs, api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: o})
	}
	_, err := gc.CommitOffsets(ctx, b.MemberEpoch, offs)
	return err
}
