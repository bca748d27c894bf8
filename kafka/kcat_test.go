package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testsvc"
)

// runKcat runs kcat (Debian's 1.7.1, on librdkafka 2.0.2) against the
// cluster's Kafka listeners with stdin, and returns its stdout, its stderr
// and how it exited.
func runKcat(t *testing.T, cl *embedtest.Cluster, stdin string, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	bin := testsvc.Kcat(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append([]string{"-b", strings.Join(seeds(cl), ",")}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if errOut.Len() > 0 {
		t.Logf("kcat %s: stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("kcat %s: still running after 60 s", strings.Join(args, " "))
	}
	return out.Bytes(), errOut.Bytes(), err
}

// kcat is runKcat for a run that must succeed.
func kcat(t *testing.T, cl *embedtest.Cluster, stdin string, args ...string) []byte {
	t.Helper()
	out, _, err := runKcat(t, cl, stdin, args...)
	if err != nil {
		t.Fatalf("kcat %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kcatMetadata is the part of `kcat -L -J` these tests read.
type kcatMetadata struct {
	Brokers []struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"brokers"`
	Topics []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			Leader    int32 `json:"leader"`
			Replicas  []struct {
				ID int32 `json:"id"`
			} `json:"replicas"`
			ISRs []struct {
				ID int32 `json:"id"`
			} `json:"isrs"`
		} `json:"partitions"`
	} `json:"topics"`
}

// `kcat -L` lists the brokers at their Kafka addresses and each partition
// with the leader, replicas and ISR the HTTP API shows.
func TestKcatMetadata(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	var md kcatMetadata
	out := kcat(t, cl, "", "-L", "-J", "-t", "orders")
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat -L -J: %v\n%s", err, out)
	}
	if len(md.Brokers) != 3 {
		t.Fatalf("%d brokers: %s", len(md.Brokers), out)
	}
	for _, b := range md.Brokers {
		if want := cl.Brokers[b.ID-1].KafkaAddr(); b.Name != want {
			t.Fatalf("broker %d at %s, want %s", b.ID, b.Name, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topic, err := hc.GetTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("%s", out)
	}
	ids := func(rs []struct {
		ID int32 `json:"id"`
	}) []int32 {
		var out []int32
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, p := range md.Topics[0].Partitions {
		hp := topic.Partitions[p.Partition]
		if p.Leader != hp.Leader || !slices.Equal(ids(p.Replicas), hp.Replicas) || !slices.Equal(ids(p.ISRs), hp.ISR) {
			t.Fatalf("partition %d: kcat leader %d replicas %v isr %v; HTTP %+v", p.Partition, p.Leader, ids(p.Replicas), ids(p.ISRs), hp)
		}
	}
}

// librdkafka 2.0.2 takes message format v2 to need Fetch v4 as well as
// Produce v3 in ApiVersions. Fetch is not served yet, so `kcat -P` sends
// v0 message sets (no timestamps, no headers) inside Produce v7: each is
// refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, kcat reports every message
// undelivered and exits non-zero, and nothing is written.
func TestKcatProduceNeedsFetchListed(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	var in strings.Builder
	for i := range 10 {
		fmt.Fprintf(&in, "user-%d\t{\"n\":%d}\n", i, i)
	}
	_, stderr, err := runKcat(t, cl, in.String(), "-P", "-t", "orders", "-K", "\t",
		"-X", "acks=all", "-X", "partitioner=murmur2_random", "-X", "message.send.max.retries=0")
	if err == nil {
		t.Fatal("kcat -P succeeded: librdkafka sent RecordBatch v2 (is Fetch v4 listed now? then test records produced by kcat instead)")
	}
	if n := strings.Count(string(stderr), "Delivery failed"); n != 10 || !strings.Contains(string(stderr), "format") {
		t.Fatalf("%d of 10 messages reported undelivered, or not for their format", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := int32(0); p < 3; p++ {
		off, err := hc.ListOffsets(ctx, "orders", p, client.Latest)
		if err != nil || off.Offset != 0 {
			t.Fatalf("partition %d: high watermark %d, %v; want nothing written", p, off.Offset, err)
		}
	}
}
