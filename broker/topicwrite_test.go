package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
)

// controllerOn elects a controller over c, with three live brokers
// registered, and a view of c.
func controllerOn(t testing.TB, c coord.Coordinator) (*controller, *cluster.View) {
	t.Helper()
	ctx := t.Context()
	// What a broker's Start ensures.
	for _, p := range []string{cluster.BrokersIDsPath, cluster.TopicsPath} {
		if err := coord.EnsurePath(ctx, c, p); err != nil {
			t.Fatal(err)
		}
	}
	for id := int32(1); id <= 3; id++ {
		reg, _ := json.Marshal(api.BrokerRegistration{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", id)})
		if _, err := c.Create(ctx, cluster.BrokerPath(id), reg, coord.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	view := cluster.NewView(c, log)
	view.Start()
	t.Cleanup(view.Close)
	ctl := &controller{self: 1, c: c, view: view, log: log, maxPartitionsPerBroker: api.DefaultMaxPartitionsPerBroker}
	if won, err := ctl.elect(ctx); err != nil || !won {
		t.Fatalf("elect: %v %v", won, err)
	}
	return ctl, view
}

// A topic of 5,000 partitions is more than one ZooKeeper request may hold
// (jute.maxbuffer, 1 MiB): it is written in several, and appears whole.
// Its deletion too.
func TestWideTopicZK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zk, err := coord.DialZK(ctx, coord.ZKOptions{Servers: []string{testsvc.ZooKeeper(t)}, Chroot: fmt.Sprintf("/wide-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zk.Close() })
	ctl, view := controllerOn(t, zk)
	const n = 5000
	start := time.Now()
	if err := ctl.createTopic(ctx, api.CreateTopicRequest{Name: "wide", Partitions: n, ReplicationFactor: 1}); err != nil {
		t.Fatalf("creating %d partitions: %v", n, err)
	}
	t.Logf("%d partitions created in %v", n, time.Since(start).Round(time.Millisecond))
	tm := view.Current().Topics["wide"]
	if tm == nil || len(tm.States) != n {
		t.Fatalf("the view holds %v", tm)
	}
	for p, st := range tm.States {
		if st.Leader != tm.Record.Replicas[p][0] || tm.StateVersions[p] != 0 {
			t.Fatalf("partition %d: state %+v version %d", p, st, tm.StateVersions[p])
		}
	}
	if err := ctl.deleteTopic(ctx, "wide"); err != nil {
		t.Fatalf("deleting %d partitions: %v", n, err)
	}
	if _, ok := view.Current().Topics["wide"]; ok {
		t.Fatal("the view still holds the deleted topic")
	}
	if ok, _, err := zk.Exists(ctx, cluster.TopicPath("wide")); err != nil || ok {
		t.Fatalf("the topic's node after deletion: %v %v", ok, err)
	}
}

// A topic whose writing stopped halfway (its controller died) is not
// visible; the next controller finishes it. One whose deletion stopped
// halfway is not visible either, and is finished as a deletion.
func TestHalfWrittenTopics(t *testing.T) {
	ctx := t.Context()
	store, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := store.Session()
	ctl, view := controllerOn(t, c)
	for _, name := range []string{"half", "going"} {
		if err := ctl.createTopic(ctx, api.CreateTopicRequest{Name: name, Partitions: 4, ReplicationFactor: 2}); err != nil {
			t.Fatal(err)
		}
	}
	// "half" loses the states of partitions 2 and 3, as if its writing had
	// stopped after the first two; "going" is marked for deletion and
	// loses partition 0.
	for _, p := range []int32{2, 3} {
		if err := c.Delete(ctx, cluster.PartitionStatePath("half", p), coord.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	data, st, err := c.Get(ctx, cluster.TopicPath("going"))
	if err != nil {
		t.Fatal(err)
	}
	var rec api.TopicRecord
	_ = json.Unmarshal(data, &rec)
	rec.Deleting = true
	data, _ = json.Marshal(rec)
	if _, err := c.Set(ctx, cluster.TopicPath("going"), data, st.Version); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, cluster.PartitionStatePath("going", 0), coord.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := view.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if md := view.Current(); md.Topics["half"] != nil || md.Topics["going"] != nil {
		t.Fatalf("half-written topics are visible: %v", md.Topics)
	}
	// A create of the same name while it is half written: it exists.
	err = ctl.createTopic(ctx, api.CreateTopicRequest{Name: "half", Partitions: 4, ReplicationFactor: 2})
	if api.Classify(err).Code != api.CodeTopicAlreadyExists {
		t.Fatalf("creating a half-written topic again: %v", err)
	}
	if err := ctl.finishPending(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "half finished, going gone", func() bool {
		md := view.Current()
		return md.Topics["half"] != nil && len(md.Topics["half"].States) == 4 && md.Topics["going"] == nil
	})
	if ok, _, err := c.Exists(ctx, cluster.TopicPath("going")); err != nil || ok {
		t.Fatalf("going's node: %v %v", ok, err)
	}
}
