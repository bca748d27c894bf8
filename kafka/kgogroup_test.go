package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
)

// holders records which group consumer holds each partition, from the
// franz-go callbacks: a partition is held from OnPartitionsAssigned until
// OnPartitionsRevoked or OnPartitionsLost. Two holders at once is a
// violation, kept for the test's end.
type holders struct {
	t          *testing.T
	mu         sync.Mutex
	by         map[int32]string
	violations []string
}

func (h *holders) opts(name string) []kgo.Opt {
	assigned := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		h.t.Logf("%s: assigned %v", name, m)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range m["events"] {
			if other, ok := h.by[p]; ok && other != name {
				h.violations = append(h.violations, fmt.Sprintf("partition %d assigned to %s while %s holds it", p, name, other))
			}
			h.by[p] = name
		}
	}
	gone := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		h.t.Logf("%s: revoked or lost %v", name, m)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range m["events"] {
			if h.by[p] == name {
				delete(h.by, p)
			}
		}
	}
	return []kgo.Opt{kgo.ConsumerGroup("mixed"), kgo.ConsumeTopics("events"), kgo.ClientID(name),
		kgo.OnPartitionsAssigned(assigned), kgo.OnPartitionsRevoked(gone), kgo.OnPartitionsLost(gone),
		kgo.HeartbeatInterval(200 * time.Millisecond), kgo.SessionTimeout(10 * time.Second), kgo.DisableAutoCommit()}
}

