package broker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/tier"
)

// realS3 opens the test S3 server under a fresh prefix.
func realS3(t *testing.T) tier.Bucket {
	t.Helper()
	cfg := testsvc.S3(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bkt, err := tier.NewS3(ctx, tier.S3Options{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, AccessKey: cfg.AccessKey,
		SecretKey: cfg.SecretKey, Region: cfg.Region, Prefix: "broker-test-" + hex.EncodeToString(b[:]) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bkt.Close() })
	return bkt
}

type tcluster struct {
	*embedtest.Cluster
	t      *testing.T
	bucket tier.Bucket
}

func startTiered(t *testing.T, bkt tier.Bucket, brokers int) tcluster {
	c := embedtest.Start(t, embedtest.Options{Brokers: brokers, Bucket: bkt, TierInterval: 50 * time.Millisecond,
		ReplicaLagTimeMax: time.Second, OrphanGrace: time.Second})
	return tcluster{c, t, bkt}
}

func (c tcluster) createTiered(name string, rf int, extra map[string]string) {
	c.t.Helper()
	configs := map[string]string{"remote.storage.enable": "true", "segment.bytes": "8192", "local.retention.bytes": "16384"}
	for k, v := range extra {
		configs[k] = v
	}
	body, _ := json.Marshal(api.CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: rf, Configs: configs})
	resp, err := http.Post(c.URL+"/v1/topics", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != 201 {
		c.t.Fatalf("create: %v %v", resp, err)
	}
	resp.Body.Close()
}

// produceN writes n records "v-<i>" in requests of 50, acks=all.
func (c tcluster) produceN(topic string, from, n int) {
	c.t.Helper()
	for i := from; i < from+n; i += 50 {
		var recs []map[string]any
		for j := i; j < min(i+50, from+n); j++ {
			recs = append(recs, map[string]any{"value": fmt.Sprintf("v-%d", j)})
		}
		b, _ := json.Marshal(map[string]any{"records": recs})
		resp, err := http.Post(c.URL+"/v1/topics/"+topic+"/records", "application/json", bytes.NewReader(b))
		if err != nil || resp.StatusCode != 200 {
			c.t.Fatalf("produce: %v %v", resp, err)
		}
		resp.Body.Close()
	}
}

func (c tcluster) info(topic string) api.PartitionInfo {
	c.t.Helper()
	resp, err := http.Get(c.URL + "/v1/topics/" + topic)
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

func (c tcluster) waitInfo(topic, what string, ok func(api.PartitionInfo) bool) api.PartitionInfo {
	c.t.Helper()
	var p api.PartitionInfo
	testwait.Check(c.t, 30*time.Second, what, func() error {
		if p = c.info(topic); !ok(p) {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	return p
}

// readAll consumes the partition from offset through the gateway and checks
// the values are v-<offset>, in order, none twice, no gap.
func (c tcluster) readAll(topic string, from, to int64) {
	c.t.Helper()
	next := from
	for next < to {
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/%s/partitions/0/records?offset=%d&max_records=1000", c.URL, topic, next))
		if err != nil {
			c.t.Fatal(err)
		}
		var fr api.FetchResponse
		err = json.NewDecoder(resp.Body).Decode(&fr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			c.t.Fatalf("fetch at %d: %d %v", next, resp.StatusCode, err)
		}
		if len(fr.Records) == 0 {
			c.t.Fatalf("no records at %d (want up to %d)", next, to)
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"v-%d"`, next) {
				c.t.Fatalf("at %d got offset %d value %s", next, r.Offset, r.Value)
			}
			next++
		}
	}
}

// scrub compares the bucket with the records: every record's objects exist
// with the recorded size, records chain without gap or overlap, and no object
// under the partition's prefix lacks a record.
func (c tcluster) scrub(topic string, allowOrphans bool) []tier.RemoteSegment {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := c.records(topic)
	named := map[string]int64{}
	for i, r := range recs {
		if i > 0 && r.Base != recs[i-1].Next {
			c.t.Fatalf("records do not chain: %d..%d then %d..%d", recs[i-1].Base, recs[i-1].Next, r.Base, r.Next)
		}
		named[r.LogKey()], named[r.IndexKey()] = r.Size, r.IndexSize
	}
	seen := map[string]bool{}
	prefix := ""
	if len(recs) > 0 {
		prefix = recs[0].Key[:strings.LastIndexByte(recs[0].Key, '/')+1]
	}
	err := c.bucket.List(ctx, prefix, func(o tier.ObjectInfo) error {
		size, ok := named[o.Key]
		switch {
		case !ok && !allowOrphans:
			return fmt.Errorf("object %s has no record", o.Key)
		case ok && o.Size != size:
			return fmt.Errorf("object %s holds %d bytes, its record says %d", o.Key, o.Size, size)
		}
		seen[o.Key] = true
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	for k := range named {
		if !seen[k] {
			c.t.Fatalf("record names %s, which is missing", k)
		}
	}
	return recs
}

// records reads the remote-segment records from the coordinator.
func (c tcluster) records(topic string) []tier.RemoteSegment {
	c.t.Helper()
	ctx := context.Background()
	sess := c.Store.Session()
	defer sess.Close()
	path := fmt.Sprintf("/brokers/topics/%s/partitions/0/remote", topic)
	names, _, err := sess.Children(ctx, path)
	if err != nil {
		return nil
	}
	sort.Strings(names)
	var out []tier.RemoteSegment
	for _, n := range names {
		data, _, err := sess.Get(ctx, path+"/"+n)
		if err != nil {
			c.t.Fatal(err)
		}
		var r tier.RemoteSegment
		if err := json.Unmarshal(data, &r); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func testTieredReadBack(t *testing.T, bkt tier.Bucket) {
	c := startTiered(t, bkt, 3)
	c.createTiered("cold", 3, nil)
	c.produceN("cold", 0, 3000)
	p := c.waitInfo("cold", "local trimming", func(p api.PartitionInfo) bool {
		return p.LocalStartOffset > 1000 && p.RemoteEndOffset >= p.LocalStartOffset
	})
	if p.LogStartOffset != 0 {
		t.Fatalf("log start %d, want 0 (the first remote segment)", p.LogStartOffset)
	}
	c.readAll("cold", 0, 3000)
	recs := c.scrub("cold", false)
	if len(recs) < 5 || recs[0].Base != 0 {
		t.Fatalf("records %d, first at %d", len(recs), recs[0].Base)
	}
	// The positions are in the leader's metrics as well.
	leaderAddr := ""
	for _, b := range c.Brokers {
		if b.ID() == p.Leader {
			leaderAddr = b.Addr()
		}
	}
	resp, err := http.Get("http://" + leaderAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`sluice_partition_remote_end_offset\{partition="0",topic="cold"\} (\d+)`).FindStringSubmatch(metrics.String())
	if m == nil {
		t.Fatalf("leader metrics lack the remote end:\n%s", metrics.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 1000 || n > 3000 {
		t.Fatalf("remote end in metrics %d", n)
	}
	for _, want := range []string{
		`sluice_partition_log_start_offset{partition="0",topic="cold"} 0`,
		`sluice_partition_leader{partition="0",topic="cold"} 1`,
	} {
		if !strings.Contains(metrics.String(), want) {
			t.Fatalf("leader metrics lack %q", want)
		}
	}
	// Followers trimmed their copies too.
	for _, b := range c.Brokers {
		if start := b.PartitionLog("cold", 0).Offsets().LogStart; start == 0 {
			t.Fatalf("broker %d kept its whole local copy", b.ID())
		}
	}
}

func TestTieredReadBackLocalDir(t *testing.T) {
	bkt, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testTieredReadBack(t, bkt)
}

func TestTieredReadBackS3(t *testing.T) { testTieredReadBack(t, realS3(t)) }

// Uploads that fail (here: the store refuses puts, then verification reads)
// commit nothing; the next attempts, under fresh keys, succeed; the objects of
// the failed attempts are swept as orphans.
func TestTieredUploadFailuresS3(t *testing.T) {
	fb := tier.NewFaultBucket(realS3(t))
	c := startTiered(t, fb, 1)
	fb.FailNext(tier.OpPut, 3, nil)
	fb.FailNext(tier.OpStat, 2, nil)
	c.createTiered("flaky", 1, nil)
	c.produceN("flaky", 0, 2000)
	c.waitInfo("flaky", "tiering despite failures", func(p api.PartitionInfo) bool { return p.RemoteEndOffset > 1000 })
	if fb.Pending(tier.OpPut) != 0 || fb.Pending(tier.OpStat) != 0 {
		t.Fatal("the injected failures were not all hit")
	}
	c.readAll("flaky", 0, 2000)
	// Orphans of the failed attempts go once older than the grace period.
	testwait.Check(t, 20*time.Second, "the orphaned objects to be removed", func() error {
		recs := c.records("flaky")
		named := map[string]bool{}
		for _, r := range recs {
			named[r.LogKey()], named[r.IndexKey()] = true, true
		}
		orphans := 0
		prefix := recs[0].Key[:strings.LastIndexByte(recs[0].Key, '/')+1]
		_ = fb.List(context.Background(), prefix, func(o tier.ObjectInfo) error {
			if !named[o.Key] {
				orphans++
			}
			return nil
		})
		if orphans != 0 {
			return fmt.Errorf("%d orphaned objects remain", orphans)
		}
		return nil
	})
	c.scrub("flaky", false)
}

// A leader change while segments are being uploaded: the new leader goes on
// from the remote end; the records chain, every offset is readable.
func TestTieredLeaderChangeMidUpload(t *testing.T) {
	bkt, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fb := tier.NewFaultBucket(bkt)
	c := startTiered(t, fb, 3)
	c.createTiered("move", 3, nil)
	c.produceN("move", 0, 1500)
	c.waitInfo("move", "some segments remote", func(p api.PartitionInfo) bool { return p.RemoteEndOffset > 0 })
	fb.DelayNext(tier.OpPut, 5, 300*time.Millisecond)
	c.produceN("move", 1500, 1500)
	leader := c.info("move").Leader
	c.StopBroker(int(leader))
	c.waitInfo("move", "a new leader", func(p api.PartitionInfo) bool { return p.Leader >= 0 && p.Leader != leader })
	c.produceN("move", 3000, 500)
	c.waitInfo("move", "tiering under the new leader", func(p api.PartitionInfo) bool { return p.RemoteEndOffset > 2500 })
	c.StartBroker(int(leader))
	c.readAll("move", 0, 3500)
	c.scrub("move", true)
}

// Retention runs while a consumer reads near the log start: reads below the
// new start are OFFSET_OUT_OF_RANGE, reads at or above it succeed with no gap.
func TestTieredRetention(t *testing.T) {
	bkt, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := startTiered(t, bkt, 1)
	c.createTiered("ret", 1, map[string]string{"retention.bytes": "40000"})
	c.produceN("ret", 0, 4000)
	p := c.waitInfo("ret", "remote retention", func(p api.PartitionInfo) bool { return p.LogStartOffset > 0 && p.RemoteEndOffset > p.LogStartOffset })
	resp, err := http.Get(fmt.Sprintf("%s/v1/topics/ret/partitions/0/records?offset=%d", c.URL, p.LogStartOffset-1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 416 {
		t.Fatalf("read below the log start: %d, want 416", resp.StatusCode)
	}
	// Read from the start while retention keeps moving it (more data keeps
	// coming): OFFSET_OUT_OF_RANGE may only answer offsets below the start
	// as it is then, and what is read has no gap.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 4000; i < 6000; i += 50 {
			var recs []map[string]any
			for j := i; j < i+50; j++ {
				recs = append(recs, map[string]any{"value": fmt.Sprintf("v-%d", j)})
			}
			b, _ := json.Marshal(map[string]any{"records": recs})
			resp, err := http.Post(c.URL+"/v1/topics/ret/records", "application/json", bytes.NewReader(b))
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("produce while reading: %v %v", resp, err)
				return
			}
			resp.Body.Close()
		}
	}()
	next, skips := c.info("ret").LogStartOffset, 0
	for next < 6000 {
		// Small reads, so that retention gets to overtake the reader.
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/ret/partitions/0/records?offset=%d&max_records=20&max_wait_ms=200", c.URL, next))
		if err != nil {
			t.Fatal(err)
		}
		var fr api.FetchResponse
		_ = json.NewDecoder(resp.Body).Decode(&fr)
		resp.Body.Close()
		if resp.StatusCode == 416 {
			if start := c.info("ret").LogStartOffset; start <= next {
				t.Fatalf("416 at %d while the log starts at %d", next, start)
			} else {
				next, skips = start, skips+1
			}
			continue
		}
		if resp.StatusCode != 200 {
			t.Fatalf("fetch at %d: %d", next, resp.StatusCode)
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"v-%d"`, next) {
				t.Fatalf("at %d got offset %d value %s (a gap or a wrong record)", next, r.Offset, r.Value)
			}
			next++
		}
	}
	<-done
	t.Logf("read to the end; retention moved the start past the reader %d times", skips)
	c.scrub("ret", true)
}
