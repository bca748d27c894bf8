package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Consumer tails partitions through the gateway while faults happen and
// keeps what it saw, so that a test can check that nothing a consumer was
// served was later replaced or removed (a read above the committed HW, or
// from a deposed leader's divergent tail).
type Consumer struct {
	c      *Cluster
	topic  string
	http   *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // guards seen and errs
	seen []Stored
	errs int
}

// StartConsumer tails each partition from offset 0, one long poll at a
// time, until Stop (also called at cleanup).
func (c *Cluster) StartConsumer(topic string, partitions []int32) *Consumer {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	co := &Consumer{c: c, topic: topic, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, cancel: cancel}
	for _, p := range partitions {
		co.wg.Add(1)
		go func() {
			defer co.wg.Done()
			co.tail(ctx, p)
		}()
	}
	c.T.Cleanup(co.Stop)
	c.T.Cleanup(tr.CloseIdleConnections)
	return co
}

func (co *Consumer) tail(ctx context.Context, p int32) {
	next := int64(0)
	for ctx.Err() == nil {
		url := fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%d&max_records=1000&max_wait_ms=500", co.c.URL, co.topic, p, next)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := co.http.Do(req)
		if err != nil {
			co.failed(ctx)
			continue
		}
		var fr api.FetchResponse
		err = json.NewDecoder(resp.Body).Decode(&fr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			co.failed(ctx)
			continue
		}
		co.mu.Lock()
		for _, r := range fr.Records {
			var v string
			if json.Unmarshal(r.Value, &v) != nil {
				v = "<not a JSON string: " + string(r.Value) + ">"
			}
			co.seen = append(co.seen, Stored{Partition: p, Offset: r.Offset, Value: v})
			next = r.Offset + 1
		}
		co.mu.Unlock()
	}
}

func (co *Consumer) failed(ctx context.Context) {
	co.mu.Lock()
	co.errs++
	co.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// Stop ends the consumer (bounded by its requests' 10 s timeout).
func (co *Consumer) Stop() {
	co.cancel()
	co.wg.Wait()
}

// Check compares what the consumer was served with the final contents of
// the partitions (Report.Final). It returns the number of records served
// and the violations: a record served at an offset that now holds another
// value or nothing.
func (co *Consumer) Check(final []Stored) (served int, problems []string) {
	co.mu.Lock()
	defer co.mu.Unlock()
	at := map[[2]int64]string{}
	for _, s := range final {
		at[[2]int64{int64(s.Partition), s.Offset}] = s.Value
	}
	for _, s := range co.seen {
		v, ok := at[[2]int64{int64(s.Partition), s.Offset}]
		if !ok || v != s.Value {
			if len(problems) < 20 {
				problems = append(problems, fmt.Sprintf("a consumer was served %s at p%d/%d, which now holds %q", s.Value, s.Partition, s.Offset, v))
			}
		}
	}
	return len(co.seen), problems
}

// Errors is how many polls failed (leader changes, timeouts).
func (co *Consumer) Errors() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.errs
}
