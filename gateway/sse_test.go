package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	sc "github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
)

func produceValues(t *testing.T, cl *sc.Client, topic string, from, n int, value func(int) []byte) {
	t.Helper()
	var recs []sc.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, sc.Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: value(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Produce(ctx, topic, recs, sc.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A partition's event stream: one event per record, the id the next
// offset; a reconnect with Last-Event-ID (or ?last_event_id=) resumes right
// after it; values with line breaks stay one event.
func TestPartitionSSE(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	c := client{t: t, base: tc.URL}
	c.createTopic("feed", 1)
	cl, _ := sc.New(tc.URL)
	produceValues(t, cl, "feed", 0, 20, func(i int) []byte { return []byte(fmt.Sprintf("{\n \"n\": %d\n}", i)) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := cl.PartitionSSE(ctx, "feed", 0, "earliest", "")
	if err != nil {
		t.Fatal(err)
	}
	if ct := s.ContentType(); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	for i := range 10 {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		r, err := ev.Record()
		if err != nil || r.Offset != int64(i) || ev.ID != fmt.Sprint(i+1) || !strings.Contains(string(r.Value), fmt.Sprintf(`"n": %d`, i)) {
			t.Fatalf("event %d: id %q record %+v err %v (data %q)", i, ev.ID, r, err, ev.Data)
		}
	}
	s.Close()
	s, err = cl.PartitionSSE(ctx, "feed", 0, "earliest", "10")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Next()
	if r, _ := ev.Record(); err != nil || r.Offset != 10 {
		t.Fatalf("after Last-Event-ID 10: %+v %v", r, err)
	}
	s.Close()
	// A browser's first connection names the id in the query.
	status, h, body := c.doStream(ctx, "/v1/topics/feed/partitions/0/sse?last_event_id=19", 2)
	if status != 200 || !strings.Contains(body, "retry: ") || !strings.Contains(body, "id: 20\n") || strings.Contains(body, "id: 19\n") {
		t.Fatalf("?last_event_id=19: %d %v\n%s", status, h, body)
	}
	// Records produced while a stream waits come at once.
	s, err = cl.PartitionSSE(ctx, "feed", 0, "latest", "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	produceValues(t, cl, "feed", 20, 1, func(i int) []byte { return []byte(`"live"`) })
	ev, err = s.Next()
	if r, _ := ev.Record(); err != nil || r.Offset != 20 || string(r.Value) != `"live"` {
		t.Fatalf("live record: %+v %v", r, err)
	}
	if status, _, _ := c.doStream(ctx, "/v1/topics/feed/partitions/0/sse?last_event_id=x", 0); status != http.StatusBadRequest {
		t.Fatalf("a bad last event id: %d", status)
	}
}

// A topic's event stream interleaves its partitions, each in order; the
// id names every partition's position, so a reconnect resumes each.
func TestTopicSSE(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	c := client{t: t, base: tc.URL}
	c.createTopic("feed", 3)
	cl, _ := sc.New(tc.URL)
	produceValues(t, cl, "feed", 0, 300, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[string]bool{}
	next := map[int32]int64{}
	read := func(s *sc.SSEStream, n int) {
		for range n {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			r, err := ev.Record()
			if err != nil {
				t.Fatal(err)
			}
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			if seen[string(r.Value)] {
				t.Fatalf("record %s twice", r.Value)
			}
			seen[string(r.Value)] = true
		}
	}
	s, err := cl.TopicSSE(ctx, "feed", "earliest", "")
	if err != nil {
		t.Fatal(err)
	}
	read(s, 120)
	last := s.LastID
	s.Close()
	s, err = cl.TopicSSE(ctx, "feed", "earliest", last)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read(s, 180)
	if len(seen) != 300 || len(next) != 3 {
		t.Fatalf("%d records from %d partitions", len(seen), len(next))
	}
	cur, err := api.DecodeCursor(s.LastID)
	if err != nil || len(cur.Positions) != 3 {
		t.Fatalf("last id %q: %+v %v", s.LastID, cur, err)
	}
}

// doStream GETs path, reads up to events events (0: the whole answer) and
// returns what it read.
func (c client) doStream(ctx context.Context, path string, events int) (int, http.Header, string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for resp.StatusCode == http.StatusOK && (events == 0 || strings.Count(sb.String(), "\nid: ") < events) {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		sb.Write(b)
	}
	return resp.StatusCode, resp.Header, sb.String()
}
