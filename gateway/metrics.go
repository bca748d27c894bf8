package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// gatewayMetrics are the gateway's counters; one registry per gateway.
type gatewayMetrics struct {
	reg             *prometheus.Registry
	produceRequests *prometheus.CounterVec // by result code ("ok" or an error code)
	producedRecords prometheus.Counter
	fetchRequests   *prometheus.CounterVec // by route
	// Sends of produce batches to leaders, and the batches they carried:
	// more batches than sends is produce requests coalesced (coalesce.go).
	produceSends       prometheus.Counter
	produceSendBatches prometheus.Counter
	panics             prometheus.Counter // handler panics recovered (Gateway.recoverer)
}

func newGatewayMetrics() *gatewayMetrics {
	m := &gatewayMetrics{
		reg: prometheus.NewRegistry(),
		produceRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_produce_requests_total", Help: "Produce requests by result (ok or the error code).",
		}, []string{"result"}),
		producedRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_produced_records_total", Help: "Records acknowledged to producers.",
		}),
		fetchRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_fetch_requests_total", Help: "Fetch requests by route (records, batches, ws).",
		}, []string{"route"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_panics_total", Help: "Request handler panics recovered and answered INTERNAL.",
		}),
		produceSends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_produce_sends_total", Help: "Produce sends to partition leaders (acks=1 and all, without a producer id).",
		}),
		produceSendBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_produce_send_batches_total", Help: "Produce requests' batches those sends carried: above the sends when concurrent requests to a partition were coalesced.",
		}),
	}
	m.reg.MustRegister(m.produceRequests, m.producedRecords, m.fetchRequests, m.produceSends, m.produceSendBatches, m.panics, collectors.NewGoCollector())
	return m
}

func (m *gatewayMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
