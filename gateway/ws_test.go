package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// wsConn is a test consumer: it counts the records it has received.
type wsConn struct {
	t    *testing.T
	c    *websocket.Conn
	next int64
}

func dialWS(t *testing.T, base, query string) *wsConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(base, "http") + "/v1/topics/ws/partitions/0/ws?" + query
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsConn{t: t, c: c}
}

// readRecords reads frames until n records arrived; it fails on a frame that
// would exceed n.
func (w *wsConn) readRecords(n int) []api.FetchedRecord {
	w.t.Helper()
	var out []api.FetchedRecord
	for len(out) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		typ, b, err := w.c.Read(ctx)
		cancel()
		if err != nil {
			w.t.Fatalf("after %d of %d records: %v", len(out), n, err)
		}
		var fr api.FetchResponse
		if typ != websocket.MessageText || json.Unmarshal(b, &fr) != nil {
			w.t.Fatalf("bad frame %v %s", typ, b)
		}
		out = append(out, fr.Records...)
		if len(out) > n {
			w.t.Fatalf("got %d records with credit for %d", len(out), n)
		}
		w.next = fr.NextOffset
	}
	return out
}

// expectSilence checks that no frame arrives within d (the consumer has no credit).
func (w *wsConn) expectSilence(d time.Duration) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	typ, b, err := w.c.Read(ctx)
	if err == nil {
		w.t.Fatalf("a %v frame arrived without credit: %s", typ, b)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		w.t.Fatalf("reading: %v", err)
	}
}

func (w *wsConn) grant(n int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"credit":%d}`, n))); err != nil {
		w.t.Fatal(err)
	}
}

func TestWebSocketCredit(t *testing.T) {
	c := newCluster(t)
	c.createTopic("ws", 1)
	for i := 0; i < 10; i++ {
		c.json("POST", "/v1/topics/ws/records", map[string]any{"records": []map[string]any{{"value": i}}}, nil)
	}
	ws := dialWS(t, c.base, "offset=earliest")
	// A failed read ends a coder/websocket connection, so silence is checked
	// on a second connection that then gets closed.
	silent := dialWS(t, c.base, "offset=earliest")
	silent.expectSilence(300 * time.Millisecond)

	ws.grant(3)
	recs := ws.readRecords(3)
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	ws.grant(100)
	recs = ws.readRecords(7)
	if recs[0].Offset != 3 || recs[6].Offset != 9 {
		t.Fatalf("second grant delivered %d..%d", recs[0].Offset, recs[6].Offset)
	}
	// Remaining credit 93: new records stream as they are produced.
	c.json("POST", "/v1/topics/ws/records", map[string]any{"records": []map[string]any{{"value": "live"}}}, nil)
	if recs = ws.readRecords(1); string(recs[0].Value) != `"live"` || recs[0].Offset != 10 {
		t.Fatalf("live record %+v", recs[0])
	}
}

func TestWebSocketInitialCreditAndBinary(t *testing.T) {
	c := newCluster(t)
	c.createTopic("ws", 1)
	c.json("POST", "/v1/topics/ws/records", map[string]any{"records": []map[string]any{{"value": 1}, {"value": 2}}}, nil)
	c.json("POST", "/v1/topics/ws/records", map[string]any{"records": []map[string]any{{"value": 3}}}, nil)

	ws := dialWS(t, c.base, "offset=0&credit=2")
	if recs := ws.readRecords(2); recs[1].Offset != 1 {
		t.Fatalf("initial credit delivered %+v", recs)
	}
	ws.expectSilence(300 * time.Millisecond)

	bin := dialWS(t, c.base, "offset=1&credit=1&format=binary")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := bin.c.Read(ctx)
	if err != nil || typ != websocket.MessageBinary {
		t.Fatalf("binary frame: %v %v", typ, err)
	}
	var offsets []int64
	if _, err := recordbatch.Scan(b, true, func(h recordbatch.Header, raw []byte) error {
		_, recs, err := recordbatch.Decode(raw)
		for _, r := range recs {
			offsets = append(offsets, r.Offset)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Credit 1 from offset 1: the whole first batch (offsets 0-1), nothing more.
	if fmt.Sprint(offsets) != "[0 1]" {
		t.Fatalf("binary frame holds offsets %v", offsets)
	}
}

func TestWebSocketErrors(t *testing.T) {
	c := newCluster(t)
	c.createTopic("ws", 1)
	ws := dialWS(t, c.base, "offset=5&credit=10")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := ws.c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code != api.CodeOffsetOutOfRange {
		t.Fatalf("error frame %s", b)
	}
	_, _, err = ws.c.Read(ctx)
	if websocket.CloseStatus(err) != 4416 {
		t.Fatalf("close status %v (%v), want 4416", websocket.CloseStatus(err), err)
	}

	bad := dialWS(t, c.base, "offset=0")
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	_ = bad.c.Write(wctx, websocket.MessageText, []byte(`{"credit":-4}`))
	_, _, err = bad.c.Read(wctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("bad credit: close status %v (%v)", websocket.CloseStatus(err), err)
	}
}
