package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/internal/testsvc"
)

// Kafka clients against broker processes over ZooKeeper: kcat produces,
// idempotent with acks=all, in each codec and kcat and franz-go read it all
// back; then franz-go produces idempotently with acks=all while a leader
// is SIGKILLed, and a franz-go consumer reading across the leader change
// gets every acknowledged record exactly once, in order per partition.
func TestKafkaClientsOverZooKeeper(t *testing.T) {
	c := Start(t, Options{Kafka: true})
	const name = "kafka"
	c.CreateTopic(name, 3, 3, 2)
	c.WaitFullISR(name, 45*time.Second, false)
	var seeds []string
	for _, id := range c.BrokerIDs() {
		seeds = append(seeds, c.Broker(id).KafkaAddr)
	}
	kcat := func(stdin string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, testsvc.Kcat(t), append([]string{"-b", strings.Join(seeds, ",")}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out
	}
	want := map[string]bool{}
	for _, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
		var in strings.Builder
		for i := range 20 {
			line := fmt.Sprintf("%s-%d", codec, i)
			want[line] = true
			fmt.Fprintln(&in, line)
		}
		kcat(in.String(), "-P", "-t", name, "-z", codec, "-X", "acks=all", "-X", "enable.idempotence=true")
	}
	lines := strings.Fields(string(kcat("", "-C", "-t", name, "-o", "beginning", "-e", "-f", "%s\n")))
	got := map[string]bool{}
	for _, l := range lines {
		got[l] = true
	}
	if len(lines) != len(want) || len(got) != len(want) {
		t.Fatalf("kcat -C read %d records (%d distinct), kcat -P wrote %d", len(lines), len(got), len(want))
	}
	for l := range want {
		if !got[l] {
			t.Fatalf("kcat -C did not read %q", l)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newClient := func(opts ...kgo.Opt) *kgo.Client {
		kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		return kc
	}
	cons := newClient(kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	byPartition := map[int32][]int64{}
	consume := func(n int) {
		t.Helper()
		for total := 0; total < n; {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%d of %d records consumed", total, n)
			}
			fs.EachRecord(func(r *kgo.Record) {
				seen[string(r.Value)]++
				byPartition[r.Partition] = append(byPartition[r.Partition], r.Offset)
				total++
			})
		}
	}
	consume(len(want))
	for l := range want {
		if seen[l] != 1 {
			t.Fatalf("franz-go read %q %d times", l, seen[l])
		}
	}

	prod := newClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(100), kgo.RecordDeliveryTimeout(90*time.Second))
	produce := func(from, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Topic: name, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("kgo-%d", i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 150)
	top, err := c.Topic(name)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(top.Partitions[0].Leader)
	produce(150, 150)
	consume(300)
	for i := range 300 {
		if v := fmt.Sprintf("kgo-%d", i); seen[v] != 1 {
			t.Fatalf("%s read %d times", v, seen[v])
		}
	}
	for p, offs := range byPartition {
		for i := 1; i < len(offs); i++ {
			if offs[i] != offs[i-1]+1 {
				t.Fatalf("partition %d: offset %d after %d", p, offs[i], offs[i-1])
			}
		}
	}
}
