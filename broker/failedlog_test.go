package broker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/commitlog/faultfs"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A replica whose log a disk error made read-only is handed over at once:
// the controller moves the leadership it held to an in-sync replica and
// drops it from the ISR without waiting for the lag timeout, acks=all
// produces go on, and the topic and cluster views show it offline with the
// reason. With no other replica (RF 1) the partition shows offline.
func TestFailedLogIsHandedOver(t *testing.T) {
	var ffs *faultfs.FS
	// A lag limit far above the test's waits: the ISR must shrink because
	// the log failed, not because the follower fell behind.
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ReplicaLagTimeMax: time.Minute,
		TuneBroker: func(id int, o *broker.Options) {
			if id != 1 {
				return
			}
			ffs = embedtest.FaultFS(t, o)
			o.FailedLogRecheck = time.Hour // the test asks for the recheck
		}})
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "df", Partitions: 3, ReplicationFactor: 3,
		Configs: map[string]string{"min.insync.replicas": "2"}}, 201)
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "solo", Partitions: 3, ReplicationFactor: 1}, 201)
	var led, solo int32 = -1, -1
	testwait.Check(t, 20*time.Second, "df fully replicated, a partition of each topic on broker 1", func() error {
		df, s := topic(t, c.URL, "df"), topic(t, c.URL, "solo")
		led, solo = -1, -1
		for _, p := range df.Partitions {
			if len(p.ISR) != 3 || p.Offline {
				return fmt.Errorf("df: %+v", p)
			}
			if p.Leader == 1 {
				led = p.Partition
			}
		}
		for _, p := range s.Partitions {
			if p.Offline {
				return fmt.Errorf("solo: %+v", p)
			}
			if p.Leader == 1 {
				solo = p.Partition
			}
		}
		if led < 0 || solo < 0 {
			return fmt.Errorf("broker 1 leads df/%d and solo/%d", led, solo)
		}
		return nil
	})
	if code := produceTo(t, c.URL, "df", led, "before"); code != http.StatusOK {
		t.Fatalf("acks=all produce before the fault: %d", code)
	}

	// The disk fills: broker 1's next write fails half-way.
	ffs.FailNextWrite(syscall.ENOSPC)
	_ = produceTo(t, c.URL, "df", led, "during") // its answer depends on where the write failed
	testwait.Check(t, 10*time.Second, "df's failed replica on broker 1 handed over and shown offline", func() error {
		for _, p := range topic(t, c.URL, "df").Partitions {
			if !offlineFor(p, 1) {
				continue
			}
			if p.Leader == 1 || slices.Contains(p.ISR, 1) || p.Offline {
				return fmt.Errorf("df/%d with a failed replica on broker 1: %+v", p.Partition, p)
			}
			return nil
		}
		return fmt.Errorf("no df partition shows broker 1's replica failed: %+v", topic(t, c.URL, "df").Partitions)
	})
	// Whichever log the fault hit, the partition broker 1 led is either
	// failed there (and so led elsewhere now) or still healthy: acks=all
	// produces to it go on.
	testwait.Check(t, 10*time.Second, "acks=all produce to df/"+fmt.Sprint(led), func() error {
		if code := produceTo(t, c.URL, "df", led, "after"); code != http.StatusOK {
			return fmt.Errorf("status %d", code)
		}
		return nil
	})
	// Broker 1 serves its healthy logs: ready, its storage degraded.
	var h struct {
		Ready            bool     `json:"ready"`
		Storage          string   `json:"storage"`
		FailedPartitions []string `json:"failed_partitions"`
	}
	getJSON(t, "http://"+c.Brokers[0].Addr()+"/readyz", &h)
	if !h.Ready || h.Storage != "degraded" || len(h.FailedPartitions) == 0 {
		t.Fatalf("broker 1's /readyz with a failed log: %+v", h)
	}
	var ci api.ClusterInfo
	getJSON(t, c.URL+"/v1/cluster", &ci)
	for _, b := range ci.Brokers {
		if b.ID == 1 && (len(b.FailedLogs) == 0 || b.FailedLogs[0].Reason != api.ReasonStorageError || b.FailedLogs[0].Error == "") {
			t.Fatalf("the cluster view's broker 1: %+v", b)
		}
	}

	// The RF 1 partition on broker 1: nowhere to go, so it shows offline.
	ffs.FailNextWrite(syscall.ENOSPC)
	_ = produceTo(t, c.URL, "solo", solo, "during")
	testwait.Check(t, 10*time.Second, fmt.Sprintf("solo/%d offline with its failed replica", solo), func() error {
		for _, p := range topic(t, c.URL, "solo").Partitions {
			if p.Partition == solo && (!p.Offline || !offlineFor(p, 1)) {
				return fmt.Errorf("%+v", p)
			}
		}
		return nil
	})

	// The disk has room again: asked to, broker 1 probes it, opens the
	// failed logs again through recovery, and its replicas serve again:
	// the RF 1 partition with every record it acknowledged, the RF 3 one
	// back in the ISR (its leader takes it back once it caught up).
	resp, err := http.Post("http://"+c.Brokers[0].Addr()+"/internal/v1/storage/recheck", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("recheck: %d", resp.StatusCode)
	}
	testwait.Check(t, 20*time.Second, "broker 1's logs open again, its replicas in sync", func() error {
		for _, name := range []string{"df", "solo"} {
			for _, p := range topic(t, c.URL, name).Partitions {
				if p.Offline || len(p.OfflineReplicas) > 0 || len(p.ISR) != len(p.Replicas) {
					return fmt.Errorf("%s/%d: %+v", name, p.Partition, p)
				}
			}
		}
		getJSON(t, c.URL+"/v1/cluster", &ci)
		for _, b := range ci.Brokers {
			if len(b.FailedLogs) > 0 {
				return fmt.Errorf("broker %d still reports %+v", b.ID, b.FailedLogs)
			}
		}
		return nil
	})
	if code := produceTo(t, c.URL, "solo", solo, "healed"); code != http.StatusOK {
		t.Fatalf("produce to the re-opened RF 1 partition: %d", code)
	}
}

