package quota

import "github.com/prometheus/client_golang/prometheus"

// Collector exports an enforcer's counters per principal (at most
// MaxStatsPrincipals of them, the rest as OtherPrincipal), read when
// Prometheus scrapes:
//
//	<prefix>_bytes_total{principal,kind}            bytes admitted (kind produce or fetch)
//	<prefix>_requests_total{principal}              requests admitted
//	<prefix>_throttled_total{principal,kind}        requests refused over quota
//	<prefix>_throttle_seconds_total{principal,kind} throttle time announced to them
type Collector struct {
	e                                 *Enforcer
	bytes, requests, throttled, delay *prometheus.Desc
}

// NewCollector returns the collector of e's counters under prefix (e.g.
// "sluice_broker_quota").
func NewCollector(e *Enforcer, prefix string) *Collector {
	pk := []string{"principal", "kind"}
	return &Collector{e: e,
		bytes:     prometheus.NewDesc(prefix+"_bytes_total", "Bytes admitted, by principal and kind (produce, fetch).", pk, nil),
		requests:  prometheus.NewDesc(prefix+"_requests_total", "Requests admitted, by principal.", []string{"principal"}, nil),
		throttled: prometheus.NewDesc(prefix+"_throttled_total", "Requests refused for being over a quota, by principal and kind (produce, fetch, request).", pk, nil),
		delay:     prometheus.NewDesc(prefix+"_throttle_seconds_total", "Throttle time announced to refused requests, by principal and kind.", pk, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.requests
	ch <- c.throttled
	ch <- c.delay
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for p, st := range c.e.Stats() {
		for _, k := range []Kind{Produce, Fetch} {
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Amount[k]), p, k.String())
		}
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(st.Amount[Request]), p)
		for _, k := range []Kind{Produce, Fetch, Request} {
			ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(st.Throttled[k]), p, k.String())
			ch <- prometheus.MustNewConstMetric(c.delay, prometheus.CounterValue, st.ThrottleTime[k].Seconds(), p, k.String())
		}
	}
}
