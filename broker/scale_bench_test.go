package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/testsvc"
)

// BenchmarkControllerScaleZK times the controller and the View at a few
// thousand partitions, over the real ZooKeeper:
//
//	SLUICE_TEST_SERVICES=zookeeper scripts/with-services.sh \
//	  go test -run '^$' -bench ControllerScaleZK -benchtime 1x ./broker/
//
// 30 topics of 100 partitions, RF 3, on three registered brokers (each
// registration in a session of its own, as a broker process holds it). The
// controller is broker 3; an observer View in another session stands for a
// broker learning its roles, and each figure is the time until that
// observer's snapshot shows the whole change:
//   - create: the 30 topics, one createTopic after another (what 30 admin
//     requests cost);
//   - drain: broker 1 marks its registration shutting down; the controller
//     moves each of its leaderships (controlled shutdown);
//   - failback: the mark is cleared and broker 1 rejoins the ISRs the
//     drain left it out of (one batch of conditional writes, as its
//     leaders' ISR loops would write once it caught up); the
//     preferred-replica pass moves the leaderships back;
//   - kill: broker 1's session ends; the controller moves its leaderships
//     and drops it from every ISR;
//   - failover: the controller's session and broker 3's end together;
//     broker 2, which competed for the role from the start, takes office
//     and moves broker 3's leaderships;
//   - load: a new View in a new session reads the whole tree;
//   - refresh: View.Refresh on the observer with nothing changed.
func BenchmarkControllerScaleZK(b *testing.B) {
	const topics, perTopic = 30, 100
	addr := testsvc.ZooKeeper(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < b.N; i++ {
		chroot := fmt.Sprintf("/scale-%d", time.Now().UnixNano())
		dial := func() coord.Coordinator {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			z, err := coord.DialZK(ctx, coord.ZKOptions{Servers: []string{addr}, Chroot: chroot})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = z.Close() })
			return z
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		regs := map[int32]coord.Coordinator{}
		ctlSess := dial()
		for _, p := range []string{cluster.BrokersIDsPath, cluster.TopicsPath} {
			if err := coord.EnsurePath(ctx, ctlSess, p); err != nil {
				b.Fatal(err)
			}
		}
		for id := int32(1); id <= 3; id++ {
			regs[id] = dial()
			if _, err := regs[id].Create(ctx, cluster.BrokerPath(id), regJSON(id, false), coord.Ephemeral); err != nil {
				b.Fatal(err)
			}
		}
		startController := func(self int32, c coord.Coordinator) (*controller, func()) {
			view := cluster.NewView(c, log)
			view.Start()
			ctl := &controller{self: self, c: c, view: view, log: log, rebalanceEvery: 100 * time.Millisecond,
				maxPartitionsPerBroker: api.DefaultMaxPartitionsPerBroker}
			cctx, ccancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); ctl.run(cctx) }()
			<-view.Loaded()
			if self == 3 {
				for !ctl.isActive() {
					time.Sleep(time.Millisecond)
				}
			}
			return ctl, func() { ccancel(); <-done; view.Close() }
		}
		ctl, stopCtl := startController(3, ctlSess)
		// Broker 2 competes for the role too, from its own session and View,
		// and wins it when broker 3 goes.
		_, stopCandidate := startController(2, dial())
		obs := cluster.NewView(dial(), log)
		obs.Start()
		defer obs.Close()
		changed := obs.Subscribe()
		<-obs.Loaded()
		// wait blocks until the observer's snapshot satisfies done.
		wait := func(what string, done func(*cluster.Metadata) bool) {
			deadline := time.After(5 * time.Minute)
			for !done(obs.Current()) {
				select {
				case <-changed:
				case <-deadline:
					b.Fatalf("timed out waiting for %s", what)
				}
			}
		}
		figures := map[string]time.Duration{}
		measure := func(name string, act func(), done func(*cluster.Metadata) bool) {
			start := time.Now()
			act()
			wait(name, done)
			figures[name] = time.Since(start)
		}

		measure("create", func() {
			// While the duty runs, as the create handler calls it.
			for t := 0; t < topics; t++ {
				req := api.CreateTopicRequest{Name: fmt.Sprintf("t%02d", t), Partitions: perTopic, ReplicationFactor: 3}
				if err := ctl.createTopic(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		}, func(md *cluster.Metadata) bool { return len(md.Topics) == topics })
		led := func(md *cluster.Metadata, id int32) (n int) {
			for _, tm := range md.Topics {
				for _, st := range tm.States {
					if st.Leader == id {
						n++
					}
				}
			}
			return n
		}
		inISR := func(md *cluster.Metadata, id int32) (n int) {
			for _, tm := range md.Topics {
				for _, st := range tm.States {
					if slices.Contains(st.ISR, id) {
						n++
					}
				}
			}
			return n
		}
		moved := led(obs.Current(), 1)
		setReg := func(id int32, shutting bool) {
			_, st, err := regs[id].Get(ctx, cluster.BrokerPath(id))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := regs[id].Set(ctx, cluster.BrokerPath(id), regJSON(id, shutting), st.Version); err != nil {
				b.Fatal(err)
			}
		}
		measure("drain", func() { setReg(1, true) }, func(md *cluster.Metadata) bool { return led(md, 1) == 0 })
		// rejoin puts id back in the ISR of every partition it replicates, as
		// the leaders do once a returning broker has caught up: a drain
		// leaves the broker out of the ISRs, and leadership goes back only
		// to a preferred replica in the ISR.
		rejoin := func(id int32) {
			for attempt := 0; ; attempt++ {
				if err := obs.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				md := obs.Current()
				var ws []stateWrite
				for _, name := range md.TopicNames() {
					tm := md.Topics[name]
					for p, st := range tm.States {
						if !slices.Contains(tm.Record.Replicas[p], id) || slices.Contains(st.ISR, id) {
							continue
						}
						next := st
						next.ISR = append(slices.Clone(st.ISR), id)
						ws = append(ws, stateWrite{topic: name, partition: int32(p), state: next, version: tm.StateVersions[p]})
					}
				}
				if len(ws) == 0 {
					return
				}
				if attempt == 20 {
					b.Fatalf("broker %d is still out of %d ISRs", id, len(ws))
				}
				writeStates(ctx, regs[id], nil, ws) // a write that lost a race is tried again
			}
		}
		measure("failback", func() { setReg(1, false); rejoin(1) }, func(md *cluster.Metadata) bool { return led(md, 1) == moved })
		measure("kill", func() { _ = regs[1].Close() }, func(md *cluster.Metadata) bool {
			return led(md, 1) == 0 && inISR(md, 1) == 0
		})
		moved3 := led(obs.Current(), 3)
		measure("failover", func() {
			stopCtl()
			_ = ctlSess.Close()
			_ = regs[3].Close()
		}, func(md *cluster.Metadata) bool { return led(md, 3) == 0 })
		start := time.Now()
		fresh := cluster.NewView(dial(), log)
		fresh.Start()
		<-fresh.Loaded()
		figures["load"] = time.Since(start)
		fresh.Close()
		start = time.Now()
		if err := obs.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		figures["refresh"] = time.Since(start)
		stopCandidate()
		b.Logf("%d partitions RF 3: create %v; drain %d leaderships %v, failback %v; kill %v; controller failover (%d leaderships) %v; View load %v, refresh %v",
			topics*perTopic, figures["create"].Round(time.Millisecond), moved, figures["drain"].Round(time.Millisecond),
			figures["failback"].Round(time.Millisecond), figures["kill"].Round(time.Millisecond), moved3,
			figures["failover"].Round(time.Millisecond), figures["load"].Round(time.Millisecond), figures["refresh"].Round(time.Millisecond))
		for _, name := range []string{"create", "drain", "failback", "kill", "failover", "load", "refresh"} {
			b.ReportMetric(float64(figures[name].Microseconds())/1000, name+"-ms")
		}
	}
}

