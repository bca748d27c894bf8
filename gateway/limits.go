package gateway

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
)

// Limits bound what one client can cost a gateway. Zero values take the
// defaults of package api (api/limits.go), where each limit is documented;
// the body limit itself is Options.MaxBodyBytes (max.request.bytes).
type Limits struct {
	// MaxRecordsPerRequest is max.records.per.request. Default 100,000.
	MaxRecordsPerRequest int
	// MaxHeadersPerRecord is max.headers.per.record. Default 1,000.
	MaxHeadersPerRecord int
	// ProduceMemoryBytes is gateway.produce.memory.bytes. Default 256 MiB.
	ProduceMemoryBytes int64
	// Acks0MaxInFlight is gateway.acks0.max.in.flight. Default 128.
	Acks0MaxInFlight int
	// ReadTimeout is gateway.read.timeout.ms: the HTTP server's
	// ReadTimeout. Default 2 minutes.
	ReadTimeout time.Duration
}

// withDefaults fills zero fields and refuses negative ones.
func (l Limits) withDefaults() (Limits, error) {
	if l.MaxRecordsPerRequest < 0 || l.MaxHeadersPerRecord < 0 || l.ProduceMemoryBytes < 0 || l.Acks0MaxInFlight < 0 || l.ReadTimeout < 0 {
		return l, fmt.Errorf("gateway: negative limit in %+v", l)
	}
	if l.MaxRecordsPerRequest == 0 {
		l.MaxRecordsPerRequest = api.DefaultMaxRecordsPerRequest
	}
	if l.MaxHeadersPerRecord == 0 {
		l.MaxHeadersPerRecord = api.DefaultMaxHeadersPerRecord
	}
	if l.ProduceMemoryBytes == 0 {
		l.ProduceMemoryBytes = api.DefaultProduceMemoryBytes
	}
	if l.Acks0MaxInFlight == 0 {
		l.Acks0MaxInFlight = api.DefaultAcks0MaxInFlight
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = api.DefaultReadTimeoutMs * time.Millisecond
	}
	return l, nil
}

// memBudget counts the bytes produce requests hold against a fixed budget
// (gateway.produce.memory.bytes). Taking from it never blocks: a request
// that does not fit is refused, retriably, so memory stays bounded whatever
// clients send, and no request waits on another while holding bytes. What
// it counts is what the produce path keeps live (bodies as they are read,
// copies made while scanning, record tables, encoded batches, acks=0
// batches in flight); garbage the collector has yet to reclaim and the
// buffer pools are outside it.
type memBudget struct {
	limit   int64
	used    atomic.Int64
	refused atomic.Int64 // requests refused because the budget was full
}

// take reserves n bytes, or returns TOO_MANY_REQUESTS when they do not fit
// now, or REQUEST_TOO_LARGE when they could never fit (want is what the
// request has asked for in all, for that test and the message).
func (b *memBudget) take(n, want int64) error {
	for {
		u := b.used.Load()
		if u+n <= b.limit {
			if b.used.CompareAndSwap(u, u+n) {
				return nil
			}
			continue
		}
		if want > b.limit {
			return api.Errorf(api.CodeRequestTooLarge, "the request needs more than the gateway's %s (%d bytes)", api.LimitProduceMemoryBytes, b.limit)
		}
		return b.busy()
	}
}

// busy counts a refusal and returns its error.
func (b *memBudget) busy() error {
	b.refused.Add(1)
	return api.Errorf(api.CodeTooManyRequests, "the gateway's produce memory (%s, %d bytes) is in use by other requests; retry later",
		api.LimitProduceMemoryBytes, b.limit)
}

// fits reports whether n bytes would fit now, without taking them.
func (b *memBudget) fits(n int64) bool { return b.used.Load()+n <= b.limit }

func (b *memBudget) give(n int64) { b.used.Add(-n) }

// limitCollectors export the produce memory budget and the acks=0 sends.
func (g *Gateway) limitCollectors() []prometheus.Collector {
	b := g.mem
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_produce_memory_bytes", Help: "Bytes produce requests hold now (bounded by gateway.produce.memory.bytes).",
		}, func() float64 { return float64(b.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_produce_memory_limit_bytes", Help: "gateway.produce.memory.bytes.",
		}, func() float64 { return float64(b.limit) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gateway_produce_memory_refused_total", Help: "Produce requests refused with TOO_MANY_REQUESTS because the memory budget was in use.",
		}, func() float64 { return float64(b.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_gateway_acks0_sends_in_flight", Help: "acks=0 batches being sent in the background (bounded by gateway.acks0.max.in.flight).",
		}, func() float64 { return float64(len(g.acks0)) }),
	}
}

// reservation is one request's share of the budget. It is used by one
// goroutine at a time; split hands part of it to another.
type reservation struct {
	b *memBudget
	n int64
}

// grow takes n more bytes for the request.
func (r *reservation) grow(n int64) error {
	if n <= 0 {
		return nil
	}
	if err := r.b.take(n, r.n+n); err != nil {
		return err
	}
	r.n += n
	return nil
}

// shrink gives back n of the request's bytes (at most what it holds).
func (r *reservation) shrink(n int64) {
	n = min(n, r.n)
	if n > 0 {
		r.b.give(n)
		r.n -= n
	}
}

// split moves n of the request's bytes into a reservation of their own, for
// a goroutine that outlives the request.
func (r *reservation) split(n int64) *reservation {
	n = min(n, r.n)
	r.n -= n
	return &reservation{b: r.b, n: n}
}

// join takes back what split handed to o, for work that will not run on
// its own goroutine after all.
func (r *reservation) join(o *reservation) {
	r.n += o.n
	o.n = 0
}

// release gives back everything the reservation holds.
func (r *reservation) release() { r.shrink(r.n) }

// sendSlots bounds acks=0 background sends (gateway.acks0.max.in.flight).
type sendSlots chan struct{}

// tryAcquire takes a slot if one is free.
func (s sendSlots) tryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s sendSlots) release() { <-s }
