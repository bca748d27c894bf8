package broker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestDecideLeader(t *testing.T) {
	live := func(ids ...int32) map[int32]api.BrokerRegistration {
		m := map[int32]api.BrokerRegistration{}
		for _, id := range ids {
			m[id] = api.BrokerRegistration{ID: id}
		}
		return m
	}
	// stopping marks brokers of a live set as shutting down.
	stopping := func(m map[int32]api.BrokerRegistration, ids ...int32) map[int32]api.BrokerRegistration {
		for _, id := range ids {
			m[id] = api.BrokerRegistration{ID: id, ShuttingDown: true}
		}
		return m
	}
	// leaving marks brokers of a live set as stopping: their controlled
	// shutdown handed over what could move.
	leaving := func(m map[int32]api.BrokerRegistration, ids ...int32) map[int32]api.BrokerRegistration {
		for _, id := range ids {
			m[id] = api.BrokerRegistration{ID: id, ShuttingDown: true, Stopping: true}
		}
		return m
	}
	st := func(leader, epoch int32, isr ...int32) api.PartitionState {
		return api.PartitionState{Leader: leader, LeaderEpoch: epoch, ISR: isr}
	}
	replicas := []int32{1, 2, 3}
	tests := []struct {
		name               string
		state              api.PartitionState
		live               map[int32]api.BrokerRegistration
		unclean, preferred bool
		want               api.PartitionState
		change             bool
	}{
		{"all well", st(1, 0, 1, 2, 3), live(1, 2, 3), false, false, st(1, 0, 1, 2, 3), false},
		{"dead follower leaves the ISR, same epoch", st(1, 4, 1, 2, 3), live(1, 3), false, false, st(1, 4, 1, 3), true},
		{"dead leader: next live ISR member, new epoch", st(1, 4, 1, 2, 3), live(2, 3), false, false, st(2, 5, 2, 3), true},
		{"dead leader: skips live replicas outside the ISR", st(1, 4, 1, 3), live(2, 3), false, false, st(3, 5, 3), true},
		{"no live ISR member: offline, ISR kept", st(1, 4, 1), live(2, 3), false, false, st(-1, 5, 1), true},
		{"offline stays offline", st(-1, 5, 1), live(2, 3), false, false, st(-1, 5, 1), false},
		{"offline: the ISR member returns and leads", st(-1, 5, 1), live(1, 2, 3), false, false, st(1, 6, 1), true},
		{"unclean: an out-of-sync replica leads", st(-1, 5, 1), live(2, 3), true, false, st(2, 6, 2), true},
		{"preferred back in the ISR takes over", st(2, 6, 1, 2, 3), live(1, 2, 3), false, true, st(1, 7, 1, 2, 3), true},
		{"preferred outside the ISR waits", st(2, 6, 2, 3), live(1, 2, 3), false, true, st(2, 6, 2, 3), false},
		{"no rebalance outside the rebalance pass", st(2, 6, 1, 2, 3), live(1, 2, 3), false, false, st(2, 6, 1, 2, 3), false},
		{"shutting-down leader hands over to the next ISR member and leaves the ISR", st(1, 4, 1, 2, 3), stopping(live(1, 2, 3), 1), false, false, st(2, 5, 2, 3), true},
		{"shutting-down leader skips ISR members shutting down too, which stay in the ISR", st(1, 4, 1, 2, 3), stopping(live(1, 2, 3), 1, 2), false, false, st(3, 5, 2, 3), true},
		{"shutting-down leader skips replicas outside the ISR", st(1, 4, 1, 2), stopping(live(1, 2, 3), 1, 2), false, false, st(1, 4, 1, 2), false},
		{"shutting-down sole ISR member keeps leading", st(1, 4, 1), stopping(live(1, 2, 3), 1), false, false, st(1, 4, 1), false},
		{"dead leader: a shutting-down ISR member is passed over", st(1, 4, 1, 2, 3), stopping(live(2, 3), 2), false, false, st(3, 5, 2, 3), true},
		{"dead leader: a shutting-down ISR member beats offline", st(1, 4, 1, 2), stopping(live(2, 3), 2), false, false, st(2, 5, 2), true},
		{"preferred replica shutting down gets no leadership back", st(2, 6, 1, 2, 3), stopping(live(1, 2, 3), 1), false, true, st(2, 6, 1, 2, 3), false},
		{"stopping follower leaves the ISR, same epoch", st(2, 5, 1, 2, 3), leaving(live(1, 2, 3), 1), false, false, st(2, 5, 2, 3), true},
		{"stopping follower leaves even the ISR it would shrink to the leader", st(2, 5, 1, 2), leaving(live(1, 2, 3), 1), false, false, st(2, 5, 2), true},
		{"stopping leader with no one to hand over to keeps leading, and its ISR", st(1, 4, 1), leaving(live(1, 2, 3), 1), false, false, st(1, 4, 1), false},
		{"stopping leader hands over and leaves the ISR", st(1, 4, 1, 2, 3), leaving(live(1, 2, 3), 1), false, false, st(2, 5, 2, 3), true},
		{"dead leader, a stopping ISR member: it leads rather than offline", st(1, 4, 1, 2), leaving(live(2, 3), 2), false, false, st(2, 5, 2), true},
		{"two stopping followers both leave", st(3, 5, 1, 2, 3), leaving(live(1, 2, 3), 1, 2), false, false, st(3, 5, 3), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, change := decideLeader(tt.state, replicas, tt.live, tt.unclean, tt.preferred)
			if change != tt.change || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %+v change=%v, want %+v change=%v", got, change, tt.want, tt.change)
			}
		})
	}
}

func TestLeadersFirstPutsElectionsBeforeISRShrinks(t *testing.T) {
	// A broker died: it led p1 and p3 and followed p0 and p2.
	writes := []stateWrite{
		{topic: "t", partition: 0, state: api.PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}}},
		{topic: "t", partition: 1, state: api.PartitionState{Leader: 3, LeaderEpoch: 5, ISR: []int32{3, 1}}},
		{topic: "t", partition: 2, state: api.PartitionState{Leader: 3, LeaderEpoch: 2, ISR: []int32{3}}},
		{topic: "t", partition: 3, state: api.PartitionState{Leader: -1, LeaderEpoch: 7, ISR: []int32{2}}},
	}
	keys := []partitionKey{{"id", 0}, {"id", 1}, {"id", 2}, {"id", 3}}
	was := []int32{1, 2, 3, 2}
	leadersFirst(writes, keys, was)
	var order []int32
	for i, w := range writes {
		order = append(order, w.partition)
		if keys[i].partition != w.partition {
			t.Fatalf("key %d names partition %d, its write %d", i, keys[i].partition, w.partition)
		}
	}
	if want := []int32{1, 3, 0, 2}; !slices.Equal(order, want) {
		t.Fatalf("write order %v, want the elections (1, 3) first, then the ISR shrinks (0, 2): %v", order, want)
	}
	if want := []int32{2, 2, 1, 3}; !slices.Equal(was, want) {
		t.Fatalf("was %v, want %v (kept beside its write)", was, want)
	}
}
