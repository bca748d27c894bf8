package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// benchSendfile is `sluice bench consume --raw --baseline sendfile`: raw
// batches read through the gateway (GET .../batches, max_bytes 4 MiB) against
// a plain net/http server that sends the same segment files with sendfile,
// in the same 4 MiB ranges. The topic is filled once; each round reads it
// whole, again and again for --duration, one connection per partition (at
// most --connections at once), first from the baseline, then from sluice.
// Both clients discard the bodies and take the next position from a header,
// so the difference is the server side: the gateway, the hop to the broker
// and the broker's read.
func benchSendfile(ctx context.Context, c ThroughputOptions, records int, brokerDir string, results string) error {
	if err := fillTopic(ctx, c, c.Topic, records); err != nil {
		return err
	}
	var t api.Topic
	if err := getJSON(c.URL+"/v1/topics/"+c.Topic, &t); err != nil {
		return err
	}
	files, total, err := segmentFiles(brokerDir, c.Topic, len(t.Partitions))
	if err != nil {
		return err
	}
	srv, err := startSendfileServer(files)
	if err != nil {
		return err
	}
	defer srv.stop()
	c.out.printf("consume --raw: %d partitions, %.1f MB of segments, reads of 4 MiB; each round reads all of it repeatedly for %s over %d connections\n",
		len(t.Partitions), float64(total)/1e6, c.Duration, c.Connections)
	c.out.printf("%-10s %10s %10s %10s %10s %10s %6s\n", "target", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	var bases, sluices []float64
	for round := 0; round < c.Rounds; round++ {
		base, err := rawReadLoop(ctx, c, len(t.Partitions), func(p int, pos int64) string {
			return fmt.Sprintf("%s/segments/%d?pos=%d&max_bytes=%d", srv.url, p, pos, rawReadBytes)
		}, func(p int) (int64, int64) { return 0, files[p].size() })
		if err != nil {
			return fmt.Errorf("sendfile server: %w", err)
		}
		base.printMB(c.out, "sendfile")
		res, err := rawReadLoop(ctx, c, len(t.Partitions), func(p int, pos int64) string {
			return fmt.Sprintf("%s/v1/topics/%s/partitions/%d/batches?offset=%d&max_bytes=%d", c.URL, c.Topic, p, pos, rawReadBytes)
		}, func(p int) (int64, int64) {
			return t.Partitions[p].LogStartOffset, t.Partitions[p].HighWatermark
		})
		if err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
		res.printMB(c.out, "sluice")
		bases, sluices = append(bases, base.mbPerSec()), append(sluices, res.mbPerSec())
	}
	c.out.printf("median MB/s: sendfile server %.0f, sluice %.0f; ratio sluice/sendfile: %.2f\n",
		median(bases), median(sluices), median(sluices)/median(bases))
	return appendBenchRow(results, benchRow{scenario: "consume raw /batches (hot, page cache)", unit: "MB/s",
		baseline: fmt.Sprintf("plain sendfile HTTP server %.0f", median(bases)), sluice: fmt.Sprintf("%.0f", median(sluices)),
		ratio: ratioCell(median(sluices), median(bases)), aim: "≥ 0.6"})
}

// rawReadBytes is the most bytes one raw read asks for.
const rawReadBytes = 4 << 20

// rawReadLoop reads every partition from start to end (positions in the
// target's own terms: offsets or file bytes; each answer's X-Next-Offset
// header gives the next one) over and over until c.Duration has passed,
// one goroutine per partition, at most c.Connections at once.
func rawReadLoop(ctx context.Context, c ThroughputOptions, parts int, url func(p int, pos int64) string, bounds func(p int) (int64, int64)) (benchResult, error) {
	client := benchClient(c.Connections)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var (
		mu       sync.Mutex
		res      benchResult
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
		sem      = make(chan struct{}, c.Connections)
	)
	start, cpu := time.Now(), startCPU()
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, end := bounds(p)
			var (
				lat          []time.Duration
				nbytes, reqs int64
			)
			for pos := from; ctx.Err() == nil; {
				if pos >= end {
					pos = from
				}
				sem <- struct{}{}
				t0 := time.Now()
				next, n, err := rawRead(ctx, client, url(p, pos))
				<-sem
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					break
				}
				if next <= pos {
					fail(fmt.Errorf("%s: no progress at %d", url(p, pos), pos))
					break
				}
				lat, nbytes, reqs, pos = append(lat, time.Since(t0)), nbytes+n, reqs+1, next
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.bytes += nbytes
			res.requests += reqs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	res.finish()
	if p := firstErr.Load(); p != nil {
		return res, *p
	}
	return res, nil
}

// rawRead GETs url, discards the body and returns X-Next-Offset and the
// body's length.
func rawRead(ctx context.Context, client *http.Client, url string) (int64, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, apihttp.ReadError(resp)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, 0, err
	}
	next, err := strconv.ParseInt(resp.Header.Get(api.HeaderNextOffset), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s header: %w", api.HeaderNextOffset, err)
	}
	return next, n, nil
}

