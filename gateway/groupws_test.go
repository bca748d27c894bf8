package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// groupFrame is any server frame of a WebSocket group member.
type groupFrame struct {
	Records     []api.GroupRecord     `json:"records"`
	Cursor      string                `json:"cursor"`
	Assignment  []api.TopicPartition  `json:"assignment"`
	MemberEpoch int32                 `json:"member_epoch"`
	Committed   []api.PartitionOffset `json:"committed"`
	Error       *api.ErrorDetail      `json:"error"`
}

func dialGroupWS(t *testing.T, base, group, query string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/groups/" + group + "/ws?" + query
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func readFrame(t *testing.T, c *websocket.Conn) groupFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var f groupFrame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

func sendFrame(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func TestGroupWebSocketMember(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 1})
	c := client{t: t, base: tc.URL}
	c.createTopic("ws-orders", 2)
	c.produceN("ws-orders", 0, 4, "x")
	c.produceN("ws-orders", 1, 4, "x")

	conn := dialGroupWS(t, tc.URL, "wsg", "topics=ws-orders&instance_id=w1&credit=5&session_timeout_ms=10000")
	f := readFrame(t, conn)
	if len(f.Assignment) != 2 || f.MemberEpoch <= 0 {
		t.Fatalf("first frame %+v, want the assignment", f)
	}
	// Credit 5: five records, then nothing until more credit.
	var got []api.GroupRecord
	var cursor string
	for len(got) < 5 {
		f = readFrame(t, conn)
		got = append(got, f.Records...)
		if f.Cursor != "" {
			cursor = f.Cursor
		}
	}
	if len(got) != 5 {
		t.Fatalf("got %d records with credit 5", len(got))
	}
	sendFrame(t, conn, map[string]any{"commit": cursor})
	f = readFrame(t, conn)
	if f.Error != nil || len(f.Committed) != 2 {
		t.Fatalf("commit answer %+v", f)
	}
	var d api.GroupDescription
	c.json("GET", "/v1/groups/wsg", nil, &d)
	if len(d.Members) != 1 || d.Members[0].Kind != api.MemberKindWS || d.Members[0].InstanceID != "w1" {
		t.Fatalf("describe: %+v", d.Members)
	}
	committed := int64(0)
	for _, p := range d.Partitions {
		committed += p.CommittedOffset
	}
	if committed != 5 {
		t.Fatalf("committed %d records' worth, want 5: %+v", committed, d.Partitions)
	}

	// The client comes back with its instance id on a new connection while
	// the old one still stands (its gateway may be dying): the new member
	// takes over the assignment without a rebalance and reads on from the
	// committed offsets; the old one is fenced.
	conn2 := dialGroupWS(t, tc.URL, "wsg", "topics=ws-orders&instance_id=w1&credit=100")
	f = readFrame(t, conn2)
	if len(f.Assignment) != 2 {
		t.Fatalf("after reconnecting: %+v", f)
	}
	if f = readFrame(t, conn); f.Error == nil || f.Error.Code != api.CodeFencedInstanceID {
		t.Fatalf("the replaced connection got %+v, want FENCED_INSTANCE_ID", f)
	}
	var rest []api.GroupRecord
	for len(rest) < 3 {
		f = readFrame(t, conn2)
		rest = append(rest, f.Records...)
	}
	seen := map[[2]int64]bool{}
	for _, r := range append(got, rest...) {
		k := [2]int64{int64(r.Partition), r.Offset}
		if seen[k] {
			t.Fatalf("record %v delivered twice", k)
		}
		seen[k] = true
	}
	if len(seen) != 8 {
		t.Fatalf("%d distinct records, want 8", len(seen))
	}
	conn2.Close(websocket.StatusNormalClosure, "")
	// A clean close leaves the group.
	testwait.Check(t, 5*time.Second, "the closed member to leave the group", func() error {
		c.json("GET", "/v1/groups/wsg", nil, &d)
		if len(d.Members) != 0 {
			return fmt.Errorf("member still in the group after closing: %+v", d.Members)
		}
		return nil
	})
}
