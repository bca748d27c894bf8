package broker

import (
	"context"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/offsets"
	"github.com/sluice-io/sluice/recordbatch"
)

// lagRow is one group partition's lag as last measured.
type lagRow struct {
	group, topic string
	partition    int32
	committed    int64
	lag          int64 // records
	lagMs        int64 // -1 when unknown
}

// lagSnapshot is what the collector reports: the groups this broker
// coordinates, as of the last measurement.
type lagSnapshot struct {
	rows    []lagRow
	members map[string]int
}

// groupLagState holds the latest snapshot; the lag loop writes it, scrapes
// read it.
type groupLagState struct {
	snap atomic.Pointer[lagSnapshot]
}

// groupLagLoop measures lag every GroupLagInterval (each measurement asks
// every committed partition's leader for its HW).
func (b *Broker) groupLagLoop(ctx context.Context) {
	every(ctx, b.opts.GroupLagInterval, func() { b.measureGroupLag(ctx) })
}

// measureGroupLag reads committed offsets from the coordinators this broker
// runs and asks each partition's leader for its HW and, where a group lags,
// the timestamp of its first unconsumed record.
func (b *Broker) measureGroupLag(ctx context.Context) {
	snap := &lagSnapshot{members: map[string]int{}}
	for _, p := range b.parts.topicPartitions(api.OffsetsTopic) {
		if _, _, leading := p.leaderState(); !leading {
			continue
		}
		_ = b.groups.coordinator(p).read(ctx, func(st *offsets.State) error {
			for _, id := range st.Groups() {
				g := st.Group(id)
				snap.members[id] = len(g.Members)
				for tp, ov := range g.Offsets {
					snap.rows = append(snap.rows, lagRow{group: id, topic: tp.Topic, partition: tp.Partition, committed: ov.Offset, lagMs: -1})
				}
			}
			return nil
		})
	}
	md := b.view.Current()
	for i := range snap.rows {
		r := &snap.rows[i]
		addr, _, err := md.Leader(r.topic, r.partition)
		if err != nil {
			r.lag = -1
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := b.peers.ListOffsets(cctx, addr, r.topic, r.partition, "latest")
		if err == nil {
			r.lag = max(0, res.HighWatermark-r.committed)
			r.lagMs = 0
			if r.lag > 0 {
				r.lagMs = -1
				if ts, ok := b.recordTimestamp(cctx, addr, r.topic, r.partition, r.committed); ok {
					r.lagMs = max(0, time.Now().UnixMilli()-ts)
				}
			}
		} else {
			r.lag = -1
		}
		cancel()
	}
	b.lag.snap.Store(snap)
}

// recordTimestamp reads the timestamp of the first record at or after offset
// from the partition's leader.
func (b *Broker) recordTimestamp(ctx context.Context, addr, topic string, partition int32, offset int64) (int64, bool) {
	fr, err := b.peers.Fetch(ctx, addr, topic, partition, brokerapi.FetchParams{Offset: offset, MaxBytes: 64 << 10, LeaderEpoch: -1})
	if err != nil {
		return 0, false
	}
	defer fr.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(fr.Body, min(fr.Size, 64<<20)))
	if err != nil {
		return 0, false
	}
	ts, found := int64(0), false
	_, _ = recordbatch.Scan(raw, false, func(h recordbatch.Header, batch []byte) error {
		if found {
			return nil
		}
		_, recs, err := recordbatch.Decode(batch)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Offset >= offset {
				ts, found = r.Timestamp, true
				return nil
			}
		}
		return nil
	})
	return ts, found
}

var (
	descGroupLag = prometheus.NewDesc("sluice_group_lag_records",
		"Records between a group's committed offset and the partition's high watermark (coordinator only; -1 when the leader did not answer).",
		[]string{"group", "topic", "partition"}, nil)
	descGroupLagMs = prometheus.NewDesc("sluice_group_lag_ms",
		"Milliseconds since the first record the group has not committed was written; 0 without lag, -1 unknown.",
		[]string{"group", "topic", "partition"}, nil)
	descGroupCommitted = prometheus.NewDesc("sluice_group_committed_offset",
		"A group's committed offset (the next record it will read).",
		[]string{"group", "topic", "partition"}, nil)
	descGroupMembers = prometheus.NewDesc("sluice_group_members",
		"Members of a group this broker coordinates.", []string{"group"}, nil)
)

type groupLagCollector struct{ b *Broker }

func (c groupLagCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGroupLag, descGroupLagMs, descGroupCommitted, descGroupMembers} {
		ch <- d
	}
}

func (c groupLagCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.b.lag.snap.Load()
	if snap == nil {
		return
	}
	for g, n := range snap.members {
		ch <- prometheus.MustNewConstMetric(descGroupMembers, prometheus.GaugeValue, float64(n), g)
	}
	for _, r := range snap.rows {
		l := []string{r.group, r.topic, strconv.Itoa(int(r.partition))}
		ch <- prometheus.MustNewConstMetric(descGroupCommitted, prometheus.GaugeValue, float64(r.committed), l...)
		ch <- prometheus.MustNewConstMetric(descGroupLag, prometheus.GaugeValue, float64(r.lag), l...)
		ch <- prometheus.MustNewConstMetric(descGroupLagMs, prometheus.GaugeValue, float64(r.lagMs), l...)
	}
}