func (r *benchResult) mbPerSec() float64 { return float64(r.bytes) / r.elapsed.Seconds() / 1e6 }

// printMB writes the result as a row of the MB/s table.
func (r *benchResult) printMB(w *figures, name string) {
	w.printf("%-10s %10.0f %10.0f %10s %10s %10.2f %6.2f\n", name, r.mbPerSec(), float64(r.requests)/r.elapsed.Seconds(),
		r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.cpuPerMB(), r.selfCPUPerMB())
}

// partitionFiles are one partition's segment files in offset order, read
// as one byte stream.
type partitionFiles struct {
	paths []string
	sizes []int64
}

func (f partitionFiles) size() int64 {
	var n int64
	for _, s := range f.sizes {
		n += s
	}
	return n
}

// segmentFiles finds the segment files (*.log) of each partition of topic
// under a broker's data directory.
func segmentFiles(brokerDir, topic string, parts int) ([]partitionFiles, int64, error) {
	out := make([]partitionFiles, parts)
	var total int64
	err := filepath.WalkDir(brokerDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		dir := filepath.Base(filepath.Dir(path))
		ps, ok := strings.CutPrefix(dir, topic+"-")
		p, perr := strconv.Atoi(ps)
		if !ok || perr != nil || p < 0 || p >= parts {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[p].paths = append(out[p].paths, path) // WalkDir walks in lexical order: offset order
		out[p].sizes = append(out[p].sizes, info.Size())
		total += info.Size()
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for p := range out {
		if len(out[p].paths) == 0 {
			return nil, 0, fmt.Errorf("no segment files of %s-%d under %s", topic, p, brokerDir)
		}
	}
	return out, total, nil
}

// sendfileServer is the baseline: GET /segments/{p}?pos=&max_bytes= opens
// the file holding byte pos of partition p's segments, seeks and sends up to
// max_bytes of it with io.Copy from the *os.File and a Content-Length, which
// net/http turns into sendfile; X-Next-Offset is the byte after them.
type sendfileServer struct {
	url  string
	srv  *http.Server
	done chan struct{}
}

func startSendfileServer(files []partitionFiles) (*sendfileServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sendfileServer{url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/segments/"))
		pos, err2 := strconv.ParseInt(r.URL.Query().Get("pos"), 10, 64)
		maxBytes, err3 := strconv.ParseInt(r.URL.Query().Get("max_bytes"), 10, 64)
		if err := errors.Join(err, err2, err3); err != nil || p < 0 || p >= len(files) || pos < 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		pf := files[p]
		i, at := 0, pos
		for i < len(pf.sizes) && at >= pf.sizes[i] {
			at -= pf.sizes[i]
			i++
		}
		if i == len(pf.sizes) {
			http.Error(w, "past the end", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		f, err := os.Open(pf.paths[i])
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = f.Close() }() // opened read-only
		if _, err := f.Seek(at, io.SeekStart); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		n := min(maxBytes, pf.sizes[i]-at)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set(api.HeaderNextOffset, strconv.FormatInt(pos+n, 10))
		_, _ = io.Copy(w, io.LimitReader(f, n))
	})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *sendfileServer) stop() {
	s.srv.Close()
	<-s.done
}
