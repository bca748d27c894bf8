package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// max_bytes bounds the decoded records of a JSON fetch, not only the
// compressed bytes the broker sends: a small gzip batch that decodes to
// megabytes comes back a few records at a time, every record once, in order.
func TestFetchMaxBytesBoundsDecodedRecords(t *testing.T) {
	c := newCluster(t)
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "squeezed", Partitions: 1, Configs: map[string]string{"compression.type": "gzip"}}, nil)
	big := strings.Repeat("a", 200_000)
	var recs []map[string]any
	for i := 0; i < 20; i++ {
		recs = append(recs, map[string]any{"value": fmt.Sprintf("%d-%s", i, big)})
	}
	c.json("POST", "/v1/topics/squeezed/records", map[string]any{"records": recs}, nil)
	const maxBytes = 1 << 20
	next, answers := int64(0), 0
	for next < 20 {
		fr := c.fetch("squeezed", 0, fmt.Sprintf("offset=%d&max_bytes=%d", next, maxBytes))
		answers++
		var size int
		for i, r := range fr.Records {
			if r.Offset != next+int64(i) {
				t.Fatalf("record %d at offset %d, want %d", i, r.Offset, next+int64(i))
			}
			size += len(r.Value)
		}
		if len(fr.Records) == 0 || size > maxBytes+210_000 {
			t.Fatalf("an answer of %d records, %d bytes decoded, for max_bytes %d", len(fr.Records), size, maxBytes)
		}
		next = fr.NextOffset
	}
	if answers < 4 {
		t.Fatalf("4 MB of records in %d answers of at most 1 MiB", answers)
	}
}