// held returns the partitions name holds, sorted.
func (h *holders) held(name string) []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int32
	for p, n := range h.by {
		if n == name {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// One group holds an HTTP member and franz-go group consumers at once: the
// coordinator splits the partitions between them, a partition moves to a
// franz-go consumer only after its owner let go of it, and commits made
// through either door are read through the other, the Kafka metadata
// string and leader epoch kept.
func TestKgoGroupWithHTTPMember(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 4, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The HTTP member joins first and gets every partition.
	var member api.JoinGroupResponse
	testwait.Check(t, 30*time.Second, "the HTTP member joins", func() error {
		var err error
		member, err = hc.JoinGroup(ctx, "mixed", api.JoinGroupRequest{Topics: []string{"events"}, SessionTimeoutMs: 60000})
		return err
	})
	httpHeld := func() []int32 {
		t.Helper()
		hb, err := hc.Heartbeat(ctx, "mixed", member.MemberID)
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for _, tp := range hb.Assignment {
			out = append(out, tp.Partition)
		}
		return out
	}
	if got := httpHeld(); len(got) != 4 {
		t.Fatalf("the HTTP member alone holds %v", got)
	}

	h := &holders{t: t, by: map[int32]string{}}
	k1 := newKgo(t, cl, h.opts("kgo-1")...)
	// The HTTP member gives up half at its next request; then the franz-go
	// consumer is asked to rejoin and gets them.
	testwait.Check(t, 60*time.Second, "kgo-1 and the HTTP member split the partitions", func() error {
		hp, kp := httpHeld(), h.held("kgo-1")
		if len(hp) != 2 || len(kp) != 2 || slices.ContainsFunc(hp, func(p int32) bool { return slices.Contains(kp, p) }) {
			return fmt.Errorf("HTTP holds %v, kgo-1 %v", hp, kp)
		}
		return nil
	})

	// kgo-1 commits its partitions with metadata and a leader epoch, in
	// its generation.
	kp := h.held("kgo-1")
	commit := map[string]map[int32]kgo.EpochOffset{"events": {}}
	for _, p := range kp {
		commit["events"][p] = kgo.EpochOffset{Epoch: 0, Offset: int64(10 + p)}
	}
	var commitErr error
	k1.CommitOffsetsSync(ctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		commitErr = err
		if err == nil {
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
						commitErr = fmt.Errorf("%s/%d: %w", rt.Topic, rp.Partition, e)
					}
				}
			}
		}
	})
	if commitErr != nil {
		t.Fatal(commitErr)
	}
	// A commit by a member the group does not have is refused.
	hp := httpHeld()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = "mixed", "not-a-member", 1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "events"
	rpp := kmsg.NewOffsetCommitRequestTopicPartition()
	rpp.Partition, rpp.Offset = hp[0], 5
	rt.Partitions = append(rt.Partitions, rpp)
	req.Topics = append(req.Topics, rt)
	cresp, err := req.RequestWith(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if c := cresp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownMemberID.Code {
		t.Fatalf("a commit by an unknown member: %v", kerr.ErrorForCode(c))
	}
	// The HTTP member commits its own, with metadata.
	var offs []api.PartitionOffset
	for _, p := range hp {
		offs = append(offs, api.PartitionOffset{Topic: "events", Partition: p, Offset: int64(20 + p), Metadata: "http"})
	}
	if _, err := hc.CommitOffsets(ctx, "mixed", api.CommitRequest{MemberID: member.MemberID, MemberEpoch: member.MemberEpoch, Offsets: offs}); err != nil {
		// The epoch moved when the member gave partitions up: commit at the current one.
		hb, herr := hc.Heartbeat(ctx, "mixed", member.MemberID)
		if herr != nil {
			t.Fatal(herr)
		}
		if _, err := hc.CommitOffsets(ctx, "mixed", api.CommitRequest{MemberID: member.MemberID, MemberEpoch: hb.MemberEpoch, Offsets: offs}); err != nil {
			t.Fatal(err)
		}
	}

	// OffsetFetch (franz-go's current version, v8+ groups) reads both.
	freq := kmsg.NewPtrOffsetFetchRequest()
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group = "mixed"
	freq.Groups = append(freq.Groups, fg)
	fresp, err := freq.RequestWith(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if len(fresp.Groups) != 1 || fresp.Groups[0].ErrorCode != 0 || len(fresp.Groups[0].Topics) != 1 {
		t.Fatalf("OffsetFetch: %+v", fresp.Groups)
	}
	got := map[int32]kmsg.OffsetFetchResponseGroupTopicPartition{}
	for _, p := range fresp.Groups[0].Topics[0].Partitions {
		got[p.Partition] = p
	}
	for _, p := range kp {
		if g := got[p]; g.Offset != int64(10+p) || g.LeaderEpoch != 0 || g.ErrorCode != 0 {
			t.Fatalf("partition %d committed by kgo-1: %+v", p, g)
		}
	}
	for _, p := range hp {
		if g := got[p]; g.Offset != int64(20+p) || g.LeaderEpoch != -1 || g.Metadata == nil || *g.Metadata != "http" {
			t.Fatalf("partition %d committed over HTTP: %+v", p, g)
		}
	}
	// The HTTP API shows the Kafka member and its commits.
	d, err := hc.DescribeGroup(ctx, "mixed")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range d.Members {
		kinds[m.Kind]++
	}
	if kinds[api.MemberKindHTTP] != 1 || kinds[api.MemberKindKafka] != 1 {
		t.Fatalf("members: %+v", d.Members)
	}
	for _, row := range d.Partitions {
		if slices.Contains(kp, row.Partition) && row.CommittedOffset != int64(10+row.Partition) {
			t.Fatalf("HTTP describe: %+v", row)
		}
	}

	// A second franz-go consumer: partitions move to it only after their
	// owner revoked them, so no partition has two Kafka holders at once.
	newKgo(t, cl, h.opts("kgo-2")...)
	testwait.Check(t, 60*time.Second, "three members hold the partitions", func() error {
		hp, k1p, k2p := httpHeld(), h.held("kgo-1"), h.held("kgo-2")
		if len(hp)+len(k1p)+len(k2p) != 4 || len(k2p) == 0 || len(k1p) == 0 || len(hp) == 0 {
			return fmt.Errorf("HTTP holds %v, kgo-1 %v, kgo-2 %v", hp, k1p, k2p)
		}
		return nil
	})

	// The HTTP member leaves: the franz-go consumers take its partitions.
	if err := hc.LeaveGroup(ctx, "mixed", member.MemberID); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 60*time.Second, "kgo-1 and kgo-2 hold every partition", func() error {
		k1p, k2p := h.held("kgo-1"), h.held("kgo-2")
		if len(k1p) != 2 || len(k2p) != 2 {
			return fmt.Errorf("kgo-1 %v, kgo-2 %v", k1p, k2p)
		}
		return nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.violations) > 0 {
		t.Fatal(errors.Join(func() []error {
			var out []error
			for _, v := range h.violations {
				out = append(out, errors.New(v))
			}
			return out
		}()...))
	}
}

// commitSync commits offsets of "events" through franz-go's group member and
// returns the first error, the per-partition ones included.
func commitSync(ctx context.Context, kc *kgo.Client, offs map[int32]int64) error {
	commit := map[string]map[int32]kgo.EpochOffset{"events": {}}
	for p, o := range offs {
		commit["events"][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	var out error
	kc.CommitOffsetsSync(ctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		out = err
		if err != nil {
			return
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					out = fmt.Errorf("%s/%d: %w", rt.Topic, rp.Partition, e)
				}
			}
		}
	})
	return out
}

