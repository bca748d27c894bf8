package broker

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

func TestHandedBack(t *testing.T) {
	st := func(leader, epoch int32, isr ...int32) api.PartitionState {
		return api.PartitionState{Leader: leader, LeaderEpoch: epoch, ISR: isr, ControllerEpoch: 4}
	}
	tests := []struct {
		name   string
		cur    api.PartitionState
		epoch  int32
		want   api.PartitionState
		wantOK bool
	}{
		{"leaves the ISR", st(1, 3, 1, 2, 3), 3, st(-1, 4, 2, 3), true},
		{"the only member stays", st(1, 3, 1), 3, st(-1, 4, 1), true},
		{"an older epoch than handed back: still ours", st(1, 2, 1, 2), 3, st(-1, 3, 2), true},
		{"another leader: moot", st(2, 4, 1, 2), 3, st(2, 4, 1, 2), false},
		{"a newer epoch of ours: moot", st(1, 5, 1, 2), 3, st(1, 5, 1, 2), false},
		{"leaderless already: moot", st(-1, 4, 2), 3, st(-1, 4, 2), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := handedBack(tc.cur, 1, tc.epoch)
			if ok != tc.wantOK || got.Leader != tc.want.Leader || got.LeaderEpoch != tc.want.LeaderEpoch ||
				!slices.Equal(got.ISR, tc.want.ISR) || got.ControllerEpoch != tc.want.ControllerEpoch {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// A restarted broker's hand-backs go in batches: those whose state changed
// since the View read it are read again and written on the next turn; those
// that became moot are dropped.
func TestHandBackBatch(t *testing.T) {
	ctx := t.Context()
	store, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := store.Session()
	const n = 500
	write := func(p int32, st api.PartitionState, version int32) {
		t.Helper()
		data, _ := json.Marshal(st)
		path := cluster.PartitionStatePath("t", p)
		var err error
		if version < 0 {
			_, err = coord.CreateAll(ctx, c, path, data, 0)
		} else {
			_, err = c.Set(ctx, path, data, version)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	led := api.PartitionState{Leader: 1, LeaderEpoch: 2, ISR: []int32{1, 2, 3}}
	var todo []handBack
	for p := range int32(n) {
		write(p, led, -1)
		todo = append(todo, handBack{p: &Partition{Topic: "t", ID: p}, epoch: 2, st: led, version: 0})
	}
	// Behind the View's back: an ISR change on 7 (still ours), a new leader
	// on 300 (moot).
	write(7, api.PartitionState{Leader: 1, LeaderEpoch: 2, ISR: []int32{1, 2}}, 0)
	write(300, api.PartitionState{Leader: 2, LeaderEpoch: 3, ISR: []int32{2, 3}}, 0)
	b := &Broker{opts: Options{ID: 1, Coord: c}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	again, failed := b.handBackBatch(ctx, todo, 0)
	if failed || len(again) != 2 {
		t.Fatalf("first turn: %d to try again (failed %v), want the 2 that lost their race", len(again), failed)
	}
	again, failed = b.handBackBatch(ctx, again, 1)
	if failed || len(again) != 0 {
		t.Fatalf("second turn: %d to try again (failed %v)", len(again), failed)
	}
	for p := range int32(n) {
		data, _, err := c.Get(ctx, cluster.PartitionStatePath("t", p))
		if err != nil {
			t.Fatal(err)
		}
		var st api.PartitionState
		_ = json.Unmarshal(data, &st)
		want := api.PartitionState{Leader: -1, LeaderEpoch: 3, ISR: []int32{2, 3}}
		switch p {
		case 7:
			want.ISR = []int32{2}
		case 300:
			want.Leader = 2
		}
		if st.Leader != want.Leader || st.LeaderEpoch != want.LeaderEpoch || !slices.Equal(st.ISR, want.ISR) {
			t.Fatalf("partition %d: %+v, want %+v", p, st, want)
		}
	}
}
