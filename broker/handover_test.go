package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// A controlled shutdown of the leader under a steady acks=all load of
// producers without idempotence: the leadership moves, and no produce
// fails (none is answered "may or may not be committed", which such a
// producer could not retry), because the draining leader closes the
// leadership to new writes (retried by the gateway on the new leader) and
// lets what it appended commit before the move. Every acknowledged record
// is stored once.
func TestDrainUnderAcksAllLoadFailsNoProduce(t *testing.T) {
	c := startReplicated(t)
	leader := c.partition().Leader
	var (
		ok, moved atomic.Int64
		mu        sync.Mutex
		failures  []string
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				b, _ := json.Marshal(map[string]any{"records": []map[string]any{{"value": fmt.Sprintf("w%d-%d", w, i)}}})
				resp, err := http.Post(c.URL+"/v1/topics/r/records?timeout_ms=60000&acks=all", "application/json", bytes.NewReader(b))
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				var eb api.ErrorBody
				_ = json.NewDecoder(resp.Body).Decode(&eb)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%d %s: %s", resp.StatusCode, eb.Error.Code, eb.Error.Message))
					mu.Unlock()
					continue
				}
				ok.Add(1)
				if c.Brokers[leader-1] != nil && moved.Load() > 0 {
					moved.Add(1)
				}
			}
		}()
	}
	c.waitFor("produces under way", func(api.PartitionInfo) bool { return ok.Load() >= 50 })
	dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	held, err := c.Brokers[leader-1].Drain(dctx)
	cancel()
	if err != nil || held != 0 {
		t.Fatalf("drain of b%d: %v, still leading %d", leader, err, held)
	}
	moved.Store(1)
	// Having handed its leadership over, the stopping broker leaves the
	// ISR: the writes of the new leadership do not wait for a replica on
	// its way out.
	c.waitFor(fmt.Sprintf("a new leader, b%d out of its ISR, and produces acknowledged after it", leader), func(p api.PartitionInfo) bool {
		return p.Leader != leader && p.Leader > 0 && !slices.Contains(p.ISR, leader) && moved.Load() >= 50
	})
	stop()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d produces failed around the leader move, the first: %s", len(failures), failures[0])
	}
	p := c.waitFor("HW at the log end", func(p api.PartitionInfo) bool { return p.HighWatermark == p.LogEndOffset })
	if p.HighWatermark != ok.Load() {
		t.Fatalf("%d records acknowledged, %d stored (one record per produce)", ok.Load(), p.HighWatermark)
	}
	c.replicasAgree()
}
