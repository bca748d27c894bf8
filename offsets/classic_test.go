package offsets

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

func (h *harness) kafkaJoin(group, id string, owned ...int32) int32 {
	h.t.Helper()
	p, err := ValidateClassicJoin(ClassicJoinRequest{Topics: []string{"t"}, SessionTimeoutMs: 10000, RebalanceTimeoutMs: 20000,
		Protocol: "range", Version: 1, Owned: tps("t", owned...)})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.apply(h.s.JoinClassic(group, id, p, h.metadata, h.now)); err != nil {
		h.t.Fatal(err)
	}
	m, err := h.s.Member(group, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Epoch
}

func (h *harness) kafkaSync(group, id string, gen int32) []int32 {
	h.t.Helper()
	got, _, err := h.s.SyncClassic(group, id, "", gen, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []int32
	for _, tp := range got {
		out = append(out, tp.Partition)
	}
	return out
}

func (h *harness) kafkaHeartbeat(group, id string, gen int32) (bool, error) {
	h.t.Helper()
	recs, rejoin, err := h.s.HeartbeatClassic(group, id, "", gen, h.metadata, h.now)
	if err := h.apply(recs, err); err != nil {
		return false, err
	}
	return rejoin, nil
}

func tps(topic string, ps ...int32) []api.TopicPartition {
	var out []api.TopicPartition
	for _, p := range ps {
		out = append(out, api.TopicPartition{Topic: topic, Partition: p})
	}
	return out
}

// An eager client rejoins owning nothing: what moved is released at once,
// and what stays is handed back.
func TestClassicEagerRejoinReleases(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 4})
	genA := h.kafkaJoin("g", "a")
	if got := h.kafkaSync("g", "a", genA); len(got) != 4 {
		t.Fatalf("a alone: %v", got)
	}
	genB := h.kafkaJoin("g", "b")
	if got := h.kafkaSync("g", "b", genB); len(got) != 0 {
		t.Fatalf("b took %v from a", got)
	}
	if rejoin, err := h.kafkaHeartbeat("g", "a", genA); err != nil || !rejoin {
		t.Fatalf("a: rejoin %v, %v", rejoin, err)
	}
	genA = h.kafkaJoin("g", "a") // eager: owns nothing
	if got := h.kafkaSync("g", "a", genA); len(got) != 2 {
		t.Fatalf("a after rejoining: %v", got)
	}
	if rejoin, _ := h.kafkaHeartbeat("g", "b", genB); !rejoin {
		t.Fatal("b is not asked to take the free partitions")
	}
	genB = h.kafkaJoin("g", "b")
	if got := h.kafkaSync("g", "b", genB); len(got) != 2 {
		t.Fatalf("b: %v", got)
	}
	// A stale generation is refused, everywhere.
	if _, err := h.kafkaHeartbeat("g", "b", genB-1); !errors.Is(err, &api.Error{Code: api.CodeIllegalGeneration}) {
		t.Fatalf("stale heartbeat: %v", err)
	}
	if _, _, err := h.s.SyncClassic("g", "b", "", genB-1, h.now); !errors.Is(err, &api.Error{Code: api.CodeIllegalGeneration}) {
		t.Fatalf("stale sync: %v", err)
	}
}

