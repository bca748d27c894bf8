package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
)

func tpOf(topic string, p int32) brokerapi.TopicPartition {
	return brokerapi.TopicPartition{Topic: topic, Partition: p}
}

func changed(topic string, p int32, offset int64) brokerapi.ReplicaFetchPartition {
	return brokerapi.ReplicaFetchPartition{TopicPartition: tpOf(topic, p), FetchOffset: offset, LeaderEpoch: 3}
}

// TestFetchSessionEpochs: a session is found by its id and its follower
// only, at the epoch it expects next; anything else is one of the two
// session errors, after which the follower starts a new session.
func TestFetchSessionEpochs(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	fs := newFetchSessions(10)
	s, err := fs.acquire(ctx, 2, 0, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	id := s.id
	fs.release(s, now)
	cases := []struct {
		name           string
		replica, id, e int32
		want           api.Code
	}{
		{"next epoch", 2, id, 1, ""},
		{"same epoch again (an answer lost)", 2, id, 1, api.CodeInvalidFetchEpoch},
		{"epoch ahead", 2, id, 5, api.CodeInvalidFetchEpoch},
		{"another follower's session", 3, id, 2, api.CodeFetchSessionNotFound},
		{"unknown id", 2, id + 100, 1, api.CodeFetchSessionNotFound},
		{"the epoch after", 2, id, 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := fs.acquire(ctx, c.replica, c.id, c.e, now)
			if c.want == "" {
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				fs.release(s, now)
				return
			}
			if !errors.Is(err, &api.Error{Code: c.want}) {
				t.Fatalf("acquire: %v, want %s", err, c.want)
			}
		})
	}
	// A new session naming the old one drops it.
	s2, err := fs.acquire(ctx, 2, id, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	fs.release(s2, now)
	if n := fs.size(); n != 1 {
		t.Fatalf("%d sessions after the follower replaced its own, want 1", n)
	}
	if _, err := fs.acquire(ctx, 2, id, 3, now); !errors.Is(err, &api.Error{Code: api.CodeFetchSessionNotFound}) {
		t.Fatalf("the replaced session: %v, want FETCH_SESSION_ID_NOT_FOUND", err)
	}
}

// TestFetchSessionsEvictLeastRecentlyUsed: past the bound, a new session
// evicts the one used longest ago.
func TestFetchSessionsEvictLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	fs := newFetchSessions(2)
	t0 := time.Unix(1000, 0)
	a, _ := fs.acquire(ctx, 1, 0, 0, t0)
	fs.release(a, t0)
	b, _ := fs.acquire(ctx, 2, 0, 0, t0.Add(time.Second))
	fs.release(b, t0.Add(time.Second))
	// a is used again: b is now the least recently used.
	a2, err := fs.acquire(ctx, 1, a.id, 1, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fs.release(a2, t0.Add(2*time.Second))
	c, _ := fs.acquire(ctx, 3, 0, 0, t0.Add(3*time.Second))
	fs.release(c, t0.Add(3*time.Second))
	if n := fs.size(); n != 2 {
		t.Fatalf("%d sessions, want the bound 2", n)
	}
	if _, err := fs.acquire(ctx, 2, b.id, 1, t0.Add(4*time.Second)); !errors.Is(err, &api.Error{Code: api.CodeFetchSessionNotFound}) {
		t.Fatalf("the least recently used session: %v, want it evicted", err)
	}
	if s, err := fs.acquire(ctx, 1, a.id, 2, t0.Add(4*time.Second)); err != nil {
		t.Fatalf("the recently used session: %v", err)
	} else {
		fs.release(s, t0)
	}
}

// TestFetchSessionAnswersOnlyWhatChanged: the first answer carries every
// partition; later ones only those with data, an error or moved positions,
// and a request's changes and removals shape the fetch.
func TestFetchSessionAnswersOnlyWhatChanged(t *testing.T) {
	fs := newFetchSessions(1)
	s, _ := fs.acquire(context.Background(), 2, 0, 0, time.Now())
	if err := s.apply([]brokerapi.ReplicaFetchPartition{changed("a", 0, 10), changed("a", 1, 20), changed("b", 0, 30)}, nil); err != nil {
		t.Fatal(err)
	}
	req := brokerapi.ReplicaFetchRequest{ReplicaID: 2, PartitionMaxBytes: 100}
	spec, order := s.spec(req)
	if len(spec.Partitions) != 3 || spec.ReplicaID != 2 {
		t.Fatalf("spec %+v", spec)
	}
	idle := func(order []brokerapi.TopicPartition, hw int64) []FetchedPartition {
		res := make([]FetchedPartition, len(order))
		for i := range res {
			res[i] = FetchedPartition{HighWatermark: hw, LogStart: 0, LogEnd: 40}
		}
		return res
	}
	if got := s.answer(order, idle(order, 5)); len(got) != 3 {
		t.Fatalf("first answer carries %d partitions, want all 3", len(got))
	}
	spec, order = s.spec(req)
	if got := s.answer(order, idle(order, 5)); len(got) != 0 {
		t.Fatalf("an idle answer carries %d partitions, want none", len(got))
	}
	// One partition gets data, another's HW moves.
	spec, order = s.spec(req)
	res := idle(order, 5)
	res[0].Size = 7
	res[2].HighWatermark = 6
	got := s.answer(order, res)
	if len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("answer picked %v, want [0 2]", got)
	}
	// The next read starts after the partition that had data.
	spec, order = s.spec(req)
	if order[0] != s.order[1] {
		t.Fatalf("the next fetch starts at %v, want %v", order[0], s.order[1])
	}
	// A change moves the offset; a removal takes the partition out.
	if err := s.apply([]brokerapi.ReplicaFetchPartition{changed("a", 1, 25)}, []brokerapi.TopicPartition{tpOf("b", 0)}); err != nil {
		t.Fatal(err)
	}
	spec, _ = s.spec(req)
	offsets := map[string]int64{}
	for _, p := range spec.Partitions {
		offsets[p.Topic+string(rune('0'+p.Partition))] = p.Offset
	}
	if len(offsets) != 2 || offsets["a0"] != 10 || offsets["a1"] != 25 {
		t.Fatalf("after the change and removal the session fetches %v", offsets)
	}
	fs.release(s, time.Now())
}
