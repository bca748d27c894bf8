package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/embedded"
	"github.com/sluice-io/sluice/gateway"
)

// runDev is `sluice dev`: the embedded default. Everything lives under --data:
// the coordinator's state (coord.json) and one directory per broker, so a
// restart on the same --data finds every topic and record.
func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:8080"), "public HTTP address (env SLUICE_ADDR)")
	data := fs.String("data", envOr("SLUICE_DATA", "./data"), "data directory (env SLUICE_DATA)")
	nBrokers := fs.Int("brokers", envInt("SLUICE_BROKERS", 3), "brokers to run in the process (env SLUICE_BROKERS); topics get replication factor min(3, brokers) by default")
	logLevel := fs.String("log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	kafkaAddr := fs.String("kafka-addr", envOr("SLUICE_KAFKA_ADDR", ""), "serve Kafka's wire protocol: broker N listens on host:PORT+N-1, and host:PORT is the bootstrap (env SLUICE_KAFKA_ADDR; default: none, no port opened)")
	cleanerInterval := fs.Duration("cleaner-interval", envDuration("SLUICE_CLEANER_INTERVAL", 15*time.Second), "how often compacted topics' closed segments are cleaned (env SLUICE_CLEANER_INTERVAL)")
	remoteCache := addRemoteCacheFlag(fs)
	limits := addLimitFlags(fs, api.LimitScopeGateway, api.LimitScopeBroker)
	authf := addAuthFlags(fs)
	originf := addOriginFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := limits.err(); err != nil {
		return err
	}
	if *nBrokers < 1 || *nBrokers > 9 {
		return errors.New("--brokers must be 1 to 9")
	}
	if *remoteCache < 0 {
		return errors.New("--remote-cache-bytes must be 0 (off) or positive")
	}
	kafkaAddrOf, err := kafkaAddrs(*kafkaAddr, *nBrokers)
	if err != nil {
		return err
	}
	log := newLogger(*logLevel)
	if err := os.MkdirAll(*data, 0o755); err != nil {
		return err
	}
	authOpts, madeToken, err := authf.options(*data)
	if err != nil {
		return err
	}
	// With auth required, the nodes of the process share a fresh secret:
	// the brokers' internal ports (on loopback) take only signed calls.
	var secret []byte
	if authOpts.Required {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
	}
	// Everything under --data: the coordinator's state (coord.json), one
	// directory per broker, and tier/, a local directory standing in for S3
	// that tiered topics (remote.storage.enable=true) copy closed segments to.
	cl, err := embedded.Start(ctx, embedded.Options{
		Brokers: *nBrokers, DataDir: *data, Addr: *addr,
		PersistCoord: true, LocalBucket: true, Logger: log,
		Broker: func(id int, o *broker.Options) {
			o.ClusterSecret = secret
			o.Auth = broker.AuthOptions{Required: authOpts.Required, SuperUsers: authOpts.SuperUsers}
			o.CleanerInterval = *cleanerInterval
			o.RemoteCacheBytes = *remoteCache
			o.MaxPartitionsPerBroker = limits.maxPartitionsPerBroker()
			o.MaxGroupsPerCoordinator = limits.maxGroupsPerCoordinator()
			o.Kafka = broker.KafkaOptions{Addr: kafkaAddrOf(id), Limits: limits.kafkaLimits()}
			o.OffsetsTopicPartitions = 8 // as the gateway's below
		},
		Gateway: func(o *gateway.Options) {
			o.Version = version
			// A small cluster on one machine: 8 partitions, not a cluster's 50.
			o.OffsetsTopicPartitions = 8
			o.Auth = authOpts
			o.ClusterSecret = secret
			limits.applyGateway(o)
			originf.apply(o)
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := cl.Close(); err != nil {
			log.Error("closing the cluster", "err", err)
		}
	}()

	base := cl.URL()
	if authOpts.Required {
		fmt.Printf("Authentication is required: send Authorization: Bearer <token>.\n")
		if madeToken != "" {
			fmt.Printf("Bootstrap token (User:admin, a super user), kept in %s:\n  %s\n\n", filepath.Join(*data, "bootstrap-token"), madeToken)
		}
	} else {
		fmt.Printf("Authentication is off: anyone who reaches %s may do everything (--auth required turns it on).\n", base)
	}
	fmt.Printf(`Sluice %s is up: gateway %s, %d broker(s), data in %s

Dashboard: %s/ui/

Try:
  curl -s -X POST %s/v1/topics -H 'Content-Type: application/json' -d '{"name":"orders","partitions":3}'
  curl -s -X POST %s/v1/topics/orders/records -H 'Content-Type: application/json' -d '{"records":[{"key":"user-1","value":{"total":42}}]}'
  curl -s '%s/v1/topics/orders/partitions/%d/records?offset=earliest'

Ctrl-C stops it.
`, version, base, *nBrokers, *data, base, base, base, base, api.KeyPartition([]byte("user-1"), 3))
	if *kafkaAddr != "" {
		if authOpts.Required {
			fmt.Printf(`
Kafka clients on %s authenticate with SASL (SASL_PLAINTEXT): PLAIN with a token as the password
(from sluice tokens create; the bootstrap token is the gateway's only), or SCRAM (sluice scram set)
  kcat -b %s -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=PLAIN -X sasl.username=NAME -X sasl.password=TOKEN -L
`, kafkaBrokers(cl), cl.Broker(1).KafkaAddr())
		} else {
			fmt.Printf(`
Kafka clients on %s (metadata, produce, fetch, consumer groups):
  kcat -b %s -L
  kcat -b %s -C -t orders -o beginning -e
  kcat -b %s -G billing orders
`, kafkaBrokers(cl), cl.Broker(1).KafkaAddr(), cl.Broker(1).KafkaAddr(), cl.Broker(1).KafkaAddr())
		}
	}
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envInt64(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
		return v
	}
	return def
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// kafkaAddrs reads `sluice dev --kafka-addr host:PORT`: broker N (1-based)
// serves Kafka on host:PORT+N-1, so host:PORT is a bootstrap address; port
// 0 gives every broker a port of its own choosing. "" serves none.
func kafkaAddrs(addr string, brokers int) (func(id int) string, error) {
	if addr == "" {
		return func(int) string { return "" }, nil
	}
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 0 || port+brokers-1 > 65535 {
		return nil, fmt.Errorf("--kafka-addr %q: want host:port, with room for %d ports from it", addr, brokers)
	}
	return func(id int) string {
		if port == 0 {
			return net.JoinHostPort(host, "0")
		}
		return net.JoinHostPort(host, strconv.Itoa(port+id-1))
	}, nil
}

// kafkaBrokers lists the brokers' Kafka addresses, comma-separated.
func kafkaBrokers(cl *embedded.Cluster) string {
	var addrs []string
	for id := 1; id <= cl.Brokers(); id++ {
		if b := cl.Broker(id); b != nil {
			addrs = append(addrs, b.KafkaAddr())
		}
	}
	return strings.Join(addrs, ",")
}
