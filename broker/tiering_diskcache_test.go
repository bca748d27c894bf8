package broker_test

import (
	"bytes"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/tier"
)

// A consumer replaying a tiered partition a second time is served from the
// broker's disk cache of remote segments (a file range, written out as a
// local segment's), with the same records, and the leader's metrics show
// it; so is one after the broker restarted on its data directory, without
// reading the object store.
func TestTieredReadBackDiskCache(t *testing.T) {
	dir, err := tier.OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bkt := tier.NewFaultBucket(dir) // counts GETs
	ec := embedtest.Start(t, embedtest.Options{Brokers: 1, Bucket: bkt, TierInterval: 50 * time.Millisecond,
		TuneBroker: func(_ int, o *broker.Options) { o.RemoteCacheBytes = 64 << 20 }})
	c := tcluster{ec, t, bkt}
	c.createTiered("cold", 1, nil)
	c.produceN("cold", 0, 3000)
	c.waitInfo("cold", "local trimming", func(p api.PartitionInfo) bool {
		return p.LocalStartOffset > 1000 && p.RemoteEndOffset >= p.LocalStartOffset
	})
	c.readAll("cold", 0, 3000)
	hits := remoteCacheHits(t, c)
	c.readAll("cold", 0, 3000)
	if again := remoteCacheHits(t, c); again <= hits {
		t.Fatalf("disk-cache hits %d after the first replay, %d after the second", hits, again)
	}

	ec.StopBroker(1)
	ec.StartBroker(1)
	c.waitInfo("cold", "the restarted broker leads", func(p api.PartitionInfo) bool { return p.Leader == 1 })
	gets := bkt.Calls(tier.OpGet) + bkt.Calls(tier.OpGetRange)
	c.readAll("cold", 0, 3000)
	if n := bkt.Calls(tier.OpGet) + bkt.Calls(tier.OpGetRange) - gets; n != 0 {
		t.Fatalf("the restarted broker made %d GETs for a replay its disk cache holds", n)
	}
	if hits := remoteCacheHits(t, c); hits == 0 {
		t.Fatal("no disk-cache hits after the restart")
	}
}

func remoteCacheHits(t *testing.T, c tcluster) int {
	t.Helper()
	resp, err := http.Get("http://" + c.Brokers[0].Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^sluice_tier_remote_cache_hits_total (\d+)$`).FindStringSubmatch(metrics.String())
	if m == nil {
		t.Fatalf("metrics lack the disk cache's hits:\n%s", metrics.String())
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