// A member asked to rejoin that keeps heartbeating but never does is
// removed once its rebalance timeout ran out, so what it held moves.
func TestClassicRebalanceTimeout(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	genA := h.kafkaJoin("g", "a")
	genB := h.kafkaJoin("g", "b")
	if rejoin, _ := h.kafkaHeartbeat("g", "a", genA); !rejoin {
		t.Fatal("a is not asked to rejoin")
	}
	for range 3 { // 15 s of heartbeats: within the 20 s rebalance timeout
		h.now = h.now.Add(5 * time.Second)
		if _, err := h.kafkaHeartbeat("g", "a", genA); err != nil {
			t.Fatal(err)
		}
		if _, err := h.kafkaHeartbeat("g", "b", genB); err != nil {
			t.Fatal(err)
		}
		if err := h.apply(h.s.Expire(h.now, h.metadata), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.s.Member("g", "a"); err != nil {
		t.Fatalf("a removed within its rebalance timeout: %v", err)
	}
	h.now = h.now.Add(6 * time.Second)
	if _, err := h.kafkaHeartbeat("g", "a", genA); err != nil {
		t.Fatal(err)
	}
	if err := h.apply(h.s.Expire(h.now, h.metadata), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Member("g", "a"); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		t.Fatalf("a after its rebalance timeout: %v", err)
	}
	if rejoin, _ := h.kafkaHeartbeat("g", "b", genB); !rejoin {
		t.Fatal("b is not asked to take a's partitions")
	}
	genB = h.kafkaJoin("g", "b")
	if got := h.kafkaSync("g", "b", genB); len(got) != 2 {
		t.Fatalf("b: %v", got)
	}
}

// HTTP requests never take a partition from a Kafka member: an HTTP member
// waits until the Kafka member rejoined without it, and the HTTP door does
// not serve the Kafka member's id.
func TestClassicWithHTTPMember(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	genK := h.kafkaJoin("g", "k")
	web := h.join("g", api.JoinGroupRequest{Topics: []string{"t"}})
	if err := h.heartbeat("g", web); err != nil {
		t.Fatal(err)
	}
	if got := h.owned("g", web); len(got) != 0 {
		t.Fatalf("the HTTP member took %v from a Kafka member", got)
	}
	if err := h.heartbeat("g", "k"); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) { // an HTTP heartbeat with the Kafka member's id
		t.Fatalf("an HTTP heartbeat for a Kafka member: %v", err)
	}
	if got := h.kafkaSync("g", "k", genK); len(got) != 1 {
		t.Fatalf("k's assignment after an HTTP heartbeat: %v", got)
	}
	if m, _ := h.s.Member("g", "k"); m.Epoch != genK || len(m.Owned) != 2 {
		t.Fatalf("k changed without rejoining: epoch %d owned %v", m.Epoch, m.Owned)
	}
	genK = h.kafkaJoin("g", "k")
	if err := h.heartbeat("g", web); err != nil {
		t.Fatal(err)
	}
	if got, kept := h.owned("g", web), h.kafkaSync("g", "k", genK); len(got) != 1 || len(kept) != 1 || got[0].Partition == kept[0] {
		t.Fatalf("HTTP holds %v, k %v", got, kept)
	}
}

// Commits keep the leader epoch and metadata through a replay of the log;
// a Kafka member commits what it owns at its generation, one pending
// revocation included, and nothing else.
func TestClassicCommitReplay(t *testing.T) {
	h := newHarness(t, map[string]int32{"t": 2})
	gen := h.kafkaJoin("g", "a")
	h.kafkaJoin("g", "b")
	// a has not rejoined: both partitions are still its own.
	offs := []ClassicOffset{
		{TopicPartition: api.TopicPartition{Topic: "t", Partition: 0}, Offset: 5, LeaderEpoch: 3, Metadata: "m"},
		{TopicPartition: api.TopicPartition{Topic: "t", Partition: 1}, Offset: 6, LeaderEpoch: -1},
	}
	recs, errs, err := h.s.CommitClassic("g", "a", "", gen, offs, h.metadata, h.now)
	if err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if err := h.apply(recs, nil); err != nil {
		t.Fatal(err)
	}
	_, errs, _ = h.s.CommitClassic("g", "b", "", 1, offs[:1], h.metadata, h.now)
	if !errors.Is(errs[0], &api.Error{Code: api.CodeIllegalGeneration}) {
		t.Fatalf("b commits a's partition: %v", errs[0])
	}
	replayed := NewState()
	for _, r := range h.log {
		if err := replayed.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	c := replayed.Committed("g")
	p0, p1 := c[api.TopicPartition{Topic: "t", Partition: 0}], c[api.TopicPartition{Topic: "t", Partition: 1}]
	if p0.Offset != 5 || p0.Metadata != "m" || p0.LeaderEpoch == nil || *p0.LeaderEpoch != 3 || p1.Offset != 6 || p1.LeaderEpoch != nil {
		t.Fatalf("replayed: %+v %+v", p0, p1)
	}
	if m := replayed.Group("g").Members["a"]; m.Classic == nil || m.Classic.Protocol != "range" || m.Classic.RebalanceTimeoutMs != 20000 {
		t.Fatalf("replayed member: %+v", m.MemberValue)
	}
}
