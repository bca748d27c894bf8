package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	sluiceclient "github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/testwait"
)

// Streams with credit waiting at the end of one partition share one long
// poll of it: every one of them gets a record as soon as it lands, and they
// wait on the one poll again after it; when they go, the poll goes.
func TestWSIdleStreamsShareOnePoll(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		c, _, err := websocket.Dial(ctx, wsURL(cl.base, "/v1/topics/hostile/partitions/0/ws?offset=latest&credit=100"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		conns[i] = c
	}
	// Stream 0 of partition 1 too: another partition, another poll.
	other, _, err := websocket.Dial(ctx, wsURL(cl.base, "/v1/topics/hostile/partitions/1/ws?offset=latest&credit=100"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.CloseNow()
	waitFor(t, 20*time.Second, "every stream waiting on a shared poll", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == n+1
	})
	if got := gauge(t, cl.base, "sluice_gateway_ws_tail_polls"); got != 2 {
		t.Fatalf("%v shared polls for %d streams on two partitions, want 2", got, n+1)
	}
	for round := range 3 {
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": round, "partition": 0}}}, nil)
		for i, c := range conns {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("stream %d, round %d: %v", i, round, err)
			}
			if !strings.Contains(string(b), fmt.Sprintf(`"value":%d`, round)) {
				t.Fatalf("stream %d, round %d: frame %s", i, round, b)
			}
		}
		waitFor(t, 20*time.Second, "the streams waiting again", func() bool {
			return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == n+1
		})
	}
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	other.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 20*time.Second, "the shared polls gone", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_polls") == 0 && gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 0
	})
}

// Idle WebSocket group members wait on the same shared polls as plain
// streams, one waiter per assigned partition, instead of each long-polling
// its coordinator: ten groups of one member each on a four-partition topic
// cost four polls, and a record reaches every group's member at once.
func TestWSGroupMembersShareThePolls(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long fault test; the full lane runs it")
	}
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	const groups = 10
	conns := make([]*websocket.Conn, groups)
	for i := range conns {
		conns[i] = dialGroupWS(t, cl.base, fmt.Sprintf("idle-%d", i), "topics=hostile&credit=100&auto_offset_reset=latest&session_timeout_ms=10000")
		if f := readFrame(t, conns[i]); len(f.Assignment) != 4 {
			t.Fatalf("member of idle-%d: first frame %+v, want all four partitions", i, f)
		}
	}
	waitFor(t, 30*time.Second, "every member waiting at its four partitions' ends", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 4*groups
	})
	if got := gauge(t, cl.base, "sluice_gateway_ws_tail_polls"); got != 4 {
		t.Fatalf("%v shared polls for %d members on four partitions, want 4", got, groups)
	}
	for round := range 3 {
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": round, "partition": round}}}, nil)
		for i, c := range conns {
			f := readFrame(t, c)
			if len(f.Records) != 1 || string(f.Records[0].Value) != fmt.Sprint(round) || f.Records[0].Partition != int32(round) {
				t.Fatalf("member of idle-%d, round %d: frame %+v", i, round, f)
			}
		}
		waitFor(t, 30*time.Second, "the members waiting again", func() bool {
			return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 4*groups
		})
	}
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	waitFor(t, 20*time.Second, "the shared polls gone", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_polls") == 0 && gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 0
	})
}

// Idle SSE streams wait on the same shared polls as WebSockets instead of
// each long-polling the leader: twenty partition streams and a topic
// stream over four partitions cost four polls, and a record reaches every
// stream at once.
func TestSSEIdleStreamsShareThePolls(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	sc, err := sluiceclient.New(cl.base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 20
	var streams []*sluiceclient.SSEStream
	for range n {
		s, err := sc.PartitionSSE(ctx, "hostile", 0, "latest", "")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		streams = append(streams, s)
	}
	topic, err := sc.TopicSSE(ctx, "hostile", "latest", "")
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	streams = append(streams, topic)
	waitFor(t, 20*time.Second, "every stream waiting on a shared poll", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == n+4
	})
	if got := gauge(t, cl.base, "sluice_gateway_ws_tail_polls"); got != 4 {
		t.Fatalf("%v shared polls for streams on four partitions, want 4", got)
	}
	for round := range 2 {
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": round, "partition": 0}}}, nil)
		for i, s := range streams {
			ev, err := s.Next()
			if err != nil {
				t.Fatalf("stream %d, round %d: %v", i, round, err)
			}
			if !strings.Contains(string(ev.Data), fmt.Sprintf(`"value":%d`, round)) {
				t.Fatalf("stream %d, round %d: event %q", i, round, ev.Data)
			}
		}
		waitFor(t, 20*time.Second, "the streams waiting again", func() bool {
			return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == n+4
		})
	}
	for _, s := range streams {
		s.Close()
	}
	waitFor(t, 20*time.Second, "the shared polls gone", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_polls") == 0 && gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 0
	})
}

