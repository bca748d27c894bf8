package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// TestControlledShutdown stops two brokers of a loaded cluster the two ways a
// supervisor does: one drained first by `sluice drain` (Kubernetes' preStop
// hook) and then sent SIGTERM, one sent SIGTERM alone (docker compose stop).
// Either way its leaderships move to other in-sync replicas while it is still
// registered, it gets none back (not even from the preferred-leader pass),
// and nothing acknowledged under the acks=all load is lost.
func TestControlledShutdown(t *testing.T) {
	c := Start(t, Options{})
	parts := make([]int32, drainPartitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	c.CreateTopic(topic, drainPartitions, 3, 2)
	c.WaitFullISR(topic, 45*time.Second, false)
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: 3 * time.Second})

	// The pre-stop hook: drain, and the broker is still up and registered,
	// marked shutting down, leading nothing; every partition has a leader.
	x := zkState(c, 0).Leader
	before := zkLeaderships(c, x)
	start := time.Now()
	out, err := exec.Command(Binary(t), "drain", "--broker", c.Broker(x).Addr, "--timeout", "30s").CombinedOutput()
	c.Logf("sluice drain b%d (%v): %s", x, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("sluice drain b%d: %v\n%s", x, err, out)
	}
	if !c.Running(x) {
		t.Fatalf("b%d exited on drain; it should stop only when told to", x)
	}
	reg, ok := zkRegistration(c, x)
	if !ok || !reg.ShuttingDown {
		t.Fatalf("after drain, b%d's registration is %+v (present %v); want present and shutting down", x, reg, ok)
	}
	if n := zkLeaderships(c, x); n != 0 {
		t.Fatalf("after drain, b%d still leads %d partitions (led %d before)", x, n, before)
	}
	checkLed(t, c, parts, x)
	// It handed everything over, so it has left the ISRs: the new leaders'
	// acks=all writes do not wait for a replica about to stop.
	if !reg.Stopping {
		t.Errorf("after drain, b%d's registration is %+v; want it stopping", x, reg)
	}
	for _, p := range parts {
		if st := zkState(c, p); slices.Contains(st.ISR, x) {
			t.Errorf("after drain, p%d's ISR still lists b%d: %+v", p, x, st)
		}
	}
	// Past a preferred-leader pass (every 10 s), it still leads nothing.
	if _, status, ok := c.Poll(12*time.Second, func() (bool, string) {
		n := zkLeaderships(c, x)
		return n > 0, fmt.Sprintf("b%d leads %d partitions", x, n)
	}); ok {
		t.Fatalf("a drained broker got a leadership back: %s", status)
	}
	c.Stop(x)
	if l := c.GrepBrokerLog(x, "controlled shutdown: leaderships handed over", "leaderships_kept=0"); len(l) == 0 {
		t.Errorf("b%d did not log a completed controlled shutdown", x)
	}
	c.Restart(x)
	c.WaitFullISR(topic, 45*time.Second, false)

	// SIGTERM alone: the broker drains itself before its session ends. Its
	// log says the drain completed (it waits for its own view of ZooKeeper
	// to show every movable leadership moved, and only then closes its
	// session); afterwards every partition has a live leader.
	y := zkState(c, 0).Leader
	led := zkLeaderships(c, y)
	c.Stop(y)
	if l := c.GrepBrokerLog(y, "controlled shutdown: leaderships handed over", "leaderships_kept=0"); len(l) == 0 {
		t.Errorf("b%d (led %d partitions) did not log a completed controlled shutdown on SIGTERM", y, led)
	}
	checkLed(t, c, parts, y)
	c.Restart(y)

	load.Stop()
	settle(t, c, h, parts)
}

const drainPartitions = 6

// checkLed fails the test unless every partition has a leader other than
// gone, registered and not shutting down.
func checkLed(t *testing.T, c *Cluster, parts []int32, gone int32) {
	t.Helper()
	for _, p := range parts {
		st := zkState(c, p)
		reg, ok := zkRegistration(c, st.Leader)
		if st.Leader == gone || st.Leader <= 0 || !ok || reg.ShuttingDown {
			t.Errorf("p%d: state %+v, leader registration %+v (present %v): want a live leader other than b%d", p, st, reg, ok, gone)
		}
	}
}

// zkState reads a partition's state from ZooKeeper.
func zkState(c *Cluster, p int32) api.PartitionState {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, _, err := c.Coord().Get(ctx, cluster.PartitionStatePath(topic, p))
	if err != nil {
		c.T.Fatalf("read the state of p%d: %v", p, err)
	}
	var st api.PartitionState
	if err := json.Unmarshal(data, &st); err != nil {
		c.T.Fatalf("state of p%d: %v", p, err)
	}
	return st
}

// zkLeaderships counts the partitions of the test's topic whose state names
// broker id leader.
func zkLeaderships(c *Cluster, id int32) int {
	n := 0
	for p := range int32(drainPartitions) {
		if zkState(c, p).Leader == id {
			n++
		}
	}
	return n
}

// zkRegistration reads /brokers/ids/{id}.
func zkRegistration(c *Cluster, id int32) (api.BrokerRegistration, bool) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, _, err := c.Coord().Get(ctx, cluster.BrokerPath(id))
	if err != nil {
		return api.BrokerRegistration{}, false
	}
	var reg api.BrokerRegistration
	if err := json.Unmarshal(data, &reg); err != nil {
		c.T.Fatalf("registration of b%d: %v", id, err)
	}
	return reg, true
}
