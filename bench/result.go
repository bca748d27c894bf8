package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// median is the middle of v (the mean of the two middles); 0 for none.
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchResult is one round of one target: what moved, how long it took,
// each request's latency and the CPU spent.
type benchResult struct {
	records       int64
	bytes         int64
	requests      int64
	elapsed       time.Duration
	recordsPerSec float64
	latencies     []time.Duration
	hostCPU       time.Duration // busy CPU of the whole machine during the round (hostCPU)
	selfCPU       time.Duration // this process's CPU during the round
}

func (r *benchResult) finish() {
	r.recordsPerSec = float64(r.records) / r.elapsed.Seconds()
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
}

func (r *benchResult) pct(p float64) time.Duration { return percentile(r.latencies, p) }

// percentile is the p-quantile (0 to 1) of sorted: the value p of the
// way along it, the largest for 1; 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, max(0, int(p*float64(len(sorted)))))]
}

// print writes the result as a row of the records/s table.
func (r *benchResult) print(w *figures, name string) {
	w.printf("%-10s %12.0f %10.1f %10.0f %10s %10s %10.2f %6.2f\n", name, r.recordsPerSec,
		float64(r.bytes)/r.elapsed.Seconds()/1e6, float64(r.requests)/r.elapsed.Seconds(),
		r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.cpuPerMB(), r.selfCPUPerMB())
}

// figures is where a scenario writes its figures. It keeps the first write
// that failed and writes nothing after it; the scenario returns that error
// once it is done (as a bufio.Writer reports its writes at Flush), so a
// figure that did not reach Out fails the run instead of vanishing.
type figures struct {
	w   io.Writer
	err error
}

// newFigures writes to w, or to os.Stdout when w is nil.
func newFigures(w io.Writer) *figures {
	return &figures{w: cmp.Or(w, io.Writer(os.Stdout))}
}

func (f *figures) printf(format string, args ...any) {
	if f.err == nil {
		_, f.err = fmt.Fprintf(f.w, format, args...)
	}
}

// done reports the first failed write into *err, unless the scenario failed
// first: that failure is the one to report.
func (f *figures) done(err *error) {
	if *err == nil && f.err != nil {
		*err = fmt.Errorf("writing the figures: %w", f.err)
	}
}
