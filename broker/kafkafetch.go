package broker

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/quota"
)

// Fetch reads a Kafka consumer's fetch through FetchPartitions, as the raw
// /fetch route does (cold reads included), and charges what it served to
// the consumer byte-rate quota of the client: the connection's SASL
// principal (the anonymous one without SASL, as an HTTP consumer without
// authentication is) with the request's client id. A
// fetch while that quota is in debt reads nothing and answers the wait
// (Kafka's throttle_time_ms), as Kafka answers a throttled fetch.
func (k kafkaBackend) Fetch(ctx context.Context, req kafka.FetchRequest) (kafka.FetchResult, error) {
	b := k.b
	clientID := req.ClientID
	if !quota.ValidClientID(clientID) {
		clientID = ""
	}
	principal := auth.PrincipalFrom(ctx)
	if d := b.quotas.enforcer.Admit(principal, clientID, quota.Fetch, 0); d > 0 {
		return b.kafkaThrottled(req, d), nil
	}
	spec := FetchSpec{MaxWait: req.MaxWait, MinBytes: req.MinBytes, MaxBytes: req.MaxBytes, Cold: true,
		Partitions: make([]FetchPartitionSpec, len(req.Partitions))}
	for i, p := range req.Partitions {
		spec.Partitions[i] = FetchPartitionSpec{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.CurrentLeaderEpoch, MaxBytes: p.MaxBytes}
	}
	fetched := b.FetchPartitions(ctx, spec)
	out := kafka.FetchResult{Partitions: make([]kafka.FetchedPartition, len(fetched))}
	var served int64
	for i := range fetched {
		f := &fetched[i]
		o := &out.Partitions[i]
		o.Err, o.HighWatermark, o.LogStartOffset = f.Err, f.HighWatermark, f.LogStart
		if f.Err != nil {
			f.Close()
			continue
		}
		if p, err := b.parts.get(b.view.Current(), req.Partitions[i].Topic, req.Partitions[i].Partition); err == nil {
			o.LogStartOffset = p.positions().LogStartOffset // the remote tier included
		}
		if f.Size == 0 {
			f.Close()
			continue
		}
		served += f.Size
		b.traffic.fetched(req.Partitions[i].Offset, f.NextOffset, f.Size)
		o.Records = &fetchedRecords{f: f}
	}
	if served > 0 {
		b.quotas.enforcer.Charge(principal, clientID, quota.Fetch, served)
	}
	out.Throttle = b.quotas.enforcer.Debt(principal, clientID, quota.Fetch)
	return out, nil
}

// kafkaThrottled answers a fetch refused by the quota: every partition
// with its positions and no records, and the wait.
func (b *Broker) kafkaThrottled(req kafka.FetchRequest, d time.Duration) kafka.FetchResult {
	out := kafka.FetchResult{Throttle: d, Partitions: make([]kafka.FetchedPartition, len(req.Partitions))}
	md := b.view.Current()
	for i, rp := range req.Partitions {
		p, err := b.parts.get(md, rp.Topic, rp.Partition)
		if err == nil {
			err = p.checkLeader(rp.CurrentLeaderEpoch)
		}
		if err != nil {
			out.Partitions[i].Err = err
			continue
		}
		pos := p.positions()
		out.Partitions[i].HighWatermark, out.Partitions[i].LogStartOffset = pos.HighWatermark, pos.LogStartOffset
	}
	return out
}

// fetchedRecords are one partition's read, as kafka.Records.
type fetchedRecords struct{ f *FetchedPartition }

func (r *fetchedRecords) Len() int64 { return r.f.Size }

func (r *fetchedRecords) FromFile() bool {
	_, ok := r.f.Local.File.(*os.File)
	return r.f.Cold == nil && ok
}

// WriteTo writes the records as writeFetched does for the raw /fetch
// route: from the segment file with io.Copy over an io.LimitReader of the
// *os.File (sendfile to a *net.TCPConn), or the cached chunks as they are.
func (r *fetchedRecords) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := writeFetched(cw, r.f)
	return cw.n, err
}

func (r *fetchedRecords) Close() { r.f.Close() }

// countingWriter counts what passes through it, and forwards ReadFrom so
// that a copy into a *net.TCPConn still uses sendfile.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	var err error
	if rf, ok := c.w.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(struct{ io.Writer }{c.w}, r)
	}
	c.n += n
	return n, err
}

// EpochEnd answers OffsetForLeaderEpoch on the leader, as the internal
// epoch-end route answers a follower, with Kafka's rule for an epoch older
// than every one the log knows (its start was deleted or tiered away): that
// epoch and where the oldest known one starts, not -1/-1, which a consumer
// would take as records lost.
func (k kafkaBackend) EpochEnd(_ context.Context, topic string, partition int32, currentLeaderEpoch, epoch int32) (kafka.EpochEndResult, error) {
	b := k.b
	p, err := b.parts.get(b.view.Current(), topic, partition)
	if err != nil {
		return kafka.EpochEndResult{}, err
	}
	if err := p.checkLeader(currentLeaderEpoch); err != nil {
		return kafka.EpochEndResult{}, err
	}
	e, end := p.log.EndOffsetForEpoch(epoch)
	e, end = olderEpochEnd(p.log.Epochs(), epoch, e, end)
	return kafka.EpochEndResult{LeaderEpoch: e, EndOffset: end}, nil
}

// olderEpochEnd applies Kafka's answer for an epoch older than every one
// in lineage to the log's own answer (e, end) for asked: that epoch, ending
// where the oldest known one starts. Any other answer is kept.
func olderEpochEnd(lineage []commitlog.EpochEntry, asked, e int32, end int64) (int32, int64) {
	if e < 0 && asked >= 0 && len(lineage) > 0 && asked < lineage[0].Epoch {
		return asked, lineage[0].StartOffset
	}
	return e, end
}