// When the broker coordinating a group stops, another takes the group over
// from the log: FindCoordinator names it, the franz-go member keeps its
// partitions and goes on committing there, and what was committed before is
// read back.
func TestKgoGroupCoordinatorMoves(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 2, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// An HTTP call has the gateway create __consumer_offsets.
	testwait.Check(t, 30*time.Second, "the offsets topic exists", func() error {
		m, err := hc.JoinGroup(ctx, "warm-up", api.JoinGroupRequest{Topics: []string{"events"}})
		if err != nil {
			return err
		}
		return hc.LeaveGroup(ctx, "warm-up", m.MemberID)
	})
	h := &holders{t: t, by: map[int32]string{}}
	kc := newKgo(t, cl, h.opts("kgo-1")...)
	testwait.Check(t, 60*time.Second, "kgo-1 holds both partitions", func() error {
		if got := h.held("kgo-1"); len(got) != 2 {
			return fmt.Errorf("kgo-1 holds %v", got)
		}
		return nil
	})
	if err := commitSync(ctx, kc, map[int32]int64{0: 5, 1: 6}); err != nil {
		t.Fatal(err)
	}
	coordinator := func() (int32, error) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKeys = []string{"mixed"}
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			return -1, err
		}
		if len(resp.Coordinators) != 1 {
			return -1, fmt.Errorf("%d coordinators", len(resp.Coordinators))
		}
		c := resp.Coordinators[0]
		return c.NodeID, kerr.ErrorForCode(c.ErrorCode)
	}
	old, err := coordinator()
	if err != nil {
		t.Fatal(err)
	}
	cl.StopBroker(int(old))
	testwait.Check(t, 60*time.Second, "another broker coordinates the group", func() error {
		id, err := coordinator()
		if err == nil && id == old {
			return fmt.Errorf("broker %d still named", id)
		}
		return err
	})
	testwait.Check(t, 60*time.Second, "kgo-1 commits at the new coordinator", func() error {
		return commitSync(ctx, kc, map[int32]int64{0: 7})
	})
	if got := h.held("kgo-1"); len(got) != 2 {
		t.Fatalf("kgo-1 holds %v after the move", got)
	}
	freq := kmsg.NewPtrOffsetFetchRequest()
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group = "mixed"
	freq.Groups = append(freq.Groups, fg)
	fresp, err := freq.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for _, rt := range fresp.Groups[0].Topics {
		for _, p := range rt.Partitions {
			got[p.Partition] = p.Offset
		}
	}
	if got[0] != 7 || got[1] != 6 {
		t.Fatalf("committed after the move: %v", got)
	}
}
