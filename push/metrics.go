package push

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the pushers' counters on one gateway, by subscription (at
// most MaxSubscriptions label values):
//
//	sluice_push_delivered_total{subscription}          records the endpoint acknowledged
//	sluice_push_requests_total{subscription,class}     requests by answer class (2xx, 4xx, 5xx, 429, 410, error)
//	sluice_push_failed_attempts_total{subscription}    attempts counted against records
//	sluice_push_dead_lettered_total{subscription}      records written to the dead-letter topic
//	sluice_push_backing_off{subscription}              1 while the endpoint is treated as down
//	sluice_push_request_seconds{subscription}          request latency
//	sluice_push_delivery_log_dropped_total             delivery log entries not written
type Metrics struct {
	delivered, requests, failed, dead *prometheus.CounterVec
	backingOff                        *prometheus.GaugeVec
	latency                           *prometheus.HistogramVec
	logDropped                        prometheus.Counter
}

// NewMetrics registers the push metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	sub := []string{"subscription"}
	m := &Metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_push_delivered_total", Help: "Records push endpoints acknowledged (2xx)."}, sub),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_push_requests_total",
			Help: "Push requests by answer class: 2xx, 4xx, 5xx, 429, 410, 3xx, or error (no answer)."}, []string{"subscription", "class"}),
		failed:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_push_failed_attempts_total", Help: "Failed push attempts counted against a record (toward max_attempts)."}, sub),
		dead:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_push_dead_lettered_total", Help: "Records written to the dead-letter topic."}, sub),
		backingOff: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_push_backing_off", Help: "1 while the subscription's endpoint is treated as down (probing)."}, sub),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_push_request_seconds", Help: "Push request latency, answered or not.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, sub),
		logDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_push_delivery_log_dropped_total",
			Help: "Delivery log entries dropped: the queue was full or the write failed."}),
	}
	if reg != nil {
		reg.MustRegister(m.delivered, m.requests, m.failed, m.dead, m.backingOff, m.latency, m.logDropped)
	}
	return m
}

// subStats is one subscription's view of the metrics: its series,
// looked up once (a request's counters are bumped without hashing labels).
type subStats struct {
	m                                      *Metrics
	name                                   string
	deliveredTotal, failedTotal, deadTotal prometheus.Counter
	backingOff                             prometheus.Gauge
	latency                                prometheus.Observer
	requests                               sync.Map // answer class → prometheus.Counter
}

func (m *Metrics) forSubscription(name string) *subStats {
	return &subStats{m: m, name: name, deliveredTotal: m.delivered.WithLabelValues(name), failedTotal: m.failed.WithLabelValues(name),
		deadTotal: m.dead.WithLabelValues(name), backingOff: m.backingOff.WithLabelValues(name), latency: m.latency.WithLabelValues(name)}
}

func (s *subStats) delivered(n int) { s.deliveredTotal.Add(float64(n)) }
func (s *subStats) attemptFailed()  { s.failedTotal.Inc() }
func (s *subStats) deadLettered()   { s.deadTotal.Inc() }

func (s *subStats) answered(o outcome) {
	class := "error"
	switch {
	case o.status == 429 || o.status == 410:
		class = strconv.Itoa(o.status)
	case o.status >= 100 && o.status < 600:
		class = statusClasses[o.status/100]
	case o.status > 0:
		class = strconv.Itoa(o.status/100) + "xx"
	}
	c, ok := s.requests.Load(class)
	if !ok {
		c, _ = s.requests.LoadOrStore(class, s.m.requests.WithLabelValues(s.name, class))
	}
	c.(prometheus.Counter).Inc()
	s.latency.Observe(o.took.Seconds())
}

var statusClasses = [...]string{1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

func (s *subStats) setBackingOff(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	s.backingOff.Set(v)
}

// forget drops a deleted subscription's series.
func (s *subStats) forget() {
	for _, v := range []*prometheus.CounterVec{s.m.delivered, s.m.failed, s.m.dead} {
		v.DeleteLabelValues(s.name)
	}
	s.m.requests.DeletePartialMatch(prometheus.Labels{"subscription": s.name})
	s.m.backingOff.DeleteLabelValues(s.name)
	s.m.latency.DeleteLabelValues(s.name)
}
