package broker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/tier"
)

// ListOffsets by time finds records that only the object store holds: the
// first record at or after the timestamp, not the local log's start.
func TestOffsetForTimestampInRemoteSegments(t *testing.T) {
	bkt, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := startTiered(t, bkt, 1)
	c.createTiered("timed", 1, map[string]string{"local.retention.bytes": "1"})
	base := time.Now().Add(-time.Hour).UnixMilli()
	// 600 records, one per second of an hour ago: record i at base+i*1000.
	for i := 0; i < 600; i += 50 {
		var recs []map[string]any
		for j := i; j < i+50; j++ {
			recs = append(recs, map[string]any{"value": fmt.Sprintf("v-%d", j), "timestamp": base + int64(j)*1000})
		}
		b, _ := json.Marshal(map[string]any{"records": recs})
		resp, err := http.Post(c.URL+"/v1/topics/timed/records", "application/json", bytes.NewReader(b))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("produce: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	p := c.waitInfo("timed", "the oldest records only in the object store", func(p api.PartitionInfo) bool {
		return p.LocalStartOffset > 100 && p.LogStartOffset == 0
	})
	for _, want := range []int64{0, 37, p.LocalStartOffset - 1, p.LocalStartOffset, 599} {
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/timed/partitions/0/offsets?at=%d", c.URL, base+want*1000-500))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Offset int64 `json:"offset"`
		}
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Offset != want {
			t.Fatalf("offset for the time of record %d: %d (local start %d)", want, res.Offset, p.LocalStartOffset)
		}
	}
}
