package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// produceN writes n records with values 0..n-1 (JSON numbers, from first) to partition p.
func produceN(t *testing.T, cl *client.Client, topic string, p int32, first, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 500)
		recs := make([]client.Record, k)
		for i := range recs {
			recs[i] = client.Record{JSON: json.RawMessage(fmt.Sprint(first + i))}
		}
		if _, err := cl.Produce(testCtx(t), topic, recs, client.ProduceOptions{Partition: client.Partition(p)}); err != nil {
			t.Fatal(err)
		}
		first, n = first+k, n-k
	}
}

// readStream calls Next until at least n records came, checking that they
// are the offsets from, from+1, ... in order with values equal to their
// offsets, and that no call returns more than the buffer allows. It returns
// the offset after the last record read (a frame may end past from+n).
func readStream(t *testing.T, s *client.Stream, from int64, n, buffer int) int64 {
	t.Helper()
	want := from
	for want < from+int64(n) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		recs, err := s.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("at offset %d: %v", want, err)
		}
		if len(recs) > buffer {
			t.Fatalf("%d records in one frame with a buffer of %d", len(recs), buffer)
		}
		for _, r := range recs {
			var v int64
			_ = json.Unmarshal(r.Value, &v)
			if r.Offset != want || v != want {
				t.Fatalf("record at offset %d (value %d), want %d", r.Offset, v, want)
			}
			want++
		}
	}
	if s.NextOffset() != want {
		t.Fatalf("NextOffset %d, want %d", s.NextOffset(), want)
	}
	return want
}

func TestStreamWithCredit(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "ws", 1)
	produceN(t, cl, "ws", 0, 0, 1200)
	const buffer = 64
	s, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{Buffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Far more records than the buffer: the stream keeps granting credit.
	if end := readStream(t, s, 0, 1200, buffer); end != 1200 {
		t.Fatalf("read up to %d", end)
	}
	if s.HighWatermark() != 1200 {
		t.Fatalf("high watermark %d", s.HighWatermark())
	}
	// Caught up: Next waits, and a short ctx on it does not end the stream.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if _, err := s.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing to read: %v", err)
	}
	cancel()
	produceN(t, cl, "ws", 0, 1200, 10)
	readStream(t, s, 1200, 10, buffer)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestStreamFromLatest(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "ws", 1)
	produceN(t, cl, "ws", 0, 0, 5)
	s, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{From: client.Latest, Buffer: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.NextOffset() != 5 {
		t.Fatalf("latest resolved to %d, want 5", s.NextOffset())
	}
	produceN(t, cl, "ws", 0, 5, 3)
	readStream(t, s, 5, 3, 10)
}

// TestStreamReconnects cuts the stream's connection twice while it runs:
// Next reconnects from where it stopped and nothing is lost or repeated.
func TestStreamReconnects(t *testing.T) {
	c, _ := startCluster(t)
	relay := newTCPRelay(t, c.URL)
	cl, err := client.New(relay.URL(), client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	createTopic(t, cl, "ws", 1)
	produceN(t, cl, "ws", 0, 0, 300)
	s, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{Buffer: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := readStream(t, s, 0, 120, 50)
	relay.cut()
	next = readStream(t, s, next, 100, 50)
	relay.cut()
	if end := readStream(t, s, next, int(300-next), 50); end != 300 {
		t.Fatalf("stream ended at %d, want 300", end)
	}

	// Without reconnects, the cut ends the stream with a retriable error.
	s2, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{Buffer: 10, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	readStream(t, s2, 0, 10, 10)
	relay.cut()
	var te *client.TransportError
	for {
		_, err := s2.Next(ctx)
		if err == nil {
			continue // frames already received before the cut
		}
		if !errors.As(err, &te) || !client.IsRetriable(err) {
			t.Fatalf("after the cut: %v", err)
		}
		break
	}
}

func TestStreamErrors(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "ws", 1)
	if _, err := cl.Stream(ctx, "nope", 0, client.StreamOptions{}); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, err := cl.Stream(ctx, "ws", 3, client.StreamOptions{}); !errors.Is(err, api.ErrUnknownPartition) {
		t.Fatalf("unknown partition: %v", err)
	}
	if _, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{From: "soon"}); !errors.Is(err, &api.Error{Code: api.CodeInvalidOffset}) {
		t.Fatalf("bad offset: %v", err)
	}
	// An offset past the log end: the stream opens, then fails with the
	// error frame's code and status, which is final.
	s, err := cl.Stream(ctx, "ws", 0, client.StreamOptions{From: client.At(50)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Next(ctx)
	var ce *client.Error
	if !errors.Is(err, api.ErrOffsetOutOfRange) || !errors.As(err, &ce) || ce.Status != 416 || client.IsRetriable(err) {
		t.Fatalf("offset past the end: %v (%#v)", err, ce)
	}
	if _, again := s.Next(ctx); !errors.Is(again, api.ErrOffsetOutOfRange) {
		t.Fatalf("the failure is not sticky: %v", again)
	}
}
