package broker_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// drivenSession is a coordinator session whose session events the test
// sends: the broker sees the link drop and come back while the coordinator
// itself stays reachable, as when a ZooKeeper client reconnects in time.
type drivenSession struct {
	coord.Coordinator
	events chan coord.SessionState
}

func (s *drivenSession) SessionEvents() <-chan coord.SessionState { return s.events }

// startDriven starts a cluster whose brokers' session events the test sends
// through the returned sessions (index broker ID - 1).
func startDriven(t *testing.T, brokers int) (*embedtest.Cluster, []*drivenSession) {
	sessions := make([]*drivenSession, brokers)
	var mu sync.Mutex
	c := embedtest.Start(t, embedtest.Options{
		Brokers: brokers,
		// Far above scheduling stalls under the race detector: a follower
		// dropped from the ISR for being slow is not what these tests look at.
		ReplicaLagTimeMax: 30 * time.Second,
		WrapCoord: func(id int, c coord.Coordinator) coord.Coordinator {
			s := &drivenSession{Coordinator: c, events: make(chan coord.SessionState, 1024)}
			mu.Lock()
			sessions[id-1] = s
			mu.Unlock()
			return s
		},
	})
	return c, sessions
}

// streamGoroutines counts the goroutines running a replication stream's
// loop in this process.
func streamGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "replica.(*Stream).run(") {
			n++
		}
	}
	return n
}

// TestSessionFlapsLeaveOneFollowerPerPartition drives a follower broker's
// coordinator session through many disconnects and reconnects. Each
// reconnect re-reads the metadata and re-applies it, while the broker's
// reconcile loop reacts to the same re-read; a partition must still end up
// on its leader's replication stream exactly once, each broker with one
// stream (to the other), and no stream may outlive the broker.
func TestSessionFlapsLeaveOneFollowerPerPartition(t *testing.T) {
	c, sessions := startDriven(t, 2)
	const partitions = 4
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "r", Partitions: partitions, ReplicationFactor: 2}, 201)
	// Each broker follows the partitions the other leads.
	followers := func() (streams, partitions int) {
		for _, b := range c.Brokers {
			s, p := b.ReplicationStreams()
			streams, partitions = streams+s, partitions+p
		}
		return streams, partitions
	}
	waitFollowers := func(want int) {
		t.Helper()
		testwait.Check(t, 20*time.Second, "the partitions on replication streams", func() error {
			if s, n := followers(); n != want || s != 2 {
				return fmt.Errorf("%d partitions on %d streams, want %d on 2", n, s, want)
			}
			return nil
		})
	}
	waitFollowers(partitions)

	for i := 0; i < 200; i++ {
		s := sessions[i%2]
		s.events <- coord.StateDisconnected
		s.events <- coord.StateConnected
		if i%10 == 9 {
			time.Sleep(5 * time.Millisecond) // let some reconnects finish before the next drop
		}
	}
	// Once the flapping settles every partition is on its stream again.
	waitFollowers(partitions)
	if n := streamGoroutines(); n != 2 {
		t.Fatalf("%d replication stream loops run, want 2", n)
	}
	c.Stop(t)
	if n := streamGoroutines(); n != 0 {
		t.Fatalf("%d replication stream loops outlived the brokers", n)
	}
}

// TestStaleStateDoesNotLiftTheFence: after the coordinator link drops, a
// leader answers NOT_LEADER until metadata re-read after the reconnect is
// applied. Metadata the broker's view publishes meanwhile (here: a topic
// created while the link is down, which the view reads as any change) was not
// read in a session known to be live and must not lift the fence.
func TestStaleStateDoesNotLiftTheFence(t *testing.T) {
	c, sessions := startDriven(t, 1)
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "f", Partitions: 1}, 201)
	b := c.Brokers[0]
	client := brokerapi.NewClient()
	defer client.Close()
	batch, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte("x")}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	produce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := client.Produce(ctx, b.Addr(), "f", 0, "1", time.Second, -1, batch)
		return err
	}
	if err := produce(); err != nil {
		t.Fatalf("produce before the disconnect: %v", err)
	}

	sessions[0].events <- coord.StateDisconnected
	deadline := time.Now().Add(10 * time.Second)
	testwait.Check(t, time.Until(deadline), "produce to be fenced", func() error {
		if err := produce(); !errors.Is(err, api.ErrNotLeader) {
			return fmt.Errorf("produce after the disconnect: %v, want NOT_LEADER", err)
		}
		return nil
	})

	// The broker is the controller: create a topic on it directly (the
	// gateway would wait for the new partition's leader, which stays fenced).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.CreateTopic(ctx, b.Addr(), api.CreateTopicRequest{Name: "g", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	// The reconcile pass that opens g's replica applies every state of that
	// snapshot.
	testwait.For(t, time.Until(deadline), "the new topic's replica to open", func() bool { return b.PartitionLog("g", 0) != nil })
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		if err := produce(); !errors.Is(err, api.ErrNotLeader) {
			t.Fatalf("produce while the link is down, after the view changed: %v, want NOT_LEADER", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	sessions[0].events <- coord.StateConnected
	testwait.Check(t, 10*time.Second, "produce after the reconnect", produce)
}
