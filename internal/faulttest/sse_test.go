package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// A browser-like client reads a topic's event stream through one gateway,
// which is SIGKILLed halfway; it reconnects to another gateway with the
// last event id it saw and gets every record exactly once, each partition
// in order.
func TestSSEGatewayKilledHalfway(t *testing.T) {
	c := Start(t, Options{OffsetsTopicPartitions: 1})
	gwB := c.AddGateway()
	c.CreateTopic("feed", 3, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, err := client.New(gwB)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	produce := func(from, to int) {
		for ; from < to; from += 1000 {
			var recs []client.Record
			for i := from; i < from+1000; i++ {
				recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("k%d", i%97)), Value: []byte(fmt.Sprint(i))})
			}
			if _, err := prod.Produce(ctx, "feed", recs, client.ProduceOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Half now; the other half once the stream's gateway is dead, so the
	// reader cannot have it all from its socket's buffers already.
	produce(0, n/2)
	seen := map[string]int{}
	next := map[int32]int64{}
	read := func(s *client.SSEStream, upTo int) error {
		for len(seen) < upTo {
			ev, err := s.Next()
			if err != nil {
				return err
			}
			r, err := ev.Record()
			if err != nil {
				t.Fatalf("event %q: %v", ev.Data, err)
			}
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			seen[string(r.Value)]++
			if seen[string(r.Value)] > 1 {
				t.Fatalf("record %s twice", r.Value)
			}
		}
		return nil
	}
	a, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.TopicSSE(ctx, "feed", "earliest", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := read(s, n/2); err != nil {
		t.Fatal(err)
	}
	c.KillGateway(c.URL)
	produce(n/2, n)
	if err := read(s, n); err == nil {
		t.Fatal("the stream outlived its gateway")
	}
	c.Logf("the stream broke after %d records; reconnecting to %s with id %.40s...", len(seen), gwB, s.LastID)
	b, err := client.New(gwB)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.TopicSSE(ctx, "feed", "earliest", s.LastID)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := read(s2, n); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct records, want %d", len(seen), n)
	}
}
