package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/sluice-io/sluice/api"
)

// benchGroup compares consuming a topic through a consumer group (members
// polling through the gateway, passing cursors, committing beside their
// polls) with plain
// partition fetches of the same records, in alternating rounds, and reports
// commit latency.
func benchGroup(ctx context.Context, c ThroughputOptions, records int, results string) error {
	if err := fillTopic(ctx, c, c.Topic, records); err != nil {
		return err
	}
	var t api.Topic
	if err := getJSON(c.URL+"/v1/topics/"+c.Topic, &t); err != nil {
		return err
	}
	var want int64
	for _, p := range t.Partitions {
		want += p.HighWatermark - p.LogStartOffset
	}
	members := min(c.Connections, len(t.Partitions))
	c.out.printf("consume --group: %d records in %d partitions; %d members, each committing its latest cursor beside its polls, vs %d connections of plain fetches\n",
		want, len(t.Partitions), members, c.Connections)
	c.out.printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	var plains, groups []float64
	var commits []time.Duration
	for round := 0; round < c.Rounds; round++ {
		plain, err := benchConsume(ctx, c)
		if err != nil {
			return err
		}
		plain.print(c.out, "partition")
		plains = append(plains, plain.recordsPerSec)
		res, lat, err := benchGroupRound(ctx, c, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), round), members, want)
		if err != nil {
			return err
		}
		res.print(c.out, "group")
		groups = append(groups, res.recordsPerSec)
		commits = append(commits, lat...)
	}
	cr := benchResult{latencies: commits}
	cr.finish()
	c.out.printf("commit latency under that load, over %d commits: p50 %s, p99 %s\n", len(commits), cr.pct(0.50).Round(10*time.Microsecond), cr.pct(0.99).Round(10*time.Microsecond))
	idle, err := benchIdleCommits(ctx, c, 500)
	if err != nil {
		return err
	}
	c.out.printf("commit latency of one member committing alone (acks=all on __consumer_offsets), over %d commits: p50 %s, p99 %s\n", len(idle.latencies), idle.pct(0.50).Round(10*time.Microsecond), idle.pct(0.99).Round(10*time.Microsecond))
	c.out.printf("median records/s: partition fetches %.0f, group %.0f; ratio group/partition: %.2f\n", median(plains), median(groups), median(groups)/median(plains))
	return appendBenchRow(results, benchRow{scenario: fmt.Sprintf("consume JSON through a group, RF=%d (commit p99 %s)", c.ReplicationFactor, cr.pct(0.99).Round(10*time.Microsecond)),
		unit: "records/s", baseline: fmt.Sprintf("plain partition fetches %.0f", median(plains)), sluice: fmt.Sprintf("%.0f", median(groups)),
		ratio: ratioCell(median(groups), median(plains))})
}

// fillTopic produces records into topic (acks=all) unless it holds that many.
func fillTopic(ctx context.Context, c ThroughputOptions, topic string, records int) error {
	var t api.Topic
	if err := getJSON(c.URL+"/v1/topics/"+topic, &t); err != nil {
		return err
	}
	var have int64
	for _, p := range t.Partitions {
		have += p.HighWatermark
	}
	body := ndjsonBody(c.Batch, c.Size)
	client := benchClient(c.Connections)
	defer client.CloseIdleConnections()
	for n := int(have); n < records; n += c.Batch {
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
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("producing to %s: %d", topic, resp.StatusCode)
		}
	}
	return nil
}

