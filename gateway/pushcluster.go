package gateway

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/push"
	"github.com/sluice-io/sluice/recordbatch"
)

// pushCluster is what the gateway's pushers reach the cluster through
// (push.Cluster): the same group, fetch and produce paths the public
// routes use, called as the gateway itself.
type pushCluster struct{ g *Gateway }

var _ push.Cluster = pushCluster{}

// asGateway makes a call the gateway's own: pushers act for no client.
func asGateway(ctx context.Context) context.Context {
	return auth.WithPrincipal(ctx, brokerapi.PrincipalGateway)
}

func (c pushCluster) Join(ctx context.Context, group string, req api.JoinGroupRequest) (api.JoinGroupResponse, error) {
	ctx, cancel := context.WithTimeout(asGateway(ctx), groupBudget)
	defer cancel()
	return c.g.join(ctx, group, req, api.MemberKindPush)
}

func (c pushCluster) Heartbeat(ctx context.Context, group, member string) (api.HeartbeatResponse, error) {
	ctx, cancel := context.WithTimeout(asGateway(ctx), groupBudget)
	defer cancel()
	return onCoordinator(c.g, ctx, group, true, func(addr string) (api.HeartbeatResponse, error) {
		return c.g.brokers.Heartbeat(ctx, addr, group, member)
	})
}

func (c pushCluster) Starts(ctx context.Context, group, member string) ([]push.Start, error) {
	ctx, cancel := context.WithTimeout(asGateway(ctx), groupBudget)
	defer cancel()
	plan, err := onCoordinator(c.g, ctx, group, true, func(addr string) (brokerapi.GroupPollPlan, error) {
		return c.g.brokers.StartPoll(ctx, addr, group, member, "")
	})
	if err != nil {
		return nil, err
	}
	out := make([]push.Start, 0, len(plan.Starts))
	for _, s := range plan.Starts {
		st := push.Start{TopicPartition: api.TopicPartition{Topic: s.Topic, Partition: s.Partition}, Offset: s.Offset, Metadata: s.Metadata}
		if st.Offset < 0 {
			off, err := c.g.resolveOffset(ctx, s.Topic, s.Partition, api.ResetEarliest)
			if err != nil {
				return nil, err
			}
			st.Offset = off
		}
		out = append(out, st)
	}
	return out, nil
}

func (c pushCluster) Commit(ctx context.Context, group string, req api.CommitRequest) error {
	ctx, cancel := context.WithTimeout(asGateway(ctx), groupBudget)
	defer cancel()
	_, err := c.g.commit(ctx, group, req)
	return err
}

func (c pushCluster) Leave(ctx context.Context, group, member string) error {
	return c.g.leave(asGateway(ctx), group, member)
}

func (c pushCluster) Fetch(ctx context.Context, tp api.TopicPartition, offset int64, maxBytes int64, wait time.Duration) ([]recordbatch.Record, int64, error) {
	ctx, cancel := context.WithTimeout(asGateway(ctx), wait+fetchRetryBudget)
	defer cancel()
	fp := fetchParams{topic: tp.Topic, partition: tp.Partition, maxRecords: 1000, maxBytes: maxBytes, wait: wait}
	raw, fr, err := c.g.fetchRaw(ctx, fp, offset)
	if err != nil {
		return nil, offset, err
	}
	var recs []recordbatch.Record
	next, err := decodeFetched(fp, offset, raw, fr.NextOffset, func(r *recordbatch.Record) { recs = append(recs, *r) })
	if fr.Throttle > 0 && err == nil && len(recs) == 0 {
		// Over the gateway's fetch quota: wait it off before reading again.
		t := time.NewTimer(fr.Throttle)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return recs, next, err
}

func (c pushCluster) Resolve(ctx context.Context, tp api.TopicPartition, spec string) (int64, error) {
	ctx, cancel := context.WithTimeout(asGateway(ctx), fetchRetryBudget)
	defer cancel()
	if ts, ok := strings.CutPrefix(spec, "timestamp:"); ok {
		res, err := c.g.listOffsets(ctx, tp.Topic, tp.Partition, ts)
		if err == nil && res.Offset < 0 {
			// No record at or after the time: start at the end.
			return c.g.resolveOffset(ctx, tp.Topic, tp.Partition, api.ResetLatest)
		}
		return res.Offset, err
	}
	return c.g.resolveOffset(ctx, tp.Topic, tp.Partition, spec)
}

// Produce writes one record acks=all: keyed records go where the key
// hashes, keyless ones to a random partition.
func (c pushCluster) Produce(ctx context.Context, topic string, rec recordbatch.Record) error {
	ctx = asGateway(ctx)
	tm, cfg, err := c.g.produceTopic(topic)
	if err != nil {
		return err
	}
	n := tm.Partitions()
	p := int32(rand.IntN(n))
	if rec.Key != nil {
		p = int32(api.KeyPartition(rec.Key, n))
	}
	batch, err := recordbatch.Encode(nil, []recordbatch.Record{rec}, recordbatch.Options{Compression: cfg.Compression})
	if err != nil {
		return err
	}
	_, err = c.g.produceTo(ctx, topic, p, "all", batch, retriableBeforeWrite)
	return err
}

func (c pushCluster) Render(rec *recordbatch.Record) api.FetchedRecord { return toFetched(rec) }

func (c pushCluster) Partitions(topic string) (int, bool) {
	tm, ok := c.g.view.Current().Topics[topic]
	if !ok {
		return 0, false
	}
	return tm.Partitions(), true
}

// pushInstance is the gateway's static member id in push groups: its host
// name and listen address, stable across restarts of the same gateway.
func pushInstance(opts Options, addr string) string {
	if opts.PushInstance != "" {
		return opts.PushInstance
	}
	host, _ := os.Hostname()
	id := "gw-" + host + "-" + addr
	if len(id) > 200 {
		id = id[:200]
	}
	return id
}
