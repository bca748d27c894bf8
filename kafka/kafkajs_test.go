package kafka_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
)

// kafkajsStep is one JSON line of testdata/kafkajs/roundtrip.js.
type kafkajsStep struct {
	Step    string   `json:"step"`
	Created bool     `json:"created"`
	Topics  []string `json:"topics"`
	Sent    []struct {
		Partition  int32  `json:"partition"`
		BaseOffset string `json:"baseOffset"`
		ErrorCode  int16  `json:"errorCode"`
	} `json:"sent"`
	Partitions  int    `json:"partitions"`
	ShrinkError string `json:"shrinkError"`
	Configs     map[string]struct {
		Value     string `json:"value"`
		IsDefault bool   `json:"isDefault"`
	} `json:"configs"`
	Records []struct {
		Partition int32  `json:"partition"`
		Offset    string `json:"offset"`
		Key       string `json:"key"`
		Value     string `json:"value"`
		N         string `json:"n"`
	} `json:"records"`
}

// kafkajs 2.2.4 (Node; no flexible versions, old API versions: ApiVersions
// v2, Produce v7, Fetch v11, Metadata v6, InitProducerId v1, FindCoordinator
// v2, JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v3, OffsetCommit
// v5, OffsetFetch v4, CreateTopics v3, DeleteTopics v1): its admin client creates, lists and deletes topics, its
// idempotent producer writes with acks -1 and its Java-compatible murmur2
// partitioner puts each key where the HTTP API would, and a consumer.run in
// a group reads every record back once and commits, as the HTTP API shows.
func TestKafkajsRoundTrip(t *testing.T) {
	node, nodePath := testsvc.Kafkajs(t)
	cl, hc := kafkaCluster(t)
	const records, partitions = 60, 3
	script, err := filepath.Abs(filepath.Join("testdata", "kafkajs", "roundtrip.js"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+nodePath,
		"BROKERS="+strings.Join(seeds(cl), ","),
		"TOPIC=orders", "SCRATCH=scratch", "GROUP=kjs",
		"RECORDS="+strconv.Itoa(records), "PARTITIONS="+strconv.Itoa(partitions))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("kafkajs stderr:\n%s", stderr.String())
	}
	if runErr != nil {
		t.Fatalf("node roundtrip.js: %v\nstdout:\n%s", runErr, stdout.String())
	}
	steps := map[string]kafkajsStep{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s kafkajsStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		steps[s.Step] = s
	}
	if _, ok := steps["done"]; !ok {
		t.Fatalf("the script did not finish: %s", stdout.String())
	}

	// Admin: created both, the second create of scratch said it exists,
	// both were listed, and scratch is gone after the delete.
	if !steps["createTopics"].Created || steps["createTopicsAgain"].Created {
		t.Fatalf("createTopics %+v, again %+v", steps["createTopics"], steps["createTopicsAgain"])
	}
	if l := steps["listTopics"].Topics; !slices.Contains(l, "orders") || !slices.Contains(l, "scratch") {
		t.Fatalf("listTopics: %v", l)
	}
	if l := steps["deleteTopics"].Topics; !slices.Contains(l, "orders") || slices.Contains(l, "scratch") {
		t.Fatalf("listTopics after deleteTopics: %v", l)
	}
	// (scratch is created again below, for CreatePartitions.)
	topic, err := hc.GetTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(topic.Partitions) != partitions || topic.ReplicationFactor != 3 {
		t.Fatalf("orders over HTTP: %+v", topic)
	}
	// CreatePartitions grew the second scratch to 3 partitions and refused
	// a shrink; AlterConfigs replaced the configs whole.
	if s := steps["createPartitions"]; s.Partitions != 3 || s.ShrinkError != "INVALID_PARTITIONS" {
		t.Fatalf("createPartitions: %+v", s)
	}
	if tp, err := hc.GetTopic(ctx, "scratch"); err != nil || len(tp.Partitions) != 3 {
		t.Fatalf("scratch over HTTP: %v %+v", err, tp.Partitions)
	}
	cfg := steps["alterConfigs"].Configs
	if c := cfg["retention.ms"]; c.Value != "7200000" || c.IsDefault {
		t.Fatalf("retention.ms: %+v", cfg)
	}
	if c := cfg["cleanup.policy"]; c.Value != "compact" || c.IsDefault {
		t.Fatalf("cleanup.policy: %+v", cfg)
	}
	if c := cfg["segment.ms"]; c.Value != "604800000" || !c.IsDefault {
		t.Fatalf("segment.ms after the replacement: %+v", cfg)
	}
	if tp, err := hc.GetTopic(ctx, "scratch-configs"); err != nil || !maps.Equal(tp.Configs, map[string]string{"retention.ms": "7200000", "cleanup.policy": "compact"}) {
		t.Fatalf("scratch-configs over HTTP: %v %v", err, tp.Configs)
	}

	for _, s := range steps["produce"].Sent {
		if s.ErrorCode != 0 {
			t.Fatalf("produce: %+v", steps["produce"].Sent)
		}
	}

	// Every record once, each key on the partition the HTTP API's murmur2
	// picks, offsets in order within a partition.
	got := steps["consume"].Records
	if len(got) != records {
		t.Fatalf("consumed %d records, want %d", len(got), records)
	}
	seen := map[string]bool{}
	last := map[int32]int64{}
	count := map[int32]int64{}
	for _, r := range got {
		n, _ := strconv.Atoi(r.N)
		if r.Key != fmt.Sprintf("key-%d", n) || r.Value != fmt.Sprintf("value-%d", n) || seen[r.Key] {
			t.Fatalf("record %+v (seen before: %v)", r, seen[r.Key])
		}
		seen[r.Key] = true
		if want := int32(api.KeyPartition([]byte(r.Key), partitions)); r.Partition != want {
			t.Fatalf("%s on partition %d, the HTTP API puts it on %d", r.Key, r.Partition, want)
		}
		off, err := strconv.ParseInt(r.Offset, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[r.Partition]; ok && off <= prev {
			t.Fatalf("partition %d: offset %d after %d", r.Partition, off, prev)
		}
		last[r.Partition] = off
		count[r.Partition]++
	}

	waitCommitted(t, ctx, hc, "kjs", count)
}

// waitCommitted waits until the group's commits, as the HTTP API shows
// them, are at the end of each partition, which holds count[p] records.
func waitCommitted(t *testing.T, ctx context.Context, hc *client.Client, group string, count map[int32]int64) {
	t.Helper()
	testwait.Check(t, 30*time.Second, "the group's commits reach the partitions' ends", func() error {
		d, err := hc.DescribeGroup(ctx, group)
		if err != nil {
			return err
		}
		if len(d.Partitions) != len(count) {
			return fmt.Errorf("partitions %+v, want %d", d.Partitions, len(count))
		}
		for _, p := range d.Partitions {
			if p.CommittedOffset != count[p.Partition] || p.HighWatermark != count[p.Partition] || p.Lag != 0 {
				return fmt.Errorf("partition %d: %+v, consumed %d", p.Partition, p, count[p.Partition])
			}
		}
		return nil
	})
}
