package broker

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/offsets"
)

// The Kafka listener's consumer groups (kafka.Groups): the classic
// protocol's operations run on the same groupCoordinator the internal
// API's group routes use, so one group holds HTTP, WebSocket and Kafka
// members. The listener checks the ACLs (kafka/authzgroups.go) before a
// request gets here.
var _ kafka.Groups = kafkaBackend{}

func (k kafkaBackend) JoinGroup(ctx context.Context, group string, j kafka.GroupJoin) (int32, error) {
	b := k.b
	p, err := offsets.ValidateClassicJoin(offsets.ClassicJoinRequest{Topics: j.Topics, Owned: j.Owned, InstanceID: j.InstanceID,
		SessionTimeoutMs: j.SessionTimeoutMs, RebalanceTimeoutMs: j.RebalanceTimeoutMs, Protocol: j.Protocol, Version: j.Version,
		ClientID: j.ClientID, ClientHost: j.ClientHost})
	if err != nil {
		return 0, err
	}
	gc, err := b.coordinatorFor(group)
	if err != nil {
		return 0, err
	}
	var gen int32
	meta := b.groupMeta()
	err = gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
		return st.JoinClassic(group, j.MemberID, p, meta, now)
	}, func(st *offsets.State) error {
		m, err := st.Member(group, j.MemberID)
		if err != nil {
			return err
		}
		gen = m.Epoch
		return nil
	})
	return gen, err
}

func (k kafkaBackend) SyncGroup(ctx context.Context, group string, m kafka.GroupMember) (kafka.SyncResult, error) {
	gc, err := k.b.coordinatorFor(group)
	if err != nil {
		return kafka.SyncResult{}, err
	}
	var res kafka.SyncResult
	err = gc.read(ctx, func(st *offsets.State) error {
		tps, cm, err := st.SyncClassic(group, m.MemberID, m.InstanceID, m.Generation, time.Now())
		res = kafka.SyncResult{Assignment: tps, Protocol: cm.Protocol, Version: cm.Version}
		return err
	})
	return res, err
}

func (k kafkaBackend) Heartbeat(ctx context.Context, group string, m kafka.GroupMember) (bool, error) {
	b := k.b
	gc, err := b.coordinatorFor(group)
	if err != nil {
		return false, err
	}
	var rejoin bool
	err = gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
		recs, r, err := st.HeartbeatClassic(group, m.MemberID, m.InstanceID, m.Generation, b.groupMeta(), now)
		rejoin = r
		return recs, err
	}, nil)
	return rejoin, err
}

func (k kafkaBackend) LeaveGroup(ctx context.Context, group string, m kafka.GroupMember) error {
	b := k.b
	gc, err := b.coordinatorFor(group)
	if err != nil {
		return err
	}
	return gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
		return st.LeaveClassic(group, m.MemberID, m.InstanceID, b.groupMeta())
	}, nil)
}

func (k kafkaBackend) CommitOffsets(ctx context.Context, group string, m kafka.GroupMember, offs []kafka.CommitOffset) ([]error, error) {
	b := k.b
	gc, err := b.coordinatorFor(group)
	if err != nil {
		return nil, err
	}
	co := make([]offsets.ClassicOffset, len(offs))
	for i, o := range offs {
		co[i] = offsets.ClassicOffset{TopicPartition: o.TopicPartition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
	}
	var errs []error
	err = gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
		recs, e, err := st.CommitClassic(group, m.MemberID, m.InstanceID, m.Generation, co, b.groupMeta(), now)
		errs = e
		return recs, err
	}, nil)
	return errs, err
}

func (k kafkaBackend) FetchOffsets(ctx context.Context, group string) (map[api.TopicPartition]kafka.CommittedOffset, error) {
	gc, err := k.b.coordinatorFor(group)
	if err != nil {
		return nil, err
	}
	out := map[api.TopicPartition]kafka.CommittedOffset{}
	err = gc.read(ctx, func(st *offsets.State) error {
		for tp, ov := range st.Committed(group) {
			c := kafka.CommittedOffset{Offset: ov.Offset, LeaderEpoch: -1, Metadata: ov.Metadata}
			if ov.LeaderEpoch != nil {
				c.LeaderEpoch = *ov.LeaderEpoch
			}
			out[tp] = c
		}
		return nil
	})
	return out, err
}

func (k kafkaBackend) DescribeGroup(ctx context.Context, group string) (kafka.GroupDescription, bool, error) {
	gc, err := k.b.coordinatorFor(group)
	if err != nil {
		return kafka.GroupDescription{}, false, err
	}
	var d kafka.GroupDescription
	found := false
	err = gc.read(ctx, func(st *offsets.State) error {
		g := st.Group(group)
		if g == nil {
			return nil
		}
		found = true
		d.State = g.State()
		desc, _ := st.Describe(group)
		d.Epoch, d.Assignor = desc.GroupEpoch, desc.Assignor
		for _, dm := range desc.Members {
			m := g.Members[dm.MemberID]
			md := kafka.GroupMemberDescription{MemberID: m.ID, InstanceID: m.InstanceID, Kind: m.Kind, Topics: m.Topics, Assignment: dm.Assignment,
				Epoch: m.Epoch, Target: slices.Clone(m.Target), Consumer: m.Consumer != nil}
			if c := m.Classic; c != nil {
				md.ClientID, md.ClientHost, md.Protocol, md.Version = c.ClientID, c.ClientHost, c.Protocol, c.Version
			}
			if c := m.Consumer; c != nil {
				md.ClientID, md.ClientHost, md.TopicRegex = c.ClientID, c.ClientHost, c.TopicRegex
			}
			d.Members = append(d.Members, md)
		}
		return nil
	})
	return d, found, err
}

func (k kafkaBackend) ListGroups(ctx context.Context) ([]kafka.GroupListing, error) {
	b := k.b
	var out []kafka.GroupListing
	for _, p := range b.parts.topicPartitions(api.OffsetsTopic) {
		if _, _, leading := p.leaderState(); !leading {
			continue
		}
		err := b.groups.coordinator(p).read(ctx, func(st *offsets.State) error {
			for _, g := range st.Groups() {
				out = append(out, kafka.GroupListing{Group: g, State: st.Group(g).State()})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
