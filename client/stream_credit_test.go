package client

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// TestStreamNeverReadsPastItsBuffer looks inside a Stream that nobody reads:
// the server sends exactly the buffer's worth of records, then waits.
func TestStreamNeverReadsPastItsBuffer(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 1})
	cl, err := New(tc.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "credit"}); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, 500)
	for i := range recs {
		recs[i] = Record{JSON: json.RawMessage(fmt.Sprint(i))}
	}
	if _, err := cl.Produce(ctx, "credit", recs, ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	const buffer = 40
	s, err := cl.Stream(ctx, "credit", 0, StreamOptions{Buffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	queued := func() int {
		n := 0
		for {
			select {
			case f := <-s.conn.frames:
				if f.err != nil {
					t.Fatalf("stream failed: %v", f.err)
				}
				var fr api.FetchResponse
				if err := json.Unmarshal(f.data, &fr); err != nil {
					t.Fatal(err)
				}
				n += len(fr.Records)
			default:
				return n
			}
		}
	}
	got := 0
	// A timeout here is reported by the count check below.
	_ = testwait.Until(10*time.Second, func() error {
		if got += queued(); got < buffer {
			return fmt.Errorf("%d of %d records queued", got, buffer)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // room for a frame past the credit to arrive
	if got += queued(); got != buffer {
		t.Fatalf("the server sent %d records for a credit of %d", got, buffer)
	}
}
