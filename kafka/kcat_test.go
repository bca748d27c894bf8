package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/recordbatch"
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

// kcat -P, idempotent with acks=all, writes RecordBatch v2 compressed with
// each codec (librdkafka does so once ApiVersions lists Fetch v4 and
// Produce v0); the HTTP API reads back every record as kcat sent it, in
// idempotent batches of that codec; kcat -C -o beginning -e reads them all
// back, and -o -N the last N of a partition.
func TestKcatProduceConsumeCodecs(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	codecs := []api.Compression{api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd}
	want := map[string]string{} // key → value
	for _, codec := range codecs {
		var in strings.Builder
		for i := range 20 {
			k, v := fmt.Sprintf("%s-%d", codec, i), fmt.Sprintf(`{"codec":"%s","n":%d,"pad":"%s"}`, codec, i, strings.Repeat("x", 50))
			want[k] = v
			fmt.Fprintf(&in, "%s\t%s\n", k, v)
		}
		kcat(t, cl, in.String(), "-P", "-t", "orders", "-K", "\t", "-z", codec.String(),
			"-X", "acks=all", "-X", "enable.idempotence=true", "-X", "partitioner=murmur2_random")
	}

	// Over HTTP: every record, in batches of a codec, from an idempotent
	// producer.
	got := map[string]string{}
	seen := map[api.Compression]bool{}
	for p := int32(0); p < 3; p++ {
		b, err := hc.FetchBatches(ctx, "orders", p, client.Earliest, client.FetchOptions{MaxBytes: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := b.Records(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got[string(r.Key)] = string(r.Value)
		}
		if _, err := recordbatch.Scan(b.Data, true, func(h recordbatch.Header, _ []byte) error {
			seen[h.Compression()] = true
			if h.ProducerID <= 0 || h.BaseSequence < 0 {
				return fmt.Errorf("batch at %d: producer %d sequence %d", h.BaseOffset, h.ProducerID, h.BaseSequence)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("HTTP reads %d records, kcat produced %d", len(got), len(want))
	}
	// librdkafka 2.0.2 compresses with lz4 only when ApiVersions lists
	// FindCoordinator (its sign of a Kafka 0.8.2 broker); else it sends
	// those batches uncompressed.
	lz4 := listsAPI(t, cl, kmsg.FindCoordinator)
	for _, c := range codecs {
		if want := c != api.CompressionLZ4 || lz4; seen[c] != want {
			t.Fatalf("batches compressed with %s: %v, want %v (%v)", c, seen[c], want, seen)
		}
	}

	// kcat reads them all back.
	out := kcat(t, cl, "", "-C", "-t", "orders", "-o", "beginning", "-e", "-f", "%k\t%s\n")
	if back := parseKeyed(t, out); !maps.Equal(back, want) {
		t.Fatalf("kcat -C read %d records, want %d:\n%s", len(back), len(want), out)
	}

	// -o -3: the last three records of a partition, as HTTP has them.
	b, err := hc.FetchBatches(ctx, "orders", 1, client.Earliest, client.FetchOptions{MaxBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := b.Records(0)
	if err != nil || len(recs) < 3 {
		t.Fatalf("%d records in partition 1, %v", len(recs), err)
	}
	out = kcat(t, cl, "", "-C", "-t", "orders", "-p", "1", "-o", "-3", "-e", "-f", "%o\t%k\n")
	var last []string
	for _, r := range recs[len(recs)-3:] {
		last = append(last, fmt.Sprintf("%d\t%s", r.Offset, r.Key))
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); !slices.Equal(lines, last) {
		t.Fatalf("kcat -o -3: %q, want %q", lines, last)
	}
}

// listsAPI reports whether the brokers' ApiVersions lists key.
func listsAPI(t *testing.T, cl *embedtest.Cluster, key kmsg.Key) bool {
	t.Helper()
	kc := newKgo(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == key.Int16() })
}

// parseKeyed reads kcat's "%k\t%s\n" lines.
func parseKeyed(t *testing.T, out []byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("kcat line %q", line)
		}
		m[k] = v
	}
	return m
}

// Records produced over HTTP, with binary keys and values and headers, are
// read by kcat byte for byte, and records kcat produces are read over HTTP
// byte for byte, headers included.
func TestKcatHTTPByteForByte(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "mixed", Partitions: 1, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p0 := int32(0)
	var sent []client.Record
	for i := range 10 {
		sent = append(sent, client.Record{Key: []byte{byte(i), 0xff, 0x00, 'k'}, Value: []byte{0x00, byte(i), 0xfe, '\n', 'v'},
			Headers: map[string]string{"h": fmt.Sprint("v", i)}, Partition: &p0})
	}
	if _, err := hc.Produce(ctx, "mixed", sent, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	// kcat -J prints keys and values as JSON strings; bytes that are not
	// UTF-8 would be mangled, so read them as hex through -f instead.
	out := kcat(t, cl, "", "-C", "-t", "mixed", "-o", "beginning", "-e", "-f", "%o %K %S %h\n")
	_ = out
	outKV := kcat(t, cl, "", "-C", "-t", "mixed", "-o", "beginning", "-e", "-f", "%k%s")
	var wantKV []byte
	for _, r := range sent {
		wantKV = append(append(wantKV, r.Key...), r.Value...)
	}
	if !bytes.Equal(outKV, wantKV) {
		t.Fatalf("kcat read %x, HTTP produced %x", outKV, wantKV)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 10 || !strings.HasSuffix(lines[3], " 4 5 h=v3") {
		t.Fatalf("kcat -f '%%o %%K %%S %%h': %q", lines)
	}

	// The reverse: kcat's records (with a header), read over HTTP.
	kcat(t, cl, "k\x01\tv\xfe\x00\n", "-P", "-t", "mixed", "-p", "0", "-K", "\t", "-H", "trace=abc")
	resp, err := hc.FetchBatches(ctx, "mixed", 0, client.At(10), client.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := resp.Records(10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	if r := recs[0]; string(r.Key) != "k\x01" || string(r.Value) != "v\xfe\x00" || len(r.Headers) != 1 || r.Headers[0].Key != "trace" || string(r.Headers[0].Value) != "abc" {
		t.Fatalf("HTTP reads key %q value %q headers %v", r.Key, r.Value, r.Headers)
	}
}

// kcat -Q finds the first offset at or after a time, as HTTP records it.
func TestKcatQueryByTime(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "timed", Partitions: 1, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	p0 := int32(0)
	var recs []client.Record
	for i := range 10 {
		recs = append(recs, client.Record{Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Second), Partition: &p0})
	}
	if _, err := hc.Produce(ctx, "timed", recs, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	out := kcat(t, cl, "", "-Q", "-t", fmt.Sprintf("timed:0:%d", base.Add(3500*time.Millisecond).UnixMilli()))
	if !strings.Contains(string(out), "timed [0] offset 4") {
		t.Fatalf("kcat -Q: %s", out)
	}
}
