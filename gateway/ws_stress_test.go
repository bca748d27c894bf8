package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
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
	next  int64 // the offset the client expects next
	err   error
	ended error // what ended reading once the stream was done
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
	rng := rand.New(rand.NewPCG(1, 2))
	produced := make([]int, partitions)
	for left := partitions * perPart; left > 0; {
		p := rng.IntN(partitions)
		n := min(1+rng.IntN(5), perPart-produced[p])
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