// benchGroupRound joins a fresh group with n members, waits until the
// assignment settles, then has every member poll (max 10,000 records,
// passing each poll's cursor to the next) and commit the latest cursor
// beside its polls until the group has read want records.
func benchGroupRound(ctx context.Context, c ThroughputOptions, group string, n int, want int64) (benchResult, []time.Duration, error) {
	client := benchClient(n * 2)
	defer client.CloseIdleConnections()
	// poll reads one group poll into the member's buffer, reused across
	// polls, and decodes it as the Go client decodes (goccy/go-json): the
	// same reader as the partition fetches it is compared with.
	poll := func(path string, buf *bytes.Buffer, out *api.GroupPollResponse) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		buf.Reset()
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, buf.Bytes())
		}
		return gojson.Unmarshal(buf.Bytes(), out)
	}
	call := func(method, path string, in, out any) error {
		var body io.Reader
		if in != nil {
			b, _ := json.Marshal(in)
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
		if err != nil {
			return err
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	ids := make([]string, n)
	for i := range ids {
		var j api.JoinGroupResponse
		if err := call("POST", "/v1/groups/"+group+"/members", api.JoinGroupRequest{Topics: []string{c.Topic}}, &j); err != nil {
			return benchResult{}, nil, err
		}
		ids[i] = j.MemberID
	}
	// Heartbeat until no member's assignment changes.
	for settled := false; !settled; {
		settled = true
		for _, id := range ids {
			var hb api.HeartbeatResponse
			if err := call("POST", "/v1/groups/"+group+"/members/"+id+"/heartbeat", nil, &hb); err != nil {
				return benchResult{}, nil, err
			}
			var again api.HeartbeatResponse
			if err := call("POST", "/v1/groups/"+group+"/members/"+id+"/heartbeat", nil, &again); err != nil {
				return benchResult{}, nil, err
			}
			if !slices.Equal(hb.Assignment, again.Assignment) || hb.MemberEpoch != again.MemberEpoch {
				settled = false
			}
		}
	}
	var (
		mu      sync.Mutex
		res     benchResult
		commits []time.Duration
		got     atomic.Int64
		done    atomic.Int64 // unix ns when the last record arrived
		wg      sync.WaitGroup
		errs    = make(chan error, 2*n) // a poller and a committer per member
	)
	start, cpu := time.Now(), startCPU()
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Commits go on beside the polls, as a consumer that commits
			// asynchronously does: the committer always commits the latest
			// cursor, so a slow commit coalesces the ones behind it.
			latest := make(chan string, 1)
			committed := make(chan struct{})
			go func() {
				defer close(committed)
				for cur := range latest {
					t1 := time.Now()
					if err := call("POST", "/v1/groups/"+group+"/offsets", api.CommitRequest{MemberID: id, Cursor: cur}, nil); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					commits = append(commits, time.Since(t1))
					mu.Unlock()
				}
			}()
			defer func() { close(latest); <-committed }()
			cursor := ""
			var buf bytes.Buffer
			for got.Load() < want && ctx.Err() == nil {
				t0 := time.Now()
				var pr api.GroupPollResponse
				q := "?max_records=10000&max_bytes=4194304&max_wait_ms=200"
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				if err := poll("/v1/groups/"+group+"/members/"+id+"/records"+q, &buf, &pr); err != nil {
					errs <- err
					return
				}
				pollTime := time.Since(t0)
				cursor = pr.Cursor
				if len(pr.Records) == 0 {
					continue
				}
				select {
				case <-latest: // replaced by the newer cursor
				default:
				}
				latest <- pr.Cursor
				var nbytes int64
				for _, r := range pr.Records {
					nbytes += int64(len(r.Value))
				}
				if got.Add(int64(len(pr.Records))) >= want {
					done.Store(time.Now().UnixNano())
				}
				mu.Lock()
				res.records += int64(len(pr.Records))
				res.bytes += nbytes
				res.requests++
				res.latencies = append(res.latencies, pollTime)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Members idle in a long poll when the last record arrives elsewhere
	// are not part of the figure.
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	if d := done.Load(); d > 0 {
		res.elapsed = time.Unix(0, d).Sub(start)
	}
	res.finish()
	for _, id := range ids {
		_ = call("DELETE", "/v1/groups/"+group+"/members/"+id, nil, nil)
	}
	select {
	case err := <-errs:
		return res, commits, err
	default:
	}
	if res.records != want {
		return res, commits, fmt.Errorf("the group read %d records, want %d (every record once)", res.records, want)
	}
	return res, commits, nil
}

// benchIdleCommits times n commits, one after another, of a lone member of
// a fresh group: the commit path itself (gateway, coordinator, acks=all
// append to __consumer_offsets) without a load beside it.
func benchIdleCommits(ctx context.Context, c ThroughputOptions, n int) (benchResult, error) {
	client := benchClient(1)
	defer client.CloseIdleConnections()
	post := func(path string, in, out any) error {
		b, _ := json.Marshal(in)
		req, err := http.NewRequestWithContext(ctx, "POST", c.URL+path, bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
		if out != nil {
			return json.Unmarshal(body, out)
		}
		return nil
	}
	group := fmt.Sprintf("bench-commits-%d", time.Now().UnixNano())
	var j api.JoinGroupResponse
	if err := post("/v1/groups/"+group+"/members", api.JoinGroupRequest{Topics: []string{c.Topic}}, &j); err != nil {
		return benchResult{}, err
	}
	var res benchResult
	tp := j.Assignment[0]
	for i := 0; i < n; i++ {
		t0 := time.Now()
		req := api.CommitRequest{MemberID: j.MemberID, MemberEpoch: j.MemberEpoch, Offsets: []api.PartitionOffset{{Topic: tp.Topic, Partition: tp.Partition, Offset: int64(i)}}}
		if err := post("/v1/groups/"+group+"/offsets", req, nil); err != nil {
			return res, err
		}
		res.latencies = append(res.latencies, time.Since(t0))
	}
	res.finish()
	return res, nil
}
