package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A compacted topic, as a consumer sees it through the public API: the
// latest value of every key, at the offset it was written at, in offset
// order; tombstones gone once delete.retention.ms has passed.
func TestCompactedTopicThroughTheAPI(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 3, CleanerInterval: 50 * time.Millisecond})
	c := client{t: t, base: tc.URL}
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "profiles", Partitions: 1, ReplicationFactor: 3, Configs: map[string]string{
		"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "300",
	}}, nil)
	// 10 keys, 30 rounds of updates; keys 0 and 1 end with a tombstone.
	latest := map[string]int64{}
	var res api.ProduceResponse
	for round := 0; round < 30; round++ {
		var recs []map[string]any
		for k := 0; k < 10; k++ {
			recs = append(recs, map[string]any{"key": fmt.Sprintf("k%d", k), "value": map[string]int{"round": round}})
		}
		c.json("POST", "/v1/topics/profiles/records?acks=all", map[string]any{"records": recs}, &res)
		for i, o := range res.Offsets {
			latest[fmt.Sprintf("k%d", i)] = o.Offset
		}
	}
	c.json("POST", "/v1/topics/profiles/records?acks=all", map[string]any{"records": []map[string]any{{"key": "k0", "value": nil}, {"key": "k1", "value": nil}}}, &res)
	tomb := map[string]int64{"k0": res.Offsets[0].Offset, "k1": res.Offsets[1].Offset}
	// Roll past the tombstones so they sit in a closed segment too.
	for round := 0; round < 5; round++ {
		c.json("POST", "/v1/topics/profiles/records?acks=all", map[string]any{"records": []map[string]any{{"key": "other", "value": round}}}, &res)
	}
	end := res.Offsets[0].Offset + 1

	readAll := func() []api.FetchedRecord {
		var out []api.FetchedRecord
		next := int64(0)
		for next < end {
			fr := c.fetch("profiles", 0, fmt.Sprintf("offset=%d&max_records=10000", next))
			out = append(out, fr.Records...)
			if fr.NextOffset <= next {
				t.Fatalf("fetch at %d did not move", next)
			}
			next = fr.NextOffset
		}
		return out
	}
	var left int
	testwait.Check(t, 30*time.Second, "the topic to be compacted", func() error {
		recs := readAll()
		left = len(recs)
		byKey := map[string][]api.FetchedRecord{}
		prev := int64(-1)
		for _, r := range recs {
			if r.Offset <= prev {
				t.Fatalf("offset %d after %d: reordered", r.Offset, prev)
			}
			prev = r.Offset
			byKey[*r.Key] = append(byKey[*r.Key], r)
		}
		done := true
		for k := 2; k < 10; k++ {
			key := fmt.Sprintf("k%d", k)
			rs := byKey[key]
			if len(rs) == 0 || rs[len(rs)-1].Offset != latest[key] || string(rs[len(rs)-1].Value) != `{"round":29}` {
				t.Fatalf("key %s: %+v, want its latest value at offset %d", key, rs, latest[key])
			}
			if len(rs) != 1 {
				done = false
			}
		}
		for key, off := range tomb {
			if rs := byKey[key]; len(rs) != 0 && rs[len(rs)-1].Offset != off {
				t.Fatalf("key %s ends at %d, want its tombstone at %d", key, rs[len(rs)-1].Offset, off)
			}
			if len(byKey[key]) != 0 {
				done = false
			}
		}
		if !done {
			return fmt.Errorf("%d records, k2 has %d versions, k0 %d", len(recs), len(byKey["k2"]), len(byKey["k0"]))
		}
		return nil
	})
	if left >= 300 {
		t.Fatalf("%d records after cleaning", left)
	}
}
