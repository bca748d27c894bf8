package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/kafka"
)

// KafkaOptions configure the broker's Kafka protocol listener (package
// kafka). It is off unless Addr or Listener is set: no port is opened.
type KafkaOptions struct {
	// Addr is the listen address, host:port. Default "": no listener.
	Addr string
	// Listener, when set, is served instead of listening on Addr.
	Listener net.Listener
	// AdvertisedAddr is the host:port Kafka clients are told to dial,
	// registered beside the internal API's address. Default: the
	// listener's address.
	AdvertisedAddr string
	// Limits bound connections and requests; zero fields take kafka's
	// defaults (100 MiB requests, 10,000 connections, 1,000 per IP, 10
	// minutes idle).
	Limits kafka.Limits
	// SecurityProtocol is Kafka's: PLAINTEXT, SSL (TLS with the broker's
	// certificate, Options.TLS), SASL_PLAINTEXT or SASL_SSL (every client
	// authenticates with SASL first). Default: SSL with Options.TLS, else
	// PLAINTEXT, and the SASL one of the two with Options.Auth.Required,
	// which refuses PLAINTEXT and SSL (anonymous Kafka clients would get
	// past the ACLs).
	SecurityProtocol string
	// SASLMechanisms are those a SASL listener serves, of PLAIN (the
	// password is a Sluice token), SCRAM-SHA-256 and SCRAM-SHA-512.
	// Default all three.
	SASLMechanisms []string
}

func (o KafkaOptions) enabled() bool { return o.Addr != "" || o.Listener != nil }

// kafkaListener is the broker's Kafka listener; zero while it is off.
type kafkaListener struct {
	srv  *kafka.Server
	ln   net.Listener
	addr string // advertised
	// protocol is the listener's security protocol (PLAINTEXT, SSL,
	// SASL_PLAINTEXT, SASL_SSL); sasl is true for the SASL ones.
	protocol string
	sasl     bool
}

// openKafka listens for Kafka clients when the options ask for it, with
// the security protocol the options and the broker's TLS and auth options
// make (kafkaauth.go).
func (b *Broker) openKafka(tlsCfg *tls.Config) error {
	o := b.opts.Kafka
	if !o.enabled() {
		return nil
	}
	sec, err := b.kafkaSecurity(tlsCfg)
	if err != nil {
		return err
	}
	ko := kafka.Options{Backend: kafkaBackend{b}, Limits: o.Limits, Logger: b.log, TLS: sec.tls}
	if sec.sasl {
		ko.RequireAuth, ko.Mechanisms, ko.Authenticator = true, sec.mechanisms, kafkaAuth{b}
	}
	srv, err := kafka.New(ko)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.Addr); err != nil {
			return fmt.Errorf("broker: Kafka listener: %w", err)
		}
	}
	addr := o.AdvertisedAddr
	if addr == "" {
		addr = ln.Addr().String()
	}
	b.kafka = kafkaListener{srv: srv, ln: ln, addr: addr, protocol: sec.protocol, sasl: sec.sasl}
	return nil
}

// startKafka serves the Kafka listener on a goroutine the broker owns.
func (b *Broker) startKafka() {
	if b.kafka.srv == nil {
		return
	}
	b.goFunc(func() {
		if err := b.kafka.srv.Serve(b.kafka.ln); err != nil && !errors.Is(err, kafka.ErrServerClosed) {
			b.log.Error("Kafka listener stopped", "err", err)
		}
	})
}

// closeKafka stops the Kafka listener: requests under way are answered
// (5 s at most), then every connection closes. Before Start it closes
// the listener that New opened.
func (b *Broker) closeKafka() {
	if b.kafka.srv == nil {
		return
	}
	b.kafka.srv.Close()
	b.kafka.ln.Close()
}

// KafkaAddr is the address Kafka clients are told to dial, "" when the
// broker serves no Kafka protocol.
func (b *Broker) KafkaAddr() string { return b.kafka.addr }

// kafkaBackend is what the Kafka listener asks the broker: the same
// metadata view, partitions, offsets lookups and producer ids the
// internal API uses.
type kafkaBackend struct{ b *Broker }

func (k kafkaBackend) Metadata() *cluster.Metadata { return k.b.view.Current() }

// Produce appends a Kafka client's batch through Partition.Produce, as the
// internal API's produce does, after the check Kafka applies to a batch and
// the gateway to a raw HTTP body: the topic's max.message.bytes bounds the
// whole batch.
func (k kafkaBackend) Produce(ctx context.Context, topic string, partition int32, batch []byte, acks int16) (kafka.ProduceResult, error) {
	b := k.b
	p, err := b.parts.get(b.view.Current(), topic, partition)
	if err != nil {
		return kafka.ProduceResult{}, err
	}
	if max := p.config().MaxMessageBytes; len(batch) > max {
		return kafka.ProduceResult{}, api.Errorf(api.CodeRecordTooLarge, "a record batch of %d bytes for %s exceeds %s %d", len(batch), p, api.ConfigMaxMessageBytes, max)
	}
	res, err := p.Produce(ctx, batch, Acks(acks), -1)
	if err != nil {
		return kafka.ProduceResult{}, err
	}
	b.traffic.produced(res.BaseOffset, res.LastOffset, len(batch))
	return kafka.ProduceResult{BaseOffset: res.BaseOffset, LogStartOffset: p.positions().LogStartOffset}, nil
}