// A stream waiting with credit at its partition's end holds one goroutine
// (its reader), not a writer too: its writer parks until the shared poll
// wakes it, and a record still reaches it at once.
func TestWSIdleStreamHoldsOneGoroutine(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := gauge(t, cl.base, "go_goroutines")
	const n = 100
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		c, _, err := websocket.Dial(ctx, wsURL(cl.base, "/v1/topics/hostile/partitions/2/ws?offset=latest&credit=10"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		conns[i] = c
	}
	waitFor(t, 20*time.Second, "every stream waiting on the shared poll", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == n
	})
	// The shared poll and its broker side, and whatever else the process
	// runs meanwhile, take a few more; two per stream would be 200. A
	// stream is on the poll just before its writer's goroutine returns, so
	// the count is waited for, not read once.
	testwait.Check(t, 20*time.Second, "about one goroutine for each idle stream", func() error {
		if got := gauge(t, cl.base, "go_goroutines") - before; got > n+n/4 {
			return fmt.Errorf("%v more goroutines for %d idle streams", got, n)
		}
		return nil
	})
	cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": []map[string]any{{"value": "wake", "partition": 2}}}, nil)
	for i, c := range conns {
		if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"value":"wake"`) {
			t.Fatalf("stream %d: frame %s, %v", i, b, err)
		}
	}
}

// A stream that joins the shared poll behind it (here: it got its credit
// after another stream had read on and the poll had moved past it) gets
// the records it has not read at once, not when the poll, asking past
// them, next answers or times out.
func TestWSStreamBehindTheSharedPoll(t *testing.T) {
	cl, _ := streamGateway(t, gateway.StreamLimits{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := func(values ...string) {
		recs := make([]map[string]any, len(values))
		for i, v := range values {
			recs[i] = map[string]any{"value": v, "partition": 1}
		}
		cl.json("POST", "/v1/topics/hostile/records", map[string]any{"records": recs}, nil)
	}
	read := func(c *websocket.Conn, values ...string) {
		t.Helper()
		// Well within the shared poll's wait (30 s): a stream that waits
		// for that missed the records.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		var got []string
		for len(got) < len(values) {
			_, b, err := c.Read(rctx)
			if err != nil {
				t.Fatalf("after %q of %q: %v", got, values, err)
			}
			var fr struct{ Records []struct{ Value string } }
			if err := json.Unmarshal(b, &fr); err != nil {
				t.Fatalf("frame %s: %v", b, err)
			}
			for _, r := range fr.Records {
				got = append(got, r.Value)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(values) {
			t.Fatalf("records %q, want %q", got, values)
		}
	}
	behind, _, err := websocket.Dial(ctx, wsURL(cl.base, "/v1/topics/hostile/partitions/1/ws?offset=0&credit=1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer behind.CloseNow()
	ahead, _, err := websocket.Dial(ctx, wsURL(cl.base, "/v1/topics/hostile/partitions/1/ws?offset=0&credit=100"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ahead.CloseNow()
	produce("a")
	read(behind, "a") // and it has no credit left
	read(ahead, "a")
	produce("b", "c")
	read(ahead, "b", "c")
	waitFor(t, 20*time.Second, "the stream ahead waiting on the shared poll past c", func() bool {
		return gauge(t, cl.base, "sluice_gateway_ws_tail_waiters") == 1
	})
	if err := behind.Write(ctx, websocket.MessageText, []byte(`{"credit":10}`)); err != nil {
		t.Fatal(err)
	}
	read(behind, "b", "c")
}
