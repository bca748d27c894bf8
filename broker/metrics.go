package broker

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/quota"
)

// Partition gauges are read when Prometheus scrapes (nothing is updated on
// the produce or fetch paths); one registry per broker, so several brokers can
// share a process (sluice dev).
var (
	descLogStart = prometheus.NewDesc("sluice_partition_log_start_offset",
		"First readable offset (the first remote segment's for tiered partitions).", partitionLabels, nil)
	descLocalStart = prometheus.NewDesc("sluice_partition_local_start_offset",
		"First offset on this broker's disk.", partitionLabels, nil)
	descRemoteEnd = prometheus.NewDesc("sluice_partition_remote_end_offset",
		"Offset after the last segment safely in the object store; -1 when none.", partitionLabels, nil)
	descHW = prometheus.NewDesc("sluice_partition_high_watermark",
		"High watermark.", partitionLabels, nil)
	descLEO = prometheus.NewDesc("sluice_partition_log_end_offset",
		"Log end offset.", partitionLabels, nil)
	descLeader = prometheus.NewDesc("sluice_partition_leader",
		"1 when this broker leads the partition.", partitionLabels, nil)
	descISR = prometheus.NewDesc("sluice_partition_isr_size",
		"In-sync replicas, as the leader sees them (leaders only).", partitionLabels, nil)
	descReadOnly = prometheus.NewDesc("sluice_partition_read_only",
		"1 when a disk error made the partition read-only.", partitionLabels, nil)
	descFailedLogs = prometheus.NewDesc("sluice_broker_failed_logs",
		"Replicas on this broker whose log failed (read-only after a disk error, or not opened), as its registration tells the controller.", nil, nil)
	descController = prometheus.NewDesc("sluice_broker_controller",
		"1 when this broker is the controller.", nil, nil)
	descProducedRecords = prometheus.NewDesc("sluice_broker_produced_records_total",
		"Records this broker appended as a leader (replication not included).", nil, nil)
	descProducedBytes = prometheus.NewDesc("sluice_broker_produced_bytes_total",
		"Batch bytes this broker appended as a leader (replication not included).", nil, nil)
	descFetchedRecords = prometheus.NewDesc("sluice_broker_fetched_records_total",
		"Offsets this broker served to consumers (follower fetches not included).", nil, nil)
	descFetchedBytes = prometheus.NewDesc("sluice_broker_fetched_bytes_total",
		"Batch bytes this broker served to consumers (follower fetches not included).", nil, nil)
	descTierCorrupt = prometheus.NewDesc("sluice_tier_corrupt_reads_total",
		"Reads of tiered segments refused because an object failed its checks (REMOTE_CORRUPT), by object: index or log.", []string{"object"}, nil)
	descRemoteCacheHits = prometheus.NewDesc("sluice_tier_remote_cache_hits_total",
		"Cold reads served from the disk cache of remote segments (--remote-cache-bytes).", nil, nil)
	descRemoteCacheMisses = prometheus.NewDesc("sluice_tier_remote_cache_misses_total",
		"Cold reads that found no usable file in the disk cache and read the object store.", nil, nil)
	descRemoteCacheEvictions = prometheus.NewDesc("sluice_tier_remote_cache_evictions_total",
		"Files the disk cache removed to stay within its bound.", nil, nil)
	descRemoteCacheCorrupt = prometheus.NewDesc("sluice_tier_remote_cache_corrupt_total",
		"Disk-cache files that no longer matched their segment's record: removed, not served, and fetched again.", nil, nil)
	descRemoteCacheBytes = prometheus.NewDesc("sluice_tier_remote_cache_bytes",
		"Disk the remote-segment cache holds, files being assembled included.", nil, nil)
)

var partitionLabels = []string{"topic", "partition"}

type brokerCollector struct{ b *Broker }

func (c brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descLocalStart, descRemoteEnd, descHW, descLEO, descLeader, descISR, descReadOnly, descFailedLogs, descController, descTierCorrupt,
		descRemoteCacheHits, descRemoteCacheMisses, descRemoteCacheEvictions, descRemoteCacheCorrupt, descRemoteCacheBytes,
		descProducedRecords, descProducedBytes, descFetchedRecords, descFetchedBytes} {
		ch <- d
	}
}

func (c brokerCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b2f := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge(descController, b2f(c.b.ctl.isActive()))
	gauge(descFailedLogs, float64(len(c.b.failedLogs())))
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(descProducedRecords, c.b.traffic.producedRecords.Load())
	counter(descProducedBytes, c.b.traffic.producedBytes.Load())
	counter(descFetchedRecords, c.b.traffic.fetchedRecords.Load())
	counter(descFetchedBytes, c.b.traffic.fetchedBytes.Load())
	if c.b.cold != nil {
		st := c.b.cold.Stats()
		ch <- prometheus.MustNewConstMetric(descTierCorrupt, prometheus.CounterValue, float64(st.CorruptIndexes), "index")
		ch <- prometheus.MustNewConstMetric(descTierCorrupt, prometheus.CounterValue, float64(st.CorruptLogs), "log")
		counter(descRemoteCacheHits, st.Disk.Hits)
		counter(descRemoteCacheMisses, st.Disk.Misses)
		counter(descRemoteCacheEvictions, st.Disk.Evictions)
		counter(descRemoteCacheCorrupt, st.Disk.Corrupt)
		gauge(descRemoteCacheBytes, float64(st.Disk.Bytes))
	}
	for _, p := range c.b.parts.all() {
		l := []string{p.Topic, strconv.Itoa(int(p.ID))}
		pos := p.positions()
		gauge(descLogStart, float64(pos.LogStartOffset), l...)
		gauge(descLocalStart, float64(pos.LocalStartOffset), l...)
		gauge(descRemoteEnd, float64(pos.RemoteEndOffset), l...)
		gauge(descHW, float64(pos.HighWatermark), l...)
		gauge(descLEO, float64(pos.LogEndOffset), l...)
		gauge(descReadOnly, b2f(p.log.Err() != nil), l...)
		p.mu.Lock()
		leading := p.leaderLocked() == nil
		isr := p.isrSizeLocked()
		p.mu.Unlock()
		gauge(descLeader, b2f(leading), l...)
		if leading {
			gauge(descISR, float64(isr), l...)
		}
	}
}

// metricsHandler serves this broker's metrics and the Go runtime's.
func (b *Broker) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(brokerCollector{b}, groupLagCollector{b}, panicCollector{b}, authCollector{b}, kafkaCollector{b}, quota.NewCollector(b.quotas.enforcer, "sluice_broker_quota"), collectors.NewGoCollector())
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
