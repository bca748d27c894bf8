package sink

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are a sink's Prometheus series, on a registry of their own.
type Metrics struct {
	reg        *prometheus.Registry
	written    *prometheus.CounterVec // records written, by topic
	batches    *prometheus.CounterVec // partition batches, by result
	claims     *prometheus.CounterVec // claims, by result
	batchTime  prometheus.Histogram   // one partition batch's store write
	storeRetry prometheus.Counter     // store calls retried after an error
	lag        *prometheus.GaugeVec   // records behind the log end, by topic and partition
	owned      prometheus.Gauge       // partitions claimed and writable
}

// NewMetrics returns a sink's series, registered on a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_records_written_total", Help: "Records written to the store (records below the store's next offset not counted).",
		}, []string{"topic"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_batches_total", Help: "Partition batches by result: ok, fenced, error.",
		}, []string{"result"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_claims_total", Help: "Partition claims by result: ok, fenced.",
		}, []string{"result"}),
		batchTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_sink_batch_seconds", Help: "Time to write one partition batch to the store, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		storeRetry: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_store_retries_total", Help: "Store calls sent again after a transport or server error.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_sink_lag_records", Help: "Records of an owned partition not yet committed to the group (from the group's description).",
		}, []string{"topic", "partition"}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_sink_partitions", Help: "Partitions this sink holds and may write.",
		}),
	}
	m.reg.MustRegister(m.written, m.batches, m.claims, m.batchTime, m.storeRetry, m.lag, m.owned,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Handler serves the series for /metrics.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func partLabel(p int32) string { return strconv.Itoa(int(p)) }