// ListOffset answers as the internal API's list-offsets does, with the
// leader epoch of the offset found: the current epoch for the latest (as
// Kafka answers), else the epoch whose range holds the offset.
func (k kafkaBackend) ListOffset(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (kafka.OffsetResult, error) {
	b := k.b
	p, err := b.parts.get(b.view.Current(), topic, partition)
	if err != nil {
		return kafka.OffsetResult{}, err
	}
	if err := p.checkLeader(currentLeaderEpoch); err != nil {
		return kafka.OffsetResult{}, err
	}
	pos := p.positions()
	switch timestamp {
	case -1:
		epoch, _, _ := p.leaderState()
		return kafka.OffsetResult{Offset: pos.HighWatermark, LeaderEpoch: epoch}, nil
	case -2:
		return kafka.OffsetResult{Offset: pos.LogStartOffset, LeaderEpoch: epochAt(p.log.Epochs(), pos.LogStartOffset)}, nil
	}
	off, ok, err := b.offsetForTimestamp(ctx, p, timestamp)
	if err != nil {
		return kafka.OffsetResult{}, err
	}
	if !ok {
		return kafka.OffsetResult{Offset: -1, LeaderEpoch: -1}, nil
	}
	return kafka.OffsetResult{Offset: off, LeaderEpoch: epochAt(p.log.Epochs(), off)}, nil
}

// epochAt is the epoch of the lineage entry whose range holds off, or -1
// when the lineage starts after it.
func epochAt(lineage []commitlog.EpochEntry, off int64) int32 {
	epoch := int32(-1)
	for _, e := range lineage {
		if e.StartOffset > off {
			break
		}
		epoch = e.Epoch
	}
	return epoch
}

// InitProducerID issues an id from the sequence POST /v1/producers uses,
// to the SASL principal of the connection where the cluster checks ACLs
// (as the gateway issues HTTP producers' ids), else to none.
func (k kafkaBackend) InitProducerID(ctx context.Context) (int64, int16, error) {
	principal := ""
	if p, ok := auth.PrincipalIn(ctx); ok && k.b.opts.Auth.Required {
		principal = p
	}
	id, err := cluster.NewProducerID(ctx, k.b.opts.Coord, principal)
	return id, 0, err
}

var (
	descKafkaConns = prometheus.NewDesc("sluice_broker_kafka_connections",
		"Open connections of the Kafka listener.", nil, nil)
	descKafkaRefused = prometheus.NewDesc("sluice_broker_kafka_connections_refused_total",
		"Kafka connections closed at once by max.connections or max.connections.per.ip.", nil, nil)
	descKafkaFetched = prometheus.NewDesc("sluice_broker_kafka_fetch_bytes_total",
		"Record bytes written in the Kafka listener's Fetch answers.", nil, nil)
	descKafkaSendfile = prometheus.NewDesc("sluice_broker_kafka_fetch_sendfile_bytes_total",
		"Record bytes of Fetch answers copied from a segment file to a plaintext TCP connection, which Linux sends with sendfile.", nil, nil)
	descKafkaSASLFailed = prometheus.NewDesc("sluice_broker_kafka_sasl_failed_total",
		"SASL handshakes and authentications the Kafka listener refused (wrong credentials, a mechanism not served, a step out of order).", nil, nil)
	descKafkaAuthzRefused = prometheus.NewDesc("sluice_broker_kafka_authz_refused_total",
		"Kafka requests the ACLs refused, wholly or for some of their topics.", nil, nil)
)

// kafkaCollector exports the Kafka listener's counters, when it runs.
type kafkaCollector struct{ b *Broker }

func (c kafkaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKafkaConns
	ch <- descKafkaRefused
	ch <- descKafkaFetched
	ch <- descKafkaSendfile
	ch <- descKafkaSASLFailed
	ch <- descKafkaAuthzRefused
}

func (c kafkaCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b.kafka.srv == nil {
		return
	}
	st := c.b.kafka.srv.Stats()
	ch <- prometheus.MustNewConstMetric(descKafkaConns, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(descKafkaRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(descKafkaFetched, prometheus.CounterValue, float64(st.FetchedBytes))
	ch <- prometheus.MustNewConstMetric(descKafkaSendfile, prometheus.CounterValue, float64(st.SendfileBytes))
	ch <- prometheus.MustNewConstMetric(descKafkaSASLFailed, prometheus.CounterValue, float64(st.SASLFailed))
	ch <- prometheus.MustNewConstMetric(descKafkaAuthzRefused, prometheus.CounterValue, float64(st.AuthzRefused))
}
