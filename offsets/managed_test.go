package offsets

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// joinKind joins with a member kind, returning the member id or the error.
func (h *harness) joinKind(group, kind string, req api.JoinGroupRequest) (string, error) {
	h.t.Helper()
	p, err := ValidateJoin(req, kind, h.metadata)
	if err != nil {
		h.t.Fatal(err)
	}
	h.ids++
	id := "m" + strings.Repeat("x", h.ids)
	return id, h.apply(h.s.Join(group, id, p, h.metadata, h.now))
}

func TestPushGroupsTakeOnlyPushers(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 2})
	req := api.JoinGroupRequest{Topics: []string{"a"}}
	for _, kind := range []string{api.MemberKindHTTP, api.MemberKindWS} {
		if _, err := h.joinKind("push.s", kind, req); !errors.Is(err, &api.Error{Code: api.CodeGroupManaged}) {
			t.Fatalf("a %s member joined a push group: %v", kind, err)
		}
	}
	if _, err := h.joinKind("g", api.MemberKindPush, req); !errors.Is(err, &api.Error{Code: api.CodeInvalidRequest}) {
		t.Fatalf("a pusher joined a pull group: %v", err)
	}
	if _, err := h.joinKind("push.s", api.MemberKindPush, api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: "gw-1"}); err != nil {
		t.Fatal(err)
	}
	offs := []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 1}}
	if _, err := h.s.SetOffsets("push.s", offs, h.now); !errors.Is(err, &api.Error{Code: api.CodeGroupManaged}) {
		t.Fatalf("a group reset of a push group: %v", err)
	}
	if _, err := h.s.Delete("push.s", false); !errors.Is(err, &api.Error{Code: api.CodeGroupManaged}) {
		t.Fatalf("a group delete of a push group: %v", err)
	}
	if _, err := h.s.SeekManaged("g", offs, h.now); err == nil {
		t.Fatal("a managed seek of a pull group was accepted")
	}
	d, _ := h.s.Describe("push.s")
	if d.Kind != api.GroupKindPush || h.s.Summary("push.s").Kind != api.GroupKindPush {
		t.Fatalf("kind %q, summary %q: want push", d.Kind, h.s.Summary("push.s").Kind)
	}
}

// The metadata committed with an offset is what a poll plan starts the
// partition with, after a replay too: a new owner continues a push
// subscription's attempt count.
func TestCommitMetadataTravelsWithTheOffset(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 1})
	m, err := h.joinKind("push.s", api.MemberKindPush, api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	mv, _ := h.s.Member("push.s", m)
	commit := []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 7, Metadata: `{"attempts":3}`}}
	if err := h.apply(h.s.Commit("push.s", m, mv.Epoch, commit, h.metadata, h.now)); err != nil {
		t.Fatal(err)
	}
	tooBig := []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 8, Metadata: strings.Repeat("x", api.MaxCommitMetadataBytes+1)}}
	if err := h.apply(h.s.Commit("push.s", m, mv.Epoch, tooBig, h.metadata, h.now)); !errors.Is(err, &api.Error{Code: api.CodeInvalidRequest}) {
		t.Fatalf("oversized metadata: %v", err)
	}
	replayed := NewState()
	for _, r := range h.log {
		if err := replayed.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	// The gateway that held it is gone; its instance rejoins elsewhere.
	p, _ := ValidateJoin(api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: "gw-1"}, api.MemberKindPush, h.metadata)
	recs, err := replayed.Join("push.s", "new", p, h.metadata, h.now)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := replayed.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := replayed.Plan("push.s", "new", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Starts) != 1 || plan.Starts[0].Offset != 7 || plan.Starts[0].Metadata != `{"attempts":3}` {
		t.Fatalf("plan after replay: %+v", plan.Starts)
	}
	d, _ := replayed.Describe("push.s")
	if d.Partitions[0].Metadata != `{"attempts":3}` {
		t.Fatalf("describe: %+v", d.Partitions)
	}
}

// A seek of a push group writes the offsets and grants the owned
// partitions again: the owner's commits under the old grant are refused,
// and its next plan starts at the sought offset.
func TestSeekManagedRegrants(t *testing.T) {
	h := newHarness(t, map[string]int32{"a": 2})
	m, err := h.joinKind("push.s", api.MemberKindPush, api.JoinGroupRequest{Topics: []string{"a"}, InstanceID: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := h.s.Member("push.s", m)
	oldEpoch, oldGrants := before.Epoch, before.Grants()
	if err := h.apply(h.s.SeekManaged("push.s", []api.PartitionOffset{{Topic: "a", Partition: 1, Offset: 5}}, h.now)); err != nil {
		t.Fatal(err)
	}
	after, _ := h.s.Member("push.s", m)
	if after.Epoch <= oldEpoch {
		t.Fatalf("member epoch %d after the seek, was %d", after.Epoch, oldEpoch)
	}
	for i, g := range after.Grants() {
		moved := g.Partition == 1
		if (g.Fence != oldGrants[i].Fence) != moved {
			t.Fatalf("partition %d: fence %d → %d (sought: %v)", g.Partition, oldGrants[i].Fence, g.Fence, moved)
		}
	}
	old := []api.PartitionOffset{{Topic: "a", Partition: 1, Offset: 9}}
	if err := h.apply(h.s.Commit("push.s", m, oldEpoch, old, h.metadata, h.now)); !errors.Is(err, &api.Error{Code: api.CodeFencedMemberEpoch}) {
		t.Fatalf("a commit under the old grant: %v", err)
	}
	// The untouched partition still takes the old epoch's commits.
	kept := []api.PartitionOffset{{Topic: "a", Partition: 0, Offset: 2}}
	if err := h.apply(h.s.Commit("push.s", m, oldEpoch, kept, h.metadata, h.now)); err != nil {
		t.Fatalf("a commit of the partition not sought: %v", err)
	}
	plan, _ := h.s.Plan("push.s", m, nil)
	for _, s := range plan.Starts {
		if s.Partition == 1 && s.Offset != 5 {
			t.Fatalf("plan starts partition 1 at %d, want 5", s.Offset)
		}
	}
	if _, err := h.s.SeekManaged("push.s", []api.PartitionOffset{{Topic: "a", Offset: -1}}, h.now); !errors.Is(err, &api.Error{Code: api.CodeInvalidOffset}) {
		t.Fatalf("a negative seek: %v", err)
	}
}
