package broker

import (
	"context"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/httpserve"
)

// Panics. A bug that panics in one request or one pass of a background loop
// should cost that request or that pass, not the broker and every partition
// on it, and it must not pass unnoticed either: each recovered panic is
// logged at error level with its stack and counted in
// sluice_broker_panics_total{where}. Options.CrashOnPanic re-raises it after
// the log line instead (tests set it, so a bug fails them rather than being
// retried quietly).
//
// What recovery cannot undo: a panic between a Lock and its Unlock leaves
// that mutex held, so the partition or loop behind it stops until a restart;
// the log line and the metric are how an operator finds out.

var descPanics = prometheus.NewDesc("sluice_broker_panics_total",
	"Panics recovered, by where they happened: http, a background loop's name, or follower.", []string{"where"}, nil)

// notePanic logs and counts a recovered panic v, and re-raises it under
// CrashOnPanic. Called from the deferred function that recovered v, so the
// stack logged is the panicking one.
func (b *Broker) notePanic(where string, v any) {
	b.countPanic(where, v)
	if b.opts.CrashOnPanic {
		panic(v)
	}
}

func (b *Broker) countPanic(where string, v any) {
	b.log.Error("recovered a panic", "where", where, "panic", v, "stack", string(debug.Stack()))
	b.panicsMu.Lock()
	b.panics[where]++
	b.panicsMu.Unlock()
}

// recovering runs f and reports whether it panicked (the panic noted).
func (b *Broker) recovering(where string, f func()) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			b.notePanic(where, v)
		}
	}()
	f()
	return false
}

// goLoop starts one of the broker's long-lived loops through goFunc. When
// the loop panics it is noted and, after a second, started again; when it
// returns (its context ended) it is done. A loop restarted this way must
// keep nothing it needs across passes in its own locals.
func (b *Broker) goLoop(ctx context.Context, name string, loop func(context.Context)) {
	b.goFunc(func() {
		for ctx.Err() == nil && b.recovering(name, func() { loop(ctx) }) {
			sleep(ctx, time.Second)
		}
	})
}

// recoverer answers a request whose handler panicked with INTERNAL (500),
// logged and counted as above under where "http" (never re-raised).
func (b *Broker) recoverer(next http.Handler) http.Handler {
	return httpserve.Recoverer(func(_ *http.Request, v any) { b.countPanic("http", v) })(next)
}

// panicCollector exposes the panic counts.
type panicCollector struct{ b *Broker }

func (c panicCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descPanics }

func (c panicCollector) Collect(ch chan<- prometheus.Metric) {
	c.b.panicsMu.Lock()
	defer c.b.panicsMu.Unlock()
	for where, n := range c.b.panics {
		ch <- prometheus.MustNewConstMetric(descPanics, prometheus.CounterValue, float64(n), where)
	}
}