func regJSON(id int32, shutting bool) []byte {
	data, _ := json.Marshal(api.BrokerRegistration{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", 9000+id), ShuttingDown: shutting})
	return data
}

// BenchmarkStateWritesZK times, over the real ZooKeeper, partition-state
// changes written three ways:
//
//	SLUICE_TEST_SERVICES=zookeeper scripts/with-services.sh \
//	  go test -run '^$' -bench StateWritesZK -benchtime 1x ./broker/
//
// The changes: broker 1 back in the ISR of each of 3,000 partitions RF 3,
// what the leaders' ISR loops write when it returns; each way is timed until
// another session's View shows them all:
//   - serial: one conditional Set after another, as the ISR loop wrote them;
//   - goroutines: a goroutine per partition, each a Get then a conditional
//     Set, as the hand-backs of a restarted broker were written;
//   - batched: writeStates, as both write now.
func BenchmarkStateWritesZK(b *testing.B) {
	const topics, perTopic = 30, 100
	addr := testsvc.ZooKeeper(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		z, err := coord.DialZK(ctx, coord.ZKOptions{Servers: []string{addr}, Chroot: fmt.Sprintf("/statewrites-%d", time.Now().UnixNano())})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = z.Close() })
		ctl, view := controllerOn(b, z)
		for t := 0; t < topics; t++ {
			if err := ctl.createTopic(ctx, api.CreateTopicRequest{Name: fmt.Sprintf("t%02d", t), Partitions: perTopic, ReplicationFactor: 3}); err != nil {
				b.Fatal(err)
			}
		}
		// changes returns, for each partition, its state with broker 1 in
		// the ISR (in) or out of it.
		changes := func(in bool) []stateWrite {
			if err := view.Refresh(ctx); err != nil {
				b.Fatal(err)
			}
			var out []stateWrite
			md := view.Current()
			for _, name := range md.TopicNames() {
				tm := md.Topics[name]
				for p, st := range tm.States {
					next := st
					next.ISR = nil
					for _, id := range tm.Record.Replicas[p] {
						if (id == 1 && in) || (id != 1 && slices.Contains(st.ISR, id)) {
							next.ISR = append(next.ISR, id)
						}
					}
					out = append(out, stateWrite{topic: name, partition: int32(p), state: next, version: tm.StateVersions[p]})
				}
			}
			return out
		}
		waitAll := func(in bool) {
			for {
				if err := view.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				n := 0
				for _, tm := range view.Current().Topics {
					for _, st := range tm.States {
						if slices.Contains(st.ISR, 1) == in {
							n++
						}
					}
				}
				if n == topics*perTopic {
					return
				}
			}
		}
		ways := []struct {
			name  string
			write func(ws []stateWrite)
		}{
			{"serial", func(ws []stateWrite) {
				for _, w := range ws {
					data, _ := json.Marshal(w.state)
					if _, err := z.Set(ctx, cluster.PartitionStatePath(w.topic, w.partition), data, w.version); err != nil {
						b.Fatal(err)
					}
				}
			}},
			{"goroutines", func(ws []stateWrite) {
				errs := make(chan error, len(ws))
				for _, w := range ws {
					go func() {
						path := cluster.PartitionStatePath(w.topic, w.partition)
						_, st, err := z.Get(ctx, path)
						if err == nil {
							data, _ := json.Marshal(w.state)
							_, err = z.Set(ctx, path, data, st.Version)
						}
						errs <- err
					}()
				}
				for range ws {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			}},
			{"batched", func(ws []stateWrite) {
				for _, r := range writeStates(ctx, z, nil, ws) {
					if r.outcome != writeDone {
						b.Fatalf("a batched write: %v %v", r.outcome, r.err)
					}
				}
			}},
		}
		figures := map[string]time.Duration{}
		for _, w := range ways {
			writeStates(ctx, z, nil, changes(false)) // broker 1 out of every ISR, untimed
			waitAll(false)
			ws := changes(true)
			start := time.Now()
			w.write(ws)
			waitAll(true)
			figures[w.name] = time.Since(start)
		}
		b.Logf("%d ISR changes: serial %v, a goroutine each %v, batched %v (%.0fx, %.0fx faster)", topics*perTopic,
			figures["serial"].Round(time.Millisecond), figures["goroutines"].Round(time.Millisecond), figures["batched"].Round(time.Millisecond),
			float64(figures["serial"])/float64(figures["batched"]), float64(figures["goroutines"])/float64(figures["batched"]))
		for _, w := range ways {
			b.ReportMetric(float64(figures[w.name].Microseconds())/1000, w.name+"-ms")
		}
	}
}
