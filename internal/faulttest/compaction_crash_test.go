package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// TestKillNineWhileCleaning SIGKILLs `sluice dev` again and again while its
// cleaner compacts a keyed topic under load (a clean every 20 ms), and checks
// after each restart what a reader of a compacted topic relies on: for every
// key, the newest acknowledged value (or a newer one) is there at the offset
// it was acknowledged with; offsets only grow; and the log did get compacted.
func TestKillNineWhileCleaning(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long fault test; the full lane runs it")
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	flags := []string{"--cleaner-interval", "20ms"}
	p := StartDev(t, dir, flags...)
	post := func(base, path string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		return http.Post(base+path, "application/json", bytes.NewReader(b))
	}
	resp, err := post(p.URL, "/v1/topics", api.CreateTopicRequest{Name: "kv", Partitions: 1, Configs: map[string]string{
		"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
	}})
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create topic: %v %v", resp, err)
	}
	resp.Body.Close()

	const keys = 20
	type ack struct {
		offset int64
		value  string
	}
	var mu sync.Mutex
	newest := map[string]ack{} // per key, the acknowledged write with the highest offset
	written := map[int64]string{}
	produced := 0
	for kill := 0; kill < 4; kill++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					var recs []map[string]any
					for j := 0; j < 10; j++ {
						k := fmt.Sprintf("key-%02d", (i*10+j+w)%keys)
						recs = append(recs, map[string]any{"key": k, "value": fmt.Sprintf("%d-%d-%d-%d", kill, w, i, j)})
					}
					resp, err := post(p.URL, "/v1/topics/kv/records?acks=all", map[string]any{"records": recs})
					if err != nil {
						return
					}
					var pr api.ProduceResponse
					derr := json.NewDecoder(resp.Body).Decode(&pr)
					resp.Body.Close()
					if resp.StatusCode != 200 || derr != nil {
						continue
					}
					mu.Lock()
					produced += len(recs)
					for j, off := range pr.Offsets {
						k, v := recs[j]["key"].(string), recs[j]["value"].(string)
						written[off.Offset] = v
						if off.Offset > newest[k].offset || newest[k].value == "" {
							newest[k] = ack{off.Offset, v}
						}
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		p.Kill()
		cancel()
		wg.Wait()
		p = StartDev(t, dir, flags...)
		// Every replica is back in the ISR within the wait: followers that
		// caught up after the restart rejoin it.
		waitTopic(t, p.URL, "kv", true)

		// Read the whole partition.
		got := map[string]ack{}
		n, prev := 0, int64(-1)
		readPartition(t, p.URL, "kv", 0, func(r api.FetchedRecord, v string) {
			if r.Offset <= prev {
				t.Fatalf("offset %d after %d", r.Offset, prev)
			}
			prev = r.Offset
			if w, ok := written[r.Offset]; ok && w != v {
				t.Fatalf("offset %d holds %q, acknowledged as %q", r.Offset, v, w)
			}
			got[*r.Key] = ack{r.Offset, v}
			n++
		})
		mu.Lock()
		for k, a := range newest {
			if g := got[k]; g.offset < a.offset {
				t.Fatalf("after kill %d: key %s reads %+v, older than its acknowledged %+v", kill, k, g, a)
			}
		}
		total := produced
		mu.Unlock()
		t.Logf("after kill %d: %d acknowledged writes, %d records left in the log", kill, total, n)
		if kill == 3 && n >= total {
			t.Fatalf("the log was never compacted: %d records for %d writes", n, total)
		}
	}
}
