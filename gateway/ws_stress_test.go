package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	sluiceclient "github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/recordbatch"
)

// Stress of the parked WebSocket stream: many streams over four
// partitions, JSON and binary, whose clients grant credit in small bursts
// (often only once the last is spent, so the writer parks for credit)
// while records are produced in small batches (so it parks on the shared
// poll between them). Every stream gets every record once, in order; then
// half the clients drop their connections without a close handshake while
// their streams wait, and the gateway closes with the others parked:
// Close returns, each of those gets 1001, and no goroutine stays behind.

// stressRead is what one stress client saw.
type stressRead struct {
	next int64 // the offset the client expects next
	err  error
}

// stressClient reads a stream of partition records [0, want), granting
// credit in bursts of 1 to 8 records whenever what it granted is spent
// (and now and then before), and checks that each record comes once, in
// order. It returns once it has them all, keeping the connection open.
func stressClient(ctx context.Context, c *websocket.Conn, binary bool, credit int64, want int64, rng *rand.Rand) stressRead {
	var st stressRead
	grant := func() error {
		n := int64(1 + rng.IntN(8))
		if credit < 0 {
			n -= credit // a binary frame may overdraw by less than a batch
		}
		credit += n
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.Write(wctx, websocket.MessageText, fmt.Appendf(nil, `{"credit":%d}`, n))
	}
	for st.next < want {
		if credit <= 0 || rng.IntN(8) == 0 {
			if err := grant(); err != nil {
				st.err = fmt.Errorf("at offset %d: granting: %w", st.next, err)
				return st
			}
		}
		// Frames come as soon as there are records and credit: a read
		// that waits this long found a stream that missed its wake-up.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		typ, b, err := c.Read(rctx)
		cancel()
		if err != nil {
			st.err = fmt.Errorf("at offset %d with credit %d: %w", st.next, credit, err)
			return st
		}
		var offsets []int64
		switch {
		case binary && typ == websocket.MessageBinary:
			_, err = recordbatch.Scan(b, true, func(_ recordbatch.Header, raw []byte) error {
				_, recs, err := recordbatch.Decode(raw)
				for _, r := range recs {
					offsets = append(offsets, r.Offset)
				}
				return err
			})
		case !binary && typ == websocket.MessageText:
			var fr api.FetchResponse
			if err = json.Unmarshal(b, &fr); err == nil && fr.Records == nil {
				err = fmt.Errorf("not a records frame: %s", b)
			}
			for _, r := range fr.Records {
				offsets = append(offsets, r.Offset)
				if string(r.Value) != fmt.Sprint(r.Offset) {
					err = fmt.Errorf("record %d holds %s", r.Offset, r.Value)
				}
			}
		default:
			err = fmt.Errorf("a %v frame: %.200s", typ, b)
		}
		if err != nil {
			st.err = fmt.Errorf("at offset %d: %w", st.next, err)
			return st
		}
		first := true
		for _, off := range offsets {
			// A binary frame starts with the whole batch that holds the
			// offset asked for: records before it only there.
			if binary && first && off < st.next {
				continue
			}
			first = false
			if off != st.next {
				st.err = fmt.Errorf("record %d where %d was due (frame %v)", off, st.next, offsets)
				return st
			}
			st.next++
			credit--
		}
		if !binary && credit < 0 {
			st.err = fmt.Errorf("a frame of %d records took the credit to %d", len(offsets), credit)
			return st
		}
	}
	return st
}

