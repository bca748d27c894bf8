package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// benchConsume reads every partition from the earliest offset to the HW seen
// at the start, one goroutine per partition (at most c.Connections at once).
func benchConsume(ctx context.Context, c ThroughputOptions) (benchResult, error) {
	var t api.Topic
	if err := getJSON(c.URL+"/v1/topics/"+c.Topic, &t); err != nil {
		return benchResult{}, err
	}
	client := benchClient(c.Connections)
	defer client.CloseIdleConnections()
	var (
		mu  sync.Mutex
		res benchResult
		wg  sync.WaitGroup
		sem = make(chan struct{}, c.Connections)
		ers []error
	)
	start, cpu := time.Now(), startCPU()
	for _, p := range t.Partitions {
		wg.Add(1)
		go func(p api.PartitionInfo) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			next := p.LogStartOffset
			// One buffer per reader, reused across fetches as a client
			// that streams a partition would: the load generator should
			// not spend the cores on growing and clearing fresh buffers.
			var buf bytes.Buffer
			for next < p.HighWatermark && ctx.Err() == nil {
				t0 := time.Now()
				route := fmt.Sprintf("records?max_records=%d&max_bytes=4194304", cmp.Or(c.fetchRecords, 10000))
				if c.Raw {
					route = "batches?max_bytes=4194304"
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/topics/%s/partitions/%d/%s&offset=%d", c.URL, c.Topic, p.Partition, route, next), nil)
				if err != nil {
					mu.Lock()
					ers = append(ers, err)
					mu.Unlock()
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					ers = append(ers, err)
					mu.Unlock()
					return
				}
				var n, nbytes int64
				buf.Reset()
				_, _ = buf.ReadFrom(resp.Body)
				b := buf.Bytes()
				if c.Raw {
					nbytes = int64(len(b))
					var last int64
					_, _ = recordbatch.Scan(b, false, func(h recordbatch.Header, _ []byte) error {
						n += h.NextOffset() - max(h.BaseOffset, next)
						last = h.NextOffset()
						return nil
					})
					next = max(next, last)
				} else {
					// Decoded as the Go client decodes (goccy/go-json).
					var fr api.FetchResponse
					_ = gojson.Unmarshal(b, &fr)
					n = int64(len(fr.Records))
					for _, r := range fr.Records {
						nbytes += int64(len(r.Value))
					}
					next = fr.NextOffset
				}
				resp.Body.Close()
				if n == 0 {
					break
				}
				mu.Lock()
				res.records += n
				res.bytes += nbytes
				res.requests++
				res.latencies = append(res.latencies, time.Since(t0))
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	res.finish()
	return res, errors.Join(ers...)
}

// benchCold compares reading the same data from the object store and from
// local disk: two topics get the same records; the tiered one keeps nothing
// locally once it is uploaded (only its active segment stays). Segments are
// 4 MiB (coldSegmentBytes): small enough that a few million records make
// many of them, large enough that a read is not one object-store request
// per few hundred kilobytes, which is the cost of tiny segments, not of
// reading from the store (with 256 KiB segments the ratio was 0.32 against
// 0.46 with these, in one session's runs).
const coldSegmentBytes = "4194304"

func benchCold(ctx context.Context, c ThroughputOptions, records int, results string) error {
	hot, cold := c.Topic+"-hot", c.Topic+"-cold"
	if err := ensureTopic(c.URL, hot, c.Partitions, c.ReplicationFactor, map[string]string{"segment.bytes": coldSegmentBytes}); err != nil {
		return err
	}
	if err := ensureTopic(c.URL, cold, c.Partitions, c.ReplicationFactor, map[string]string{
		"segment.bytes": coldSegmentBytes, "remote.storage.enable": "true", "local.retention.bytes": "1"}); err != nil {
		return err
	}
	body := ndjsonBody(c.Batch, c.Size)
	client := benchClient(c.Connections)
	for _, topic := range []string{hot, cold} {
		for n := 0; n < records; n += c.Batch {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/topics/"+topic+"/records?acks=all", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("producing to %s: %d", topic, resp.StatusCode)
			}
		}
	}
	// Wait until the tiered topic's local copies are trimmed.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var t api.Topic
		if err := getJSON(c.URL+"/v1/topics/"+cold, &t); err != nil {
			return err
		}
		var remote, total int64
		for _, p := range t.Partitions {
			remote += p.LocalStartOffset - p.LogStartOffset
			total += p.HighWatermark - p.LogStartOffset
		}
		if total > 0 && float64(remote) >= 0.85*float64(total) {
			c.out.printf("cold topic: %d of %d records only in the object store\n", remote, total)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the tiered topic is still local after 2 minutes (%d of %d remote)", remote, total)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.out.printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	var hots, colds []float64
	for round := 0; round < c.Rounds; round++ {
		for _, topic := range []string{hot, cold} {
			cc := c
			cc.Topic = topic
			res, err := benchConsume(ctx, cc)
			if err != nil {
				return err
			}
			if topic == hot {
				res.print(c.out, "local")
				hots = append(hots, res.recordsPerSec)
			} else {
				res.print(c.out, "remote")
				colds = append(colds, res.recordsPerSec)
			}
		}
	}
	c.out.printf("median records/s: local %.0f, remote %.0f; ratio remote/local: %.2f\n", median(hots), median(colds), median(colds)/median(hots))
	kind := "JSON"
	if c.Raw {
		kind = "raw"
	}
	return appendBenchRow(results, benchRow{scenario: fmt.Sprintf("consume %s, cold (object store) from offset 0", kind), unit: "records/s",
		baseline: fmt.Sprintf("hot (local disk) %.0f", median(hots)), sluice: fmt.Sprintf("%.0f", median(colds)),
		ratio: ratioCell(median(colds), median(hots)), aim: "≥ 0.7"})
}
