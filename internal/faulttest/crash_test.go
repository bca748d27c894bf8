package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// waitSettled waits until every partition of topic has a leader, its full ISR,
// and an HW at its log end: what a restarted cluster reaches once its
// followers have reported in. Reading before that sees less, not wrong data.
func waitSettled(t *testing.T, base, topic string) { waitTopic(t, base, topic, true) }

// waitTopic waits until every partition of topic has a leader that serves
// everything it holds (HW at its log end) and, with fullISR, every replica
// in the ISR; without, an ISR still short is logged.
func waitTopic(t *testing.T, base, topic string, fullISR bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var tp api.Topic
		resp, err := http.Get(base + "/v1/topics/" + topic)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&tp)
			resp.Body.Close()
		}
		ok := err == nil && len(tp.Partitions) > 0
		for _, p := range tp.Partitions {
			if p.Offline || p.HighWatermark != p.LogEndOffset || (fullISR && len(p.ISR) != len(p.Replicas)) {
				ok = false
			}
		}
		if ok {
			for _, p := range tp.Partitions {
				if len(p.ISR) != len(p.Replicas) {
					t.Logf("partition %d serves with ISR %v of replicas %v", p.Partition, p.ISR, p.Replicas)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s did not settle: %+v %v", topic, tp.Partitions, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readPartition reads a partition from offset 0 to its end and calls f for
// each record with its value, a JSON string.
func readPartition(t *testing.T, base, topic string, partition int32, f func(r api.FetchedRecord, value string)) {
	t.Helper()
	next := int64(0)
	for {
		resp, err := http.Get(fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%d&max_records=5000", base, topic, partition, next))
		if err != nil {
			t.Fatal(err)
		}
		var fr api.FetchResponse
		err = json.NewDecoder(resp.Body).Decode(&fr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("fetch: %d %v", resp.StatusCode, err)
		}
		for _, r := range fr.Records {
			var v string
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("value %s: %v", r.Value, err)
			}
			f(r, v)
		}
		if len(fr.Records) == 0 {
			return
		}
		next = fr.NextOffset
	}
}

// TestKillNineKeepsAckedRecords produces unique values from several writers,
// kills the process with SIGKILL mid-load, restarts it on the same data
// directory and checks that every acknowledged record is there exactly once,
// with dense offsets per partition.
func TestKillNineKeepsAckedRecords(t *testing.T) {
	dir := t.TempDir()
	p := StartDev(t, dir)
	post := func(base, path string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		return http.Post(base+path, "application/json", bytes.NewReader(b))
	}
	resp, err := post(p.URL, "/v1/topics", api.CreateTopicRequest{Name: "crash", Partitions: 3})
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create topic: %v %v", resp, err)
	}
	resp.Body.Close()

	const writers = 4
	var mu sync.Mutex
	acked := map[string]api.RecordOffset{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var recs []map[string]any
				for j := 0; j < 20; j++ {
					recs = append(recs, map[string]any{"key": fmt.Sprintf("w%d", w), "value": fmt.Sprintf("w%d-%d-%d", w, i, j)})
				}
				resp, err := post(p.URL, "/v1/topics/crash/records", map[string]any{"records": recs})
				if err != nil {
					return // the process is gone: outcome unknown, not acked
				}
				var pr api.ProduceResponse
				derr := json.NewDecoder(resp.Body).Decode(&pr)
				resp.Body.Close()
				if resp.StatusCode != 200 || derr != nil {
					continue
				}
				mu.Lock()
				for j, off := range pr.Offsets {
					acked[recs[j]["value"].(string)] = off
				}
				mu.Unlock()
			}
		}()
	}
	// Let load build up, then kill without warning.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 4000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Kill()
	cancel()
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged before the kill")
	}

	p = StartDev(t, dir)
	waitSettled(t, p.URL, "crash")
	seen := map[string]api.RecordOffset{}
	for part := int32(0); part < 3; part++ {
		next := int64(0)
		readPartition(t, p.URL, "crash", part, func(r api.FetchedRecord, v string) {
			if r.Offset != next {
				t.Fatalf("partition %d: offset %d where %d was expected (gap or repeat)", part, r.Offset, next)
			}
			next++
			if prev, dup := seen[v]; dup {
				t.Fatalf("value %s stored twice: %v and %d/%d", v, prev, part, r.Offset)
			}
			seen[v] = api.RecordOffset{Partition: part, Offset: r.Offset}
		})
	}
	lost := 0
	for v, off := range acked {
		got, ok := seen[v]
		if !ok {
			lost++
			continue
		}
		if got != off {
			t.Errorf("value %s acknowledged at %v, found at %v", v, off, got)
		}
	}
	t.Logf("acknowledged %d records before SIGKILL; after restart %d stored, %d acknowledged missing", len(acked), len(seen), lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged records lost", lost)
	}
}
