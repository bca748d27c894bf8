package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/tier"
)

// Remote-segment records live in the coordinator, beside the partition state
// they depend on: /brokers/topics/{t}/partitions/{p}/remote/{%020d base}.
// That is where the cluster already keeps its strongly consistent state, and
// it gives the commit what it needs: a record is created in one Multi with a
// check of the partition-state version the uploading leader holds, so a
// deposed leader cannot commit, and two uploads of the same base offset
// cannot both be recorded (the node name is the base offset). Records are
// small (a few hundred bytes) and written once per segment.
type remoteMeta struct {
	c       coord.Coordinator
	topic   string
	p       *Partition
	statePV func() (int32, int32, bool) // the leader epoch and state version this broker leads with
}

func remotePath(topic string, p int32) string {
	return cluster.PartitionPath(topic, p) + "/remote"
}

func (m remoteMeta) List(ctx context.Context) ([]tier.RemoteSegment, error) {
	return listRemote(ctx, m.c, m.topic, m.p.ID)
}

func listRemote(ctx context.Context, c coord.Coordinator, topic string, p int32) ([]tier.RemoteSegment, error) {
	names, _, err := c.Children(ctx, remotePath(topic, p))
	if errors.Is(err, coord.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]tier.RemoteSegment, 0, len(names))
	for _, n := range names {
		data, _, err := c.Get(ctx, remotePath(topic, p)+"/"+n)
		if errors.Is(err, coord.ErrNoNode) {
			continue // removed by retention meanwhile
		}
		if err != nil {
			return nil, err
		}
		var rec tier.RemoteSegment
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("remote record %s: %w", n, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// remoteBoundsOf reads only the first record's name and the last record: the
// first remote offset and the remote end (-1, -1 when there are none).
func remoteBoundsOf(ctx context.Context, c coord.Coordinator, topic string, p int32) (int64, int64, error) {
	names, _, err := c.Children(ctx, remotePath(topic, p))
	if errors.Is(err, coord.ErrNoNode) || (err == nil && len(names) == 0) {
		return -1, -1, nil
	}
	if err != nil {
		return 0, 0, err
	}
	sort.Strings(names)
	start, err := strconv.ParseInt(names[0], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("remote record name %q: %w", names[0], err)
	}
	data, _, err := c.Get(ctx, remotePath(topic, p)+"/"+names[len(names)-1])
	if err != nil {
		return 0, 0, err
	}
	var last tier.RemoteSegment
	if err := json.Unmarshal(data, &last); err != nil {
		return 0, 0, err
	}
	return start, last.Next, nil
}

func (m remoteMeta) Commit(ctx context.Context, seg tier.RemoteSegment) error {
	if err := coord.EnsurePath(ctx, m.c, remotePath(m.topic, m.p.ID)); err != nil {
		return err
	}
	data, _ := json.Marshal(seg)
	for attempt := 0; attempt < 5; attempt++ {
		epoch, version, ok := m.statePV()
		if !ok || epoch != seg.LeaderEpoch {
			return tier.ErrFenced
		}
		_, err := m.c.Multi(ctx,
			coord.CheckOp(cluster.PartitionStatePath(m.topic, m.p.ID), version),
			coord.CreateOp(fmt.Sprintf("%s/%020d", remotePath(m.topic, m.p.ID), seg.Base), data, 0))
		var me *coord.MultiError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &me) && me.Index == 1 && errors.Is(err, coord.ErrNodeExists):
			return tier.ErrSegmentExists
		case errors.Is(err, coord.ErrBadVersion):
			// The state moved (an ISR change, or a new leader): look again.
			if err := m.p.waitStateNewerThan(ctx, version); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return tier.ErrFenced
}

func (m remoteMeta) Remove(ctx context.Context, seg tier.RemoteSegment) error {
	err := m.c.Delete(ctx, fmt.Sprintf("%s/%020d", remotePath(m.topic, m.p.ID), seg.Base), coord.AnyVersion)
	if errors.Is(err, coord.ErrNoNode) {
		return nil
	}
	return err
}
