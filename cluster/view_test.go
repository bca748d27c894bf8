package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/coordtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// racingCoord changes the tree in the middle of one unwatched Children read
// of BrokersIDsPath: the armed watch fires, and its forwarder forgets the
// node, before the read returns.
type racingCoord struct {
	coord.Coordinator
	mu     sync.Mutex
	during func() // run once inside the next Children(BrokersIDsPath)
}

func (c *racingCoord) Children(ctx context.Context, p string) ([]string, coord.Stat, error) {
	c.mu.Lock()
	f := c.during
	if p == BrokersIDsPath {
		c.during = nil
	}
	c.mu.Unlock()
	if p == BrokersIDsPath && f != nil {
		f()
	}
	return c.Coordinator.Children(ctx, p)
}

func register(t *testing.T, c coord.Coordinator, id int32) {
	t.Helper()
	data, _ := json.Marshal(api.BrokerRegistration{ID: id})
	if _, err := c.Create(context.Background(), BrokerPath(id), data, coord.Ephemeral); err != nil {
		t.Fatal(err)
	}
}

// clusterTree is an in-process coordinator session holding the cluster's
// parent nodes and broker 1.
func clusterTree(t *testing.T) coord.Coordinator {
	t.Helper()
	store, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s := store.Session()
	for _, p := range []string{"/brokers", BrokersIDsPath, TopicsPath} {
		if _, err := s.Create(context.Background(), p, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	register(t, s, 1)
	return s
}

// A watch that fires while the view re-reads the node through it must not
// leave the node cached with no watch: a broker registering later would
// then stay unknown to this view for good (seen as a follower never let
// back into the ISR, because the leader's view said it was not alive).
func TestViewSeesChangesAfterAWatchFiresDuringARead(t *testing.T) {
	s := clusterTree(t)
	ctx := context.Background()

	rc := &racingCoord{Coordinator: s}
	v := NewView(rc, nil)
	v.Start()
	defer v.Close()
	<-v.Loaded()

	// Reload re-reads every node through its armed watch; during that read
	// broker 2 registers, firing the watch, and the read waits until the
	// watch's forwarder has forgotten the node.
	rc.mu.Lock()
	rc.during = func() {
		register(t, s, 2)
		testwait.For(t, 5*time.Second, "the fired watch to be forgotten", func() bool { return !v.isArmed(BrokersIDsPath) })
	}
	rc.mu.Unlock()
	if err := v.Reload(ctx); err != nil {
		t.Fatal(err)
	}

	register(t, s, 3)
	testwait.For(t, 5*time.Second, "the view to list brokers 1, 2 and 3", func() bool {
		return len(v.Current().Brokers) == 3
	})
}

// earlyFireCoord changes the tree right after the next watched Children
// read of BrokersIDsPath has armed its watch, before the read returns to
// the view: the WatchFunc runs before the view has recorded the read.
type earlyFireCoord struct {
	coord.Coordinator
	mu    sync.Mutex
	after func()
}

func (c *earlyFireCoord) ChildrenW(ctx context.Context, p string, w coord.WatchFunc) ([]string, coord.Stat, error) {
	kids, st, err := c.Coordinator.ChildrenW(ctx, p, w)
	c.mu.Lock()
	f := c.after
	if p == BrokersIDsPath {
		c.after = nil
	}
	c.mu.Unlock()
	if p == BrokersIDsPath && f != nil && err == nil {
		f()
	}
	return kids, st, err
}

// A watch that fires before the read that armed it is recorded must not
// leave that read's data cached under a watch that is gone.
func TestViewSeesChangesAfterAWatchFiresBeforeItsReadReturns(t *testing.T) {
	s := clusterTree(t)
	ec := &earlyFireCoord{Coordinator: s, after: func() { register(t, s, 2) }}
	v := NewView(ec, nil)
	v.Start()
	defer v.Close()
	<-v.Loaded()
	testwait.For(t, 5*time.Second, "the view to list brokers 1 and 2", func() bool {
		return len(v.Current().Brokers) == 2
	})
	register(t, s, 3)
	testwait.For(t, 5*time.Second, "the view to list brokers 1, 2 and 3", func() bool {
		return len(v.Current().Brokers) == 3
	})
}

// Refresh returns with every change another session made before it in the
// snapshot, whether the view had the node cached (a partition state
// changed), or not at all (a topic created), and a View reads many changed
// nodes in one refresh; on both coordinators.
func TestViewRefreshSeesOtherSessionsWrites(t *testing.T) {
	coordtest.ForEach(t, func(t *testing.T, open coordtest.Tree) {
		ctx := t.Context()
		w := open()
		for _, p := range []string{"/brokers", BrokersIDsPath, TopicsPath} {
			if _, err := w.Create(ctx, p, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		register(t, w, 1)
		const n = 500
		writeTopic := func(name string) {
			rec, _ := json.Marshal(api.TopicRecord{ID: name, Replicas: make([][]int32, n)})
			ops := []coord.Op{coord.CreateOp(TopicPath(name), rec, 0), coord.CreateOp(PartitionsPath(name), nil, 0)}
			st, _ := json.Marshal(api.PartitionState{Leader: 1, ISR: []int32{1}})
			for p := range int32(n) {
				ops = append(ops, coord.CreateOp(PartitionPath(name, p), nil, 0), coord.CreateOp(PartitionStatePath(name, p), st, 0))
			}
			if _, err := w.Multi(ctx, ops...); err != nil {
				t.Fatal(err)
			}
		}
		writeTopic("a")
		v := NewView(open(), nil)
		v.Start()
		defer v.Close()
		if err := v.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if tm := v.Current().Topics["a"]; tm == nil || len(tm.States) != n {
			t.Fatalf("after Refresh the view holds %v", tm)
		}
		for round := int32(1); round <= 3; round++ {
			// Every state of a changes, and topic b appears: one Refresh
			// brings all of it.
			ops := make([]coord.Op, 0, n)
			for p := range int32(n) {
				st, _ := json.Marshal(api.PartitionState{Leader: 1, LeaderEpoch: round, ISR: []int32{1}})
				ops = append(ops, coord.SetOp(PartitionStatePath("a", p), st, round-1))
			}
			if _, err := w.Multi(ctx, ops...); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("b%d", round)
			writeTopic(name)
			if err := v.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			md := v.Current()
			for p, st := range md.Topics["a"].States {
				if st.LeaderEpoch != round || md.Topics["a"].StateVersions[p] != round {
					t.Fatalf("round %d: after Refresh partition %d is %+v at version %d", round, p, st, md.Topics["a"].StateVersions[p])
				}
			}
			if tm := md.Topics[name]; tm == nil || len(tm.States) != n {
				t.Fatalf("round %d: after Refresh topic %s is %v", round, name, tm)
			}
		}
		// Reload re-reads it all and finds the same.
		before := v.Current()
		if err := v.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		after := v.Current()
		if len(after.Topics) != len(before.Topics) || after.Topics["a"].StateVersions[n-1] != 3 {
			t.Fatalf("after Reload: %d topics, a's last version %d", len(after.Topics), after.Topics["a"].StateVersions[n-1])
		}
	})
}

// A caller that takes Published before reading Current is woken by the
// next publish, and what it reads then holds the change that woke it:
// the gateway's produce retry waits this way for a moved leadership.
func TestViewPublishedWakesWaitersOnTheNextSnapshot(t *testing.T) {
	ctx := t.Context()
	s := clusterTree(t)
	rec, _ := json.Marshal(api.TopicRecord{ID: "a", Replicas: [][]int32{{1}}})
	st, _ := json.Marshal(api.PartitionState{Leader: 1, LeaderEpoch: 1, ISR: []int32{1}})
	if _, err := s.Multi(ctx, coord.CreateOp(TopicPath("a"), rec, 0), coord.CreateOp(PartitionsPath("a"), nil, 0),
		coord.CreateOp(PartitionPath("a", 0), nil, 0), coord.CreateOp(PartitionStatePath("a", 0), st, 0)); err != nil {
		t.Fatal(err)
	}
	v := NewView(s, nil)
	v.Start()
	defer v.Close()
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	epoch := func() int32 {
		if _, st, err := v.Current().Leader("a", 0); err == nil {
			return st.LeaderEpoch
		}
		return -1
	}
	published := v.Published()
	if e := epoch(); e != 1 {
		t.Fatalf("before the change the view names epoch %d", e)
	}
	select {
	case <-published:
		t.Fatal("Published is closed with no new snapshot")
	default:
	}
	// Several waiters share the channel.
	var wg sync.WaitGroup
	seen := make([]int32, 3)
	for i := range seen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ch := v.Published()
				if e := epoch(); e == 2 {
					seen[i] = e
					return
				}
				select {
				case <-ch:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	st2, _ := json.Marshal(api.PartitionState{Leader: 1, LeaderEpoch: 2, ISR: []int32{1}})
	if _, err := s.Set(ctx, PartitionStatePath("a", 0), st2, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-published:
	case <-time.After(30 * time.Second):
		t.Fatal("no publish within 30 s of a state change")
	}
	wg.Wait()
	for i, e := range seen {
		if e != 2 {
			t.Fatalf("waiter %d ended seeing epoch %d, want 2", i, e)
		}
	}
}
