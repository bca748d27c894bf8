package sink

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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

	// The S3 archive's objects (zero for other stores).
	objects    *prometheus.CounterVec // objects created, by topic
	objBytes   *prometheus.CounterVec // their stored (gzipped) bytes, by topic
	objRaw     *prometheus.CounterVec // their NDJSON bytes, by topic
	objectTime prometheus.Histogram   // one object's conditional create
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
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_objects_total", Help: "S3 archive: objects created (rebuilt ranges included).",
		}, []string{"topic"}),
		objBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_object_bytes_total", Help: "S3 archive: bytes of the objects created, as stored (gzipped).",
		}, []string{"topic"}),
		objRaw: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_object_ndjson_bytes_total", Help: "S3 archive: NDJSON bytes of the objects created, before gzip.",
		}, []string{"topic"}),
		objectTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_sink_object_seconds", Help: "S3 archive: time to create one object (the conditional PUT, retries not included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	m.reg.MustRegister(m.written, m.batches, m.claims, m.batchTime, m.storeRetry, m.lag, m.owned,
		m.objects, m.objBytes, m.objRaw, m.objectTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the series for /metrics.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// objectStored counts an object the S3 archive created. Safe on a nil *Metrics.
func (m *Metrics) objectStored(topic string, stored, raw int, d time.Duration) {
	if m == nil {
		return
	}
	m.objects.WithLabelValues(topic).Inc()
	m.objBytes.WithLabelValues(topic).Add(float64(stored))
	m.objRaw.WithLabelValues(topic).Add(float64(raw))
	m.objectTime.Observe(d.Seconds())
}

func partLabel(p int32) string { return strconv.Itoa(int(p)) }
