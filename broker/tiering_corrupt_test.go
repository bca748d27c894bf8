package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
	"github.com/sluice-io/sluice/tier"
)

func TestTieredCorruptObjectsLocalDir(t *testing.T) {
	bkt, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testTieredCorruptObjects(t, bkt)
}

func TestTieredCorruptObjectsS3(t *testing.T) { testTieredCorruptObjects(t, realS3(t)) }

// testTieredCorruptObjects damages objects of committed segments in the
// bucket (an index entry pointing 1 TiB into its segment, a flipped byte in
// a batch) and consumes the partition through the gateway: the consumer
// reads every record up to the damage, then gets a retriable
// REMOTE_CORRUPT on both fetch routes, the broker's counter moves, and,
// once the objects are put right, it reads on without a gap.
func testTieredCorruptObjects(t *testing.T, bkt tier.Bucket) {
	c := startTiered(t, bkt, 1)
	c.createTiered("rot", 1, nil)
	c.produceN("rot", 0, 3000)
	var recs []tier.RemoteSegment
	c.waitInfo("rot", "three segments only in the bucket", func(p api.PartitionInfo) bool {
		recs = c.records("rot")
		return len(recs) >= 3 && p.LocalStartOffset >= recs[2].Next
	})
	badIndex, badLog := recs[1], recs[2]
	indexObj, logObj, logIndex := c.object(badIndex.IndexKey()), c.object(badLog.LogKey()), c.object(badLog.IndexKey())
	entry := func(index []byte, i int) (offset, pos int64) {
		return int64(binary.BigEndian.Uint64(index[16*i:])), int64(binary.BigEndian.Uint64(index[16*i+8:]))
	}
	far := bytes.Clone(indexObj)
	binary.BigEndian.PutUint64(far[16+8:], 1<<40)
	c.putObject(badIndex.IndexKey(), far)
	badOffset, badPos := entry(logIndex, 1)
	flipped := bytes.Clone(logObj)
	flipped[badPos+recordbatch.HeaderSize+2] ^= 0x20
	c.putObject(badLog.LogKey(), flipped)

	c.consumeToCorruption("rot", 0, badIndex.Base)
	if n := c.corruptReads("index"); n < 1 {
		t.Fatalf("index corruption counted %d times", n)
	}
	c.putObject(badIndex.IndexKey(), indexObj)
	c.consumeToCorruption("rot", badIndex.Base, badOffset)
	if n := c.corruptReads("log"); n < 1 {
		t.Fatalf("log corruption counted %d times", n)
	}
	c.putObject(badLog.LogKey(), logObj)
	c.readAll("rot", 0, 3000)
}

func (c tcluster) object(key string) []byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := c.bucket.Get(ctx, key)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

func (c tcluster) putObject(key string, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.bucket.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		c.t.Fatal(err)
	}
}

// consumeToCorruption reads records from offset on, checking each is
// v-<offset> with no gap, and expects to stop at exactly bad with a
// retriable REMOTE_CORRUPT, from the records and the batches route alike.
func (c tcluster) consumeToCorruption(topic string, from, bad int64) {
	c.t.Helper()
	next := from
	for {
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/%s/partitions/0/records?offset=%d&max_records=1000", c.URL, topic, next))
		if err != nil {
			c.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			c.wantCorrupt(fmt.Sprintf("records at %d", next), resp, body)
			break
		}
		var fr api.FetchResponse
		if err := json.Unmarshal(body, &fr); err != nil || len(fr.Records) == 0 {
			c.t.Fatalf("records at %d: %s %v", next, body, err)
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"v-%d"`, next) {
				c.t.Fatalf("at %d got offset %d value %s", next, r.Offset, r.Value)
			}
			next++
		}
	}
	if next != bad {
		c.t.Fatalf("read [%d, %d) before the error, want [%d, %d)", from, next, from, bad)
	}
	resp, err := http.Get(fmt.Sprintf("%s/v1/topics/%s/partitions/0/batches?offset=%d", c.URL, topic, bad))
	if err != nil {
		c.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.wantCorrupt(fmt.Sprintf("batches at %d", bad), resp, body)
}

func (c tcluster) wantCorrupt(what string, resp *http.Response, body []byte) {
	c.t.Helper()
	var eb api.ErrorBody
	_ = json.Unmarshal(body, &eb)
	if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != api.CodeRemoteCorrupt || !eb.Error.Retriable ||
		resp.Header.Get("X-Sluice-Error-Code") != string(api.CodeRemoteCorrupt) {
		c.t.Fatalf("%s: %d %s, want a retriable REMOTE_CORRUPT 503", what, resp.StatusCode, body)
	}
}

// corruptReads is the leader's sluice_tier_corrupt_reads_total for object.
func (c tcluster) corruptReads(object string) int {
	c.t.Helper()
	resp, err := http.Get("http://" + c.Brokers[0].Addr() + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`sluice_tier_corrupt_reads_total\{object="` + object + `"\} (\d+)`).FindSubmatch(b)
	if m == nil {
		c.t.Fatalf("metrics lack sluice_tier_corrupt_reads_total{object=%q}", object)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
