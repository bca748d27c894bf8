package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

type rcluster struct {
	*embedtest.Cluster
	t *testing.T
}

func startReplicated(t *testing.T) rcluster {
	// A lag limit well above scheduling hiccups under the race detector:
	// these tests stop brokers to take them out of the ISR, and a follower
	// dropped for being slow would make the leader the ISR's only member.
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ReplicaLagTimeMax: 3 * time.Second, LeaderRebalanceInterval: 300 * time.Millisecond})
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "r", Partitions: 1, ReplicationFactor: 3}, 201)
	rc.waitFor("full ISR", func(p api.PartitionInfo) bool { return len(p.ISR) == 3 && !p.Offline })
	return rc
}

func (c rcluster) post(path string, body any, want int) []byte {
	c.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(c.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	if want != 0 && resp.StatusCode != want {
		c.t.Fatalf("POST %s: %d %s, want %d", path, resp.StatusCode, out.Bytes(), want)
	}
	return out.Bytes()
}

// produce writes n records with acks and returns the HTTP status and error code.
func (c rcluster) produce(acks string, n int, tag string) (int, api.Code) {
	c.t.Helper()
	recs := make([]map[string]any, n)
	for i := range recs {
		recs[i] = map[string]any{"value": fmt.Sprintf("%s-%d", tag, i)}
	}
	b, _ := json.Marshal(map[string]any{"records": recs})
	resp, err := http.Post(c.URL+"/v1/topics/r/records?timeout_ms=3000&acks="+acks, "application/json", bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if eb.Error.Message != "" {
		c.t.Logf("produce acks=%s %s: %d %s: %s", acks, tag, resp.StatusCode, eb.Error.Code, eb.Error.Message)
	}
	return resp.StatusCode, eb.Error.Code
}

func (c rcluster) partition() api.PartitionInfo {
	c.t.Helper()
	resp, err := http.Get(c.URL + "/v1/topics/r")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tp api.Topic
	if err := json.NewDecoder(resp.Body).Decode(&tp); err != nil {
		c.t.Fatal(err)
	}
	return tp.Partitions[0]
}

func (c rcluster) waitFor(what string, ok func(api.PartitionInfo) bool) api.PartitionInfo {
	c.t.Helper()
	var p api.PartitionInfo
	testwait.Check(c.t, 20*time.Second, what, func() error {
		if p = c.partition(); !ok(p) {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	return p
}

// replicasAgree checks that every running broker's copy holds the same
// batches (offset, leader epoch, CRC) up to the smallest HW.
func (c rcluster) replicasAgree() {
	c.t.Helper()
	type batchID struct {
		base  int64
		epoch int32
		crc   uint32
	}
	var ref []batchID
	var refBroker int32
	minHW := int64(-1)
	for _, b := range c.Brokers {
		if b == nil {
			continue
		}
		if hw := b.PartitionLog("r", 0).Offsets().HighWatermark; minHW < 0 || hw < minHW {
			minHW = hw
		}
	}
	for _, b := range c.Brokers {
		if b == nil {
			continue
		}
		l := b.PartitionLog("r", 0)
		var got []batchID
		for off := int64(0); off < minHW; {
			res, err := l.Read(off, 1<<20, minHW)
			if err != nil {
				c.t.Fatal(err)
			}
			raw, err := res.ReadAll()
			if err != nil || len(raw) == 0 {
				c.t.Fatalf("broker %d: read at %d: %d bytes, %v", b.ID(), off, len(raw), err)
			}
			_, _ = recordbatch.Scan(raw, true, func(h recordbatch.Header, _ []byte) error {
				got = append(got, batchID{h.BaseOffset, h.PartitionLeaderEpoch, h.CRC})
				return nil
			})
			off = res.NextOffset
		}
		if ref == nil {
			ref, refBroker = got, b.ID()
			continue
		}
		if !slices.Equal(ref, got) {
			c.t.Fatalf("replicas differ below HW %d:\nbroker %d %v\nbroker %d %v", minHW, refBroker, ref, b.ID(), got)
		}
	}
}

func TestReplicationKeepsReplicasIdentical(t *testing.T) {
	c := startReplicated(t)
	for i := 0; i < 20; i++ {
		if status, code := c.produce("all", 10, fmt.Sprint("b", i)); status != 200 {
			t.Fatalf("acks=all produce: %d %s", status, code)
		}
	}
	p := c.waitFor("HW at the log end", func(p api.PartitionInfo) bool { return p.HighWatermark == 200 && p.LogEndOffset == 200 })
	if len(p.ISR) != 3 {
		t.Fatalf("ISR %v", p.ISR)
	}
	c.replicasAgree()
}

func TestMinInsyncReplicas(t *testing.T) {
	c := startReplicated(t)
	leader := c.partition().Leader
	var followers []int32
	for _, id := range []int32{1, 2, 3} {
		if id != leader {
			followers = append(followers, id)
		}
	}
	c.StopBroker(int(followers[0]))
	c.waitFor("ISR of two", func(p api.PartitionInfo) bool { return len(p.ISR) == 2 })
	if status, code := c.produce("all", 5, "two"); status != 200 {
		t.Fatalf("acks=all with ISR 2 and min ISR 2: %d %s", status, code)
	}
	c.StopBroker(int(followers[1]))
	c.waitFor("ISR of one", func(p api.PartitionInfo) bool { return len(p.ISR) == 1 })
	hw := c.partition().HighWatermark
	if status, code := c.produce("all", 5, "one"); status != 503 || code != api.CodeNotEnoughReplicas {
		t.Fatalf("acks=all below min ISR: %d %s, want 503 NOT_ENOUGH_REPLICAS", status, code)
	}
	if p := c.partition(); p.LogEndOffset != hw {
		t.Fatalf("a refused acks=all produce was written: log end %d, HW %d", p.LogEndOffset, hw)
	}
	if status, code := c.produce("1", 5, "acks1"); status != 200 {
		t.Fatalf("acks=1 with the leader alone: %d %s", status, code)
	}
	// Followers come back, catch up and rejoin; acks=all works again.
	c.StartBroker(int(followers[0]))
	c.StartBroker(int(followers[1]))
	c.waitFor("full ISR again", func(p api.PartitionInfo) bool { return len(p.ISR) == 3 })
	if status, code := c.produce("all", 5, "back"); status != 200 {
		t.Fatalf("acks=all after recovery: %d %s", status, code)
	}
	c.waitFor("HW at the log end", func(p api.PartitionInfo) bool { return p.HighWatermark >= 0 && p.HighWatermark == p.LogEndOffset })
	c.replicasAgree()
}

func TestLeaderFailoverAndPreferredLeaderReturns(t *testing.T) {
	c := startReplicated(t)
	for i := 0; i < 5; i++ {
		if status, code := c.produce("all", 10, fmt.Sprint("pre", i)); status != 200 {
			t.Fatalf("produce: %d %s", status, code)
		}
	}
	before := c.waitFor("full ISR before the failover", func(p api.PartitionInfo) bool { return len(p.ISR) == 3 })
	c.StopBroker(int(before.Leader))
	// A new leader answering: the metadata names it before it has applied
	// the leadership, and until then the partition's HW reads -1.
	after := c.waitFor("a new leader", func(p api.PartitionInfo) bool {
		return p.Leader >= 0 && p.Leader != before.Leader && p.HighWatermark >= 0
	})
	if after.LeaderEpoch <= before.LeaderEpoch || slices.Contains(after.ISR, before.Leader) {
		t.Fatalf("after failover %+v (before %+v)", after, before)
	}
	if after.HighWatermark < 50 {
		t.Fatalf("new leader's HW %d: acknowledged records missing", after.HighWatermark)
	}
	// A sender still routing with the old epoch is fenced, and writes nothing.
	stale, _ := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`"stale"`)}}, recordbatch.Options{})
	_, err := brokerapi.NewClient().Produce(context.Background(), c.Brokers[after.Leader-1].Addr(), "r", 0, "1", time.Second, before.LeaderEpoch, stale)
	if !errors.Is(err, api.ErrFencedLeaderEpoch) {
		t.Fatalf("produce in the old epoch: %v, want FENCED_LEADER_EPOCH", err)
	}
	if p := c.partition(); p.LogEndOffset != after.LogEndOffset {
		t.Fatalf("a fenced produce was written: log end %d, was %d", p.LogEndOffset, after.LogEndOffset)
	}
	for i := 0; i < 5; i++ {
		if status, code := c.produce("all", 10, fmt.Sprint("post", i)); status != 200 {
			t.Fatalf("produce after failover: %d %s", status, code)
		}
	}
	// The old leader returns as a follower, catches up, and (being the
	// preferred replica) gets its leadership back.
	c.StartBroker(int(before.Leader))
	back := c.waitFor("preferred leader back", func(p api.PartitionInfo) bool {
		return p.Leader == before.Leader && len(p.ISR) == 3 && p.HighWatermark >= 0 && p.HighWatermark == p.LogEndOffset
	})
	if back.LeaderEpoch <= after.LeaderEpoch || back.LogEndOffset != 100 {
		t.Fatalf("after return %+v", back)
	}
	c.replicasAgree()
}
