package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
)

// wsMemberConn is a WebSocket group member as a test client sees it.
type wsMemberConn struct {
	c    *Cluster
	conn *websocket.Conn
	url  string
}

// wsFrame is any server frame of a WebSocket group member.
type wsFrame struct {
	Records     []api.GroupRecord     `json:"records"`
	Cursor      string                `json:"cursor"`
	Assignment  []api.TopicPartition  `json:"assignment"`
	MemberEpoch int32                 `json:"member_epoch"`
	Committed   []api.PartitionOffset `json:"committed"`
	Commit      string                `json:"commit"`
	Error       *api.ErrorDetail      `json:"error"`
}

func dialWSMember(c *Cluster, base, group, query string) (*wsMemberConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/groups/" + group + "/ws?" + query
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(16 << 20)
	return &wsMemberConn{c: c, conn: conn, url: base}, nil
}

func (w *wsMemberConn) read(timeout time.Duration) (wsFrame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, b, err := w.conn.Read(ctx)
	if err != nil {
		return wsFrame{}, err
	}
	var f wsFrame
	err = json.Unmarshal(b, &f)
	return f, err
}

func (w *wsMemberConn) send(v any) error {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.conn.Write(ctx, websocket.MessageText, b)
}

// TestGroupWebSocketGatewayKilled (consumer groups, scenario 5): a
// WebSocket member reads and commits through one gateway while keyed
// producers write through another; that gateway is SIGKILLed (the member's
// session stays at the coordinator: nobody left for it). The client
// reconnects with its instance id to a third gateway within its session:
// it takes its member back, with the same partitions and no rebalance, and
// reads on from its commits. Every acknowledged record is delivered; the
// only records delivered twice are those delivered after the member's last
// acknowledged commit before the kill.
func TestGroupWebSocketGatewayKilled(t *testing.T) {
	c := Start(t, Options{OffsetsTopicPartitions: 12})
	gwA, gwB := c.AddGateway(), c.AddGateway()
	c.CreateTopic(topic, groupPartitions, 3, 2)
	group := groupName(c)
	load := c.StartKeyedLoad(topic, KeyedOptions{URLs: []string{c.URL}, Producers: 2})
	query := "topics=" + topic + "&instance_id=ws-1&credit=1000000&session_timeout_ms=10000"

	type key struct {
		p   int32
		off int64
	}
	delivered := map[key]int{}
	var (
		committed   = map[int32]int64{} // acknowledged commits
		beforeKill  map[int32]int64     // acknowledged commits when the gateway died
		assignment  []api.TopicPartition
		memberEpoch int32
	)
	// consume reads frames, committing each records frame's cursor, until
	// the connection breaks or until stop says so.
	consume := func(w *wsMemberConn, stop func() bool) error {
		for !stop() {
			f, err := w.read(10 * time.Second)
			if err != nil {
				return err
			}
			switch {
			case f.Error != nil && f.Commit == "":
				return fmt.Errorf("stream ended: %s %s", f.Error.Code, f.Error.Message)
			case f.Error != nil:
				c.Logf("commit refused: %s", f.Error.Code)
			case f.Committed != nil:
				for _, o := range f.Committed {
					committed[o.Partition] = max(committed[o.Partition], o.Offset)
				}
			case f.Assignment != nil:
				assignment, memberEpoch = f.Assignment, f.MemberEpoch
			case f.Records != nil:
				for _, r := range f.Records {
					delivered[key{r.Partition, r.Offset}]++
				}
				if err := w.send(map[string]string{"commit": f.Cursor}); err != nil {
					return err
				}
			}
		}
		return nil
	}

	w, err := dialWSMember(c, gwA, group, query)
	if err != nil {
		t.Fatal(err)
	}
	if err := consume(w, func() bool { return len(delivered) >= 300 && len(committed) > 0 }); err != nil {
		t.Fatal(err)
	}
	first, firstEpoch := assignment, memberEpoch
	if len(first) != groupPartitions {
		t.Fatalf("the only member holds %v", first)
	}

	// The member's gateway dies without a word to anyone.
	killed := time.Now()
	for _, p := range c.more {
		if strings.Contains(strings.Join(p.args, " "), strings.TrimPrefix(gwA, "http://")) {
			if err := p.signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = p.wait(10 * time.Second)
		}
	}
	// Drain what the dead connection still buffered; then the break.
	_ = consume(w, func() bool { return false })
	w.conn.CloseNow()
	beforeKill = map[int32]int64{}
	for p, o := range committed {
		beforeKill[p] = o
	}

	w2, err := dialWSMember(c, gwB, group, query)
	if err != nil {
		t.Fatalf("reconnecting through another gateway: %v", err)
	}
	defer w2.conn.CloseNow()
	f, err := w2.read(10 * time.Second)
	if err != nil || f.Assignment == nil {
		t.Fatalf("first frame after reconnecting: %+v %v", f, err)
	}
	back := time.Since(killed)
	if fmt.Sprint(f.Assignment) != fmt.Sprint(first) || f.MemberEpoch <= firstEpoch {
		t.Fatalf("after reconnecting: assignment %v epoch %d, want %v at an epoch above %d", f.Assignment, f.MemberEpoch, first, firstEpoch)
	}
	var d api.GroupDescription
	if err := c.getJSON(gwB+"/v1/groups/"+group, &d, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(d.Members) != 1 || d.Members[0].InstanceID != "ws-1" {
		t.Fatalf("the reconnected member is not the group's only member: %s", DescribeGroup(d))
	}

	// Read on while the load runs a little longer, then catch up.
	deadline := time.Now().Add(3 * time.Second)
	if err := consume(w2, func() bool { return time.Now().After(deadline) }); err != nil {
		t.Fatal(err)
	}
	load.Stop()
	acked := map[key]bool{}
	for _, op := range load.Ops() {
		if op.Outcome == OK {
			for _, off := range op.Offsets {
				acked[key{op.Partition, off}] = true
			}
		}
	}
	caughtUp := func() bool {
		for k := range acked {
			if delivered[k] == 0 {
				return false
			}
		}
		return true
	}
	if err := consume(w2, caughtUp); err != nil {
		missing := 0
		for k := range acked {
			if delivered[k] == 0 {
				missing++
			}
		}
		t.Fatalf("%v; %d acknowledged records never delivered", err, missing)
	}
	twice := 0
	for k, n := range delivered {
		if n > 1 {
			twice++
			if k.off < beforeKill[k.p] {
				t.Errorf("record %d/%d delivered %d times though a commit past it was acknowledged before the kill", k.p, k.off, n)
			}
		}
	}
	t.Logf("figures: seed %d, group %s; %d records acknowledged, %d delivered, %d twice (all after the last commit acknowledged before the kill); member back %v after its gateway died",
		c.Seed, group, len(acked), len(delivered), twice, back.Round(time.Millisecond))
}
