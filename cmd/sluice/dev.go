package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/tier"
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
	cleanerInterval := fs.Duration("cleaner-interval", envDuration("SLUICE_CLEANER_INTERVAL", 15*time.Second), "how often compacted topics' closed segments are cleaned (env SLUICE_CLEANER_INTERVAL)")
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
	store, err := coord.NewMemStore(coord.MemOptions{Path: filepath.Join(*data, "coord.json")})
	if err != nil {
		return fmt.Errorf("coordinator state: %w", err)
	}
	defer closeLogged(log, "the coordinator store", store)

	// Tiered topics (remote.storage.enable=true) copy closed segments to a
	// local directory standing in for S3.
	bucket, err := tier.OpenLocalDir(filepath.Join(*data, "tier"))
	if err != nil {
		return fmt.Errorf("object store directory: %w", err)
	}
	defer closeLogged(log, "the object store", bucket)

	var brokers []*broker.Broker
	defer func() {
		for _, b := range brokers {
			if err := b.Close(); err != nil {
				log.Error("closing broker", "broker", b.ID(), "err", err)
			}
		}
	}()
	for i := 1; i <= *nBrokers; i++ {
		b, err := broker.New(broker.Options{
			ID:      int32(i),
			Addr:    "127.0.0.1:0",
			DataDir: filepath.Join(*data, "broker-"+strconv.Itoa(i)),
			Coord:   store.Session(),
			Logger:  log,
			Bucket:  bucket,

			ClusterSecret:           secret,
			Auth:                    broker.AuthOptions{Required: authOpts.Required, SuperUsers: authOpts.SuperUsers},
			CleanerInterval:         *cleanerInterval,
			MaxPartitionsPerBroker:  limits.maxPartitionsPerBroker(),
			MaxGroupsPerCoordinator: limits.maxGroupsPerCoordinator(),
		})
		if err != nil {
			return err
		}
		brokers = append(brokers, b)
		startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = b.Start(startCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("starting broker %d: %w", i, err)
		}
	}
	gwOpts := gateway.Options{
		Addr:    *addr,
		Coord:   store.Session(),
		Version: version,
		OpenAPI: sluice.OpenAPI,
		Logger:  log,
		// A small cluster on one machine: 8 partitions, not a cluster's 50.
		OffsetsTopicPartitions: 8,
		Auth:                   authOpts,
		ClusterSecret:          secret,
	}
	limits.applyGateway(&gwOpts)
	originf.apply(&gwOpts)
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return err
	}
	gw.Start()
	defer closeLogged(log, "the gateway", gw)

	base := "http://" + gw.Addr()
	if err := waitBrokers(ctx, base, *nBrokers, authOpts.BootstrapToken); err != nil {
		return err
	}
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
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

// waitBrokers polls the gateway until it sees n live brokers and a controller,
// so that the first topic created gets its full replication factor.
func waitBrokers(ctx context.Context, base string, n int, token string) error {
	cl, err := client.New(base, client.WithToken(token), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ci, err := cl.Cluster(ctx)
		if err == nil && ci.Controller >= 0 {
			alive := 0
			for _, b := range ci.Brokers {
				if b.Alive {
					alive++
				}
			}
			if alive >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway does not see %d brokers after 30 s", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
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
