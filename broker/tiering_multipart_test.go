package broker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/tcpproxy"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/tier"
)

// The S3 link stalls in the middle of a multipart upload (a 12 MiB segment
// goes up in 5 MiB parts; the link stalls 64 KiB into the second part's PUT)
// and is then cut. The attempt commits nothing; a later attempt, under a new
// key, uploads the segment; every offset reads back from S3 and the bucket
// holds exactly what the records say.
func TestTieredStallMidMultipart(t *testing.T) {
	cfg := testsvc.S3(t)
	proxy, err := tcpproxy.New("s3", cfg.Endpoint, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bkt, err := tier.NewS3(ctx, tier.S3Options{Endpoint: proxy.Addr(), Bucket: cfg.Bucket, AccessKey: cfg.AccessKey,
		SecretKey: cfg.SecretKey, Region: cfg.Region, PartSize: 5 << 20, Prefix: "multipart-" + hex.EncodeToString(b[:]) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer bkt.Close()
	c := startTiered(t, bkt, 1)
	stall := proxy.CutOnRequest("PUT", 64<<10, "partNumber=2")
	c.createTiered("big", 1, map[string]string{"segment.bytes": "12582912", "local.retention.bytes": "1"})
	// ~13 MiB of records: the first segment closes at 12 MiB and goes up.
	const n = 110000
	pad := strings.Repeat("x", 100)
	for i := 0; i < n; i += 1000 {
		var body bytes.Buffer
		for j := i; j < i+1000; j++ {
			fmt.Fprintf(&body, `{"value":"%d-%s"}`+"\n", j, pad)
		}
		resp, err := http.Post(c.URL+"/v1/topics/big/records", "application/x-ndjson", &body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("produce: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	select {
	case <-stall.Fired:
	case <-time.After(30 * time.Second):
		t.Fatal("the upload never reached its second part")
	}
	time.Sleep(2 * time.Second) // stalled mid-part
	if recs := c.records("big"); len(recs) != 0 {
		t.Fatalf("a record was committed while its upload was stalled: %+v", recs)
	}
	proxy.CutReset() // the stalled connections die
	proxy.Restore()
	p := c.waitInfo("big", "the segment in S3 and trimmed locally", func(p api.PartitionInfo) bool {
		return p.RemoteEndOffset > 0 && p.LocalStartOffset == p.RemoteEndOffset
	})
	recs := c.scrub("big", true)
	if len(recs) != 1 || recs[0].Base != 0 || recs[0].Size < 12<<20-(1<<20) {
		t.Fatalf("records %+v", recs)
	}
	t.Logf("segment [0,%d) of %d bytes in S3 after a stall mid-multipart; local start %d", recs[0].Next, recs[0].Size, p.LocalStartOffset)
	for next := int64(0); next < n; {
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/big/partitions/0/records?offset=%d&max_records=5000&max_bytes=4194304", c.URL, next))
		if err != nil {
			t.Fatal(err)
		}
		var fr api.FetchResponse
		err = json.NewDecoder(resp.Body).Decode(&fr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(fr.Records) == 0 {
			t.Fatalf("fetch at %d: %d %v", next, resp.StatusCode, err)
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"%d-%s"`, next, pad) {
				t.Fatalf("at %d got offset %d", next, r.Offset)
			}
			next++
		}
	}
}
