package gateway_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// Through a cluster of three brokers: concurrent single-record requests to
// one partition (acks=all, RF=3) each get an offset that holds their own
// record, and none is lost or written twice, whether or not they shared a
// send.
func TestConcurrentSmallProducesOverACluster(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 3})
	c := client{t: t, base: tc.URL}
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "small", Partitions: 1, ReplicationFactor: 3}, nil)
	const requests = 300
	offsets := make([]int64, requests)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48)
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var pr api.ProduceResponse
			c.json("POST", "/v1/topics/small/records?acks=all", api.ProduceRequest{Records: []api.ProduceRecord{{Value: json.RawMessage(fmt.Sprintf(`"r%d"`, i))}}}, &pr)
			offsets[i] = pr.Offsets[0].Offset
		}()
	}
	wg.Wait()
	fr := c.fetch("small", 0, "offset=0&max_records=1000")
	if len(fr.Records) != requests {
		t.Fatalf("the partition holds %d records, want %d", len(fr.Records), requests)
	}
	at := map[int64]string{}
	for _, r := range fr.Records {
		at[r.Offset] = string(r.Value)
	}
	for i, off := range offsets {
		if want := fmt.Sprintf(`"r%d"`, i); at[off] != want {
			t.Fatalf("request %d was given offset %d, which holds %s", i, off, at[off])
		}
	}
	t.Logf("%v sends carried %v batches", c.metric("sluice_gateway_produce_sends_total"), c.metric("sluice_gateway_produce_send_batches_total"))
}
