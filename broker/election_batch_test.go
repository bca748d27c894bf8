package broker

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/coordtest"
)

// An election pass writes its states in batches: a partition whose state
// changed behind the snapshot's back loses its race alone (every other
// partition of its batch is written) and is written by the next pass; a
// deposed controller's pass writes nothing. On both coordinators.
func TestElectLeadersInBatches(t *testing.T) {
	coordtest.ForEach(t, func(t *testing.T, open coordtest.Tree) {
		ctx := t.Context()
		c := open()
		ctl, view := controllerOn(t, c)
		const n = 3 * maxStatesPerMulti // RF 3 on 3 brokers: every partition's ISR holds broker 2
		if err := ctl.createTopic(ctx, api.CreateTopicRequest{Name: "t", Partitions: n, ReplicationFactor: 3}); err != nil {
			t.Fatal(err)
		}
		states := func() (out []api.PartitionState, versions []int32) {
			t.Helper()
			for p := range int32(n) {
				data, st, err := c.Get(ctx, cluster.PartitionStatePath("t", p))
				if err != nil {
					t.Fatal(err)
				}
				var s api.PartitionState
				if err := json.Unmarshal(data, &s); err != nil {
					t.Fatal(err)
				}
				out, versions = append(out, s), append(versions, st.Version)
			}
			return out, versions
		}
		// without returns md with broker id gone, as a snapshot taken after
		// its session ended.
		without := func(md *cluster.Metadata, id int32) *cluster.Metadata {
			cp := *md
			cp.Brokers = maps.Clone(md.Brokers)
			delete(cp.Brokers, id)
			return &cp
		}
		snap := view.Current()
		// Three partitions change behind the snapshot (a leader's ISR
		// write, say), one of them in each batch.
		stale := []int32{5, maxStatesPerMulti + 17, n - 1}
		for _, p := range stale {
			data, _, err := c.Get(ctx, cluster.PartitionStatePath("t", p))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Set(ctx, cluster.PartitionStatePath("t", p), data, coord.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
		if ctl.electLeaders(ctx, without(snap, 2), false) {
			t.Fatal("a pass with stale partitions reported every write through")
		}
		got, versions := states()
		for p, st := range got {
			isStale := slices.Contains(stale, int32(p))
			switch {
			case isStale && (!slices.Contains(st.ISR, 2) || versions[p] != 1):
				t.Fatalf("stale partition %d was written: %+v at version %d", p, st, versions[p])
			case !isStale && (slices.Contains(st.ISR, 2) || st.Leader == 2 || versions[p] != 1):
				t.Fatalf("partition %d not written past its stale neighbours: %+v at version %d", p, st, versions[p])
			}
		}
		// The next pass, on a snapshot that has caught up, writes them.
		if err := view.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if !ctl.electLeaders(ctx, without(view.Current(), 2), false) {
			t.Fatal("the retry pass did not write every partition")
		}
		got, versions = states()
		for p, st := range got {
			if slices.Contains(st.ISR, 2) || st.Leader == 2 || st.ControllerEpoch != ctl.currentEpoch() {
				t.Fatalf("after the retry partition %d is %+v at version %d", p, st, versions[p])
			}
		}

		// Another controller takes office; the old one, not yet told, makes
		// a pass that would change every partition: nothing is written.
		if err := view.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		before, beforeVersions := states()
		if err := c.Delete(ctx, cluster.ControllerPath, coord.AnyVersion); err != nil {
			t.Fatal(err)
		}
		next := &controller{self: 3, c: open(), view: view, log: ctl.log}
		if won, err := next.elect(ctx); err != nil || !won {
			t.Fatalf("the second controller's election: %v %v", won, err)
		}
		if ctl.electLeaders(ctx, without(without(view.Current(), 2), 3), false) {
			t.Fatal("a deposed controller's pass reported its writes through")
		}
		after, afterVersions := states()
		if !slices.Equal(beforeVersions, afterVersions) {
			t.Fatalf("a deposed controller's pass changed state versions: %v -> %v", beforeVersions, afterVersions)
		}
		for p := range before {
			if before[p].Leader != after[p].Leader || !slices.Equal(before[p].ISR, after[p].ISR) {
				t.Fatalf("partition %d changed under a deposed controller: %+v -> %+v", p, before[p], after[p])
			}
		}
	})
}
