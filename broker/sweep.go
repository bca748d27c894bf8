package broker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-io/sluice/tier"
)

// sweepTopic deletes every object of a deleted topic, in the background
// (owned by the broker's WaitGroup, bounded to ten minutes).
func (b *Broker) sweepTopic(topic, topicID string) {
	if b.opts.Bucket == nil {
		return
	}
	prefix := fmt.Sprintf("%s%s-%s/", b.opts.TierPrefix, topic, topicID)
	b.goFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var keys []string
		err := b.opts.Bucket.List(ctx, prefix, func(o tier.ObjectInfo) error {
			keys = append(keys, o.Key)
			return nil
		})
		for _, k := range keys {
			if derr := b.opts.Bucket.Delete(ctx, k); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			b.log.Warn("deleting a deleted topic's objects", "topic", topic, "err", err)
		}
	})
}

// sweepOrphans deletes objects of a partition that no record names and that
// are older than the grace period: uploads whose commit never happened
// (the uploader crashed or lost its leadership) and objects whose record
// retention removed before it could delete them.
func (b *Broker) sweepOrphans(ctx context.Context, p *Partition, records []tier.RemoteSegment) (int, error) {
	named := map[string]bool{}
	for _, r := range records {
		named[r.LogKey()], named[r.IndexKey()] = true, true
	}
	var doomed []string
	cutoff := time.Now().Add(-b.opts.OrphanGrace)
	err := b.opts.Bucket.List(ctx, b.keyPrefix(p), func(o tier.ObjectInfo) error {
		if !named[o.Key] && o.LastModified.Before(cutoff) && strings.HasPrefix(o.Key, b.keyPrefix(p)) {
			doomed = append(doomed, o.Key)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range doomed {
		if err := b.opts.Bucket.Delete(ctx, k); err != nil {
			return 0, err
		}
	}
	return len(doomed), nil
}