// offlineFor reports whether p lists broker's replica offline for a
// storage error, with the error's text.
func offlineFor(p api.PartitionInfo, broker int32) bool {
	for _, o := range p.OfflineReplicas {
		if o.Broker == broker && o.Reason == api.ReasonStorageError && o.Error != "" {
			return true
		}
	}
	return false
}

func topic(t *testing.T, base, name string) api.Topic {
	t.Helper()
	var tp api.Topic
	getJSON(t, base+"/v1/topics/"+name, &tp)
	return tp
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// produceTo writes one acks=all record to a partition and returns the status.
func produceTo(t *testing.T, base, topic string, partition int32, value string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"records": []map[string]any{{"value": value, "partition": partition}}})
	resp, err := http.Post(base+"/v1/topics/"+topic+"/records?acks=all&timeout_ms=3000", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if eb.Error.Code != "" {
		t.Logf("produce to %s/%d: %d %s: %s", topic, partition, resp.StatusCode, eb.Error.Code, eb.Error.Message)
	}
	return resp.StatusCode
}

// Below the free-space watermark a broker refuses leader appends and hands
// every replica over as it does failed logs, before a write can fail
// half-way on a full disk; above it again its replicas rejoin.
func TestLowDiskSpaceHandsOver(t *testing.T) {
	var free atomic.Uint64
	free.Store(10 << 30)
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ReplicaLagTimeMax: time.Minute,
		TuneBroker: func(id int, o *broker.Options) {
			if id == 1 {
				o.MinFreeBytes = 256 << 20
				o.FreeSpace = func() (uint64, uint64, error) { return free.Load(), 20 << 30, nil }
			}
		}})
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "df", Partitions: 3, ReplicationFactor: 3}, 201)
	var led int32 = -1
	testwait.Check(t, 20*time.Second, "df fully replicated, a partition led by broker 1", func() error {
		led = -1
		for _, p := range topic(t, c.URL, "df").Partitions {
			if len(p.ISR) != 3 {
				return fmt.Errorf("%+v", p)
			}
			if p.Leader == 1 {
				led = p.Partition
			}
		}
		if led < 0 {
			return fmt.Errorf("broker 1 leads nothing")
		}
		return nil
	})

	free.Store(100 << 20) // below 256 MiB
	testwait.Check(t, 15*time.Second, "broker 1 handed every replica over", func() error {
		for _, p := range topic(t, c.URL, "df").Partitions {
			if p.Leader == 1 || slices.Contains(p.ISR, 1) || len(p.OfflineReplicas) != 1 || p.OfflineReplicas[0].Broker != 1 ||
				!strings.Contains(p.OfflineReplicas[0].Error, "low disk space") {
				return fmt.Errorf("df/%d: %+v", p.Partition, p)
			}
		}
		return nil
	})
	if code := produceTo(t, c.URL, "df", led, "elsewhere"); code != http.StatusOK {
		t.Fatalf("acks=all produce to df/%d, led elsewhere now: %d", led, code)
	}

	free.Store(10 << 30)
	testwait.Check(t, 30*time.Second, "broker 1 back in every ISR", func() error {
		for _, p := range topic(t, c.URL, "df").Partitions {
			if len(p.ISR) != 3 || len(p.OfflineReplicas) != 0 {
				return fmt.Errorf("df/%d: %+v", p.Partition, p)
			}
		}
		return nil
	})
}