func TestWSStressParkAndWake(t *testing.T) {
	const (
		streams    = 24
		partitions = 4
		perPart    = 150
	)
	cl, gw := streamGateway(t, gateway.StreamLimits{MaxConnectionsPerIP: 2 * streams})
	g0, _ := settle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type stream struct {
		c      *websocket.Conn
		binary bool
		p      int
		done   chan stressRead
	}
	ss := make([]*stream, streams)
	for i := range ss {
		s := &stream{binary: i%2 == 1, p: i % partitions, done: make(chan stressRead, 1)}
		credit := int64(i % 3) // some start with none: parked for credit from the start
		q := fmt.Sprintf("/v1/topics/hostile/partitions/%d/ws?offset=0&credit=%d", s.p, credit)
		if s.binary {
			q += "&format=binary"
		}
		c, _, err := websocket.Dial(ctx, wsURL(cl.base, q), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		s.c = c
		ss[i] = s
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		go func() { s.done <- stressClient(ctx, c, s.binary, credit, perPart, rng) }()
	}
	// Records in batches of 1 to 5, the partitions in turn, while the
	// streams read.
	produceScattered(cl, rand.New(rand.NewPCG(1, 2)), partitions, perPart, 5)
	for i, s := range ss {
		if st := <-s.done; st.err != nil {
			t.Fatalf("stream %d (partition %d, binary %v): %v", i, s.p, s.binary, st.err)
		}
	}

	// Every stream now waits: for credit or at its partition's end. Half
	// the clients go without a close handshake; their streams end and
	// give back their places.
	kept := 0
	for i, s := range ss {
		if i%2 == 0 {
			s.c.CloseNow()
			continue
		}
		kept++
	}
	waitFor(t, 20*time.Second, "the dropped streams gone", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_connections") == float64(kept)
	})

	// The gateway closes with the others parked: each gets 1001.
	ended := make(chan error, streams)
	for i, s := range ss {
		if i%2 == 1 {
			go func() {
				_, _, err := s.c.Read(ctx)
				ended <- err
			}()
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- gw.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	for range kept {
		if err := <-ended; websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("a parked stream ended with %v, want close 1001", err)
		}
	}
	for _, s := range ss {
		s.c.CloseNow()
	}
	waitGoroutines(t, g0, 5, 20*time.Second)
}

// SSE streams, partition and topic ones, wait on the same shared polls
// between the records produced while they read: each gets every record of
// its partitions once, in order; some clients then go, and the gateway
// closes under the others, leaving no goroutine behind.
func TestSSEStressSharedPolls(t *testing.T) {
	const (
		partitions = 4
		perPart    = 100
	)
	cl, gw := streamGateway(t, gateway.StreamLimits{})
	g0, _ := settle()
	sc, err := sluiceclient.New(cl.base)
	if err != nil {
		t.Fatal(err)
	}
	type stream struct {
		name string
		s    *sluiceclient.SSEStream
		want map[int32]bool // the partitions it reads
		done chan error
	}
	var ss []*stream
	open := func(name string, want map[int32]bool, o func(ctx context.Context) (*sluiceclient.SSEStream, error)) {
		// A stream that gets nothing for 15 s (half the shared poll's
		// wait) missed a wake-up: its read is cut.
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := o(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		st := &stream{name: name, s: s, want: want, done: make(chan error, 1)}
		ss = append(ss, st)
		go func() {
			stall := time.AfterFunc(15*time.Second, cancel)
			defer stall.Stop()
			next := map[int32]int64{}
			left := perPart * len(want)
			for left > 0 {
				ev, err := s.Next()
				if err != nil {
					st.done <- fmt.Errorf("%d records short: %w", left, err)
					return
				}
				stall.Reset(15 * time.Second)
				r, err := ev.Record()
				if err != nil || !want[r.Partition] || r.Offset != next[r.Partition] || string(r.Value) != fmt.Sprint(r.Offset) {
					st.done <- fmt.Errorf("record %+v (%v) where partition %d offset %d was due", r, err, r.Partition, next[r.Partition])
					return
				}
				next[r.Partition]++
				left--
			}
			st.done <- nil
		}()
	}
	for i := range 3 * partitions {
		p := int32(i % partitions)
		open(fmt.Sprintf("partition %d #%d", p, i/partitions), map[int32]bool{p: true}, func(ctx context.Context) (*sluiceclient.SSEStream, error) {
			return sc.PartitionSSE(ctx, "hostile", p, "0", "")
		})
	}
	all := map[int32]bool{0: true, 1: true, 2: true, 3: true}
	for i := range 2 {
		open(fmt.Sprintf("topic #%d", i), all, func(ctx context.Context) (*sluiceclient.SSEStream, error) {
			return sc.TopicSSE(ctx, "hostile", "earliest", "")
		})
	}
	produceScattered(cl, rand.New(rand.NewPCG(5, 6)), partitions, perPart, 4)
	for _, s := range ss {
		if err := <-s.done; err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	// Every stream waits at the end of its partitions; half go.
	waitFor(t, 20*time.Second, "every stream waiting on a shared poll", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 3*partitions+2*partitions
	})
	kept := 0
	for i, s := range ss {
		if i%2 == 0 {
			s.s.Close()
			continue
		}
		kept++
	}
	waitFor(t, 20*time.Second, "the closed streams gone", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_connections") == float64(kept)
	})
	closed := make(chan error, 1)
	go func() { closed <- gw.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return")
	}
	for i, s := range ss {
		if i%2 == 1 {
			if _, err := s.s.Next(); err == nil {
				t.Errorf("%s: an event after the gateway closed", s.name)
			}
		}
		s.s.Close()
	}
	waitGoroutines(t, g0, 5, 20*time.Second)
}

// Clients that come and go at any moment: they connect, maybe read,
// grant credit and drop the connection without a close handshake right
// behind it, while records are produced. Every stream ends with its
// connection, parked or running, and takes its place, its shared-poll
// waiter and its goroutines with it.
func TestWSStressChurn(t *testing.T) {
	const clients, rounds = 8, 25
	// Places come back a moment after their connections drop: room for
	// more than one connection a client.
	cl, gw := streamGateway(t, gateway.StreamLimits{MaxConnectionsPerIP: 100 * clients})
	g0, _ := settle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for range rounds {
				q := fmt.Sprintf("/v1/topics/hostile/partitions/%d/ws?offset=%s&credit=%d", rng.IntN(4), []string{"earliest", "latest"}[rng.IntN(2)], rng.IntN(3))
				if rng.IntN(2) == 0 {
					q += "&format=binary"
				}
				c, _, err := websocket.Dial(ctx, wsURL(cl.base, q), nil)
				if err != nil {
					errs <- err
					return
				}
				for range rng.IntN(4) {
					switch rng.IntN(3) {
					case 0:
						_ = c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"credit":%d}`, 1+rng.IntN(5)))
					case 1:
						rctx, rcancel := context.WithTimeout(ctx, time.Duration(rng.IntN(3))*time.Millisecond)
						_, _, _ = c.Read(rctx) // a read cut short ends the connection too
						rcancel()
					case 2:
						runtime.Gosched()
					}
				}
				c.CloseNow()
			}
			errs <- nil
		}()
	}
	rng := rand.New(rand.NewPCG(8, 9))
	finished := 0
	for finished < clients {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		default:
			cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": 1, "partition": rng.IntN(4)}}}, nil)
		}
	}
	waitFor(t, 30*time.Second, "every stream gone with its connection", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_connections") == 0 &&
			gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 0 && gauge(t, cl.base, "sluice_gateway_ws_tail_polls") == 0
	})
	waitFor(t, 20*time.Second, "no stream's goroutine left", func() bool {
		return !goroutineIn("gateway.(*wsStream).") && !goroutineIn("gateway.(*tails).poll(")
	})
	// What else stays until the gateway closes is its idle broker
	// connections, more of them after the churn than before.
	if err := gw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
	waitGoroutines(t, g0, 5, 20*time.Second)
}

// goroutineIn reports whether a goroutine runs a function whose name holds
// name.
// produceScattered produces perPart records to each of the first
// partitions of topic hostile, in batches of 1 to maxBatch to a partition
// picked at random, each record's value its index in its partition.
func produceScattered(cl client, rng *rand.Rand, partitions, perPart, maxBatch int) {
	produced := make([]int, partitions)
	for left := partitions * perPart; left > 0; {
		p := rng.IntN(partitions)
		n := min(1+rng.IntN(maxBatch), perPart-produced[p])
		if n == 0 {
			continue
		}
		recs := make([]map[string]any, n)
		for j := range recs {
			recs[j] = map[string]any{"value": produced[p] + j, "partition": p}
		}
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": recs}, nil)
		produced[p] += n
		left -= n
	}
}

func goroutineIn(name string) bool {
	buf := make([]byte, 16<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), name)
}
