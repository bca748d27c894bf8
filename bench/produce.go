package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// benchProduce posts body from c.Connections goroutines for c.Duration.
func benchProduce(ctx context.Context, c ThroughputOptions, url string, body []byte) (benchResult, error) {
	client := benchClient(c.Connections)
	defer client.CloseIdleConnections()
	// Requests end with the command; the run's deadline only stops new
	// ones, so the last of them are measured whole.
	reqCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var (
		mu       sync.Mutex
		res      benchResult
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	start, cpu := time.Now(), startCPU()
	// With a rate, requests leave on a shared schedule; latency is measured
	// from the scheduled time, so a slow server cannot hide its queueing.
	var ticks chan time.Time
	if c.Rate > 0 {
		ticks = make(chan time.Time, c.Connections)
		go func() {
			interval := time.Duration(float64(time.Second) / c.Rate)
			next := time.Now()
			for ctx.Err() == nil {
				select {
				case ticks <- next:
				case <-ctx.Done():
					return
				}
				next = next.Add(interval)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
			}
		}()
	}
	for i := 0; i < c.Connections; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var n int64
			for ctx.Err() == nil {
				t0 := time.Now()
				if ticks != nil {
					select {
					case t0 = <-ticks:
					case <-ctx.Done():
						continue
					}
				}
				req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/x-ndjson")
				resp, err := client.Do(req)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err := fmt.Errorf("%s answered %d", url, resp.StatusCode)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat = append(lat, time.Since(t0))
				n++
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.requests += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	if p := firstErr.Load(); p != nil {
		return res, *p
	}
	res.records = res.requests * int64(c.Batch)
	res.bytes = res.records * int64(c.Size)
	res.finish()
	return res, nil
}

// startAppendServer is the ceiling: a plain net/http server whose handler only
// appends each body to one file.
func startAppendServer() (string, func(), error) {
	f, err := os.CreateTemp("", "sluice-bench-append-")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		_, err = f.Write(body)
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed once stopped
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		// The file only takes the bodies in and is deleted next.
		_ = f.Close()
		_ = os.Remove(f.Name())
	}, nil
}
