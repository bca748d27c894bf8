package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
)

// zkFlags are the coordinator flags shared by broker and gateway.
type zkFlags struct {
	connect        *string
	sessionTimeout *time.Duration
}

func addZKFlags(fs *flag.FlagSet) zkFlags {
	return zkFlags{
		connect:        fs.String("zk", envOr("SLUICE_ZK", "127.0.0.1:2181"), "ZooKeeper ensemble host:port[,host:port][/chroot] (env SLUICE_ZK)"),
		sessionTimeout: fs.Duration("zk-session-timeout", envDuration("SLUICE_ZK_SESSION_TIMEOUT", 6*time.Second), "ZooKeeper session timeout (env SLUICE_ZK_SESSION_TIMEOUT)"),
	}
}

func (z zkFlags) dial(ctx context.Context, logger *slog.Logger) (*coord.ZK, error) {
	servers, chroot, err := coord.ParseZKConnect(*z.connect)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return coord.DialZK(ctx, coord.ZKOptions{
		Servers: servers, Chroot: chroot, SessionTimeout: *z.sessionTimeout,
		Logger: log.New(slogWriter{logger}, "", 0),
	})
}

// slogWriter turns the ZooKeeper client's log lines into debug records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(p)), "component", "zk")
	return len(p), nil
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// peerFlag collects --peer-address id=host:port overrides.
type peerFlag map[int32]string

func (p peerFlag) String() string { return fmt.Sprint(map[int32]string(p)) }
func (p peerFlag) Set(v string) error {
	id, addr, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(id)
	if !ok || err != nil || n <= 0 || addr == "" {
		return fmt.Errorf("want ID=host:port, got %q", v)
	}
	p[int32(n)] = addr
	return nil
}

// runBroker is `sluice broker`: one broker node coordinated through ZooKeeper.
func runBroker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	id := fs.Int("id", envInt("SLUICE_BROKER_ID", 0), "broker ID, a positive integer unique in the cluster (env SLUICE_BROKER_ID)")
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:9001"), "internal API listen address (env SLUICE_ADDR)")
	advertised := fs.String("advertised-addr", envOr("SLUICE_ADVERTISED_ADDR", ""), "address other nodes dial (env SLUICE_ADVERTISED_ADDR; default: the listen address)")
	data := fs.String("data", envOr("SLUICE_DATA", "./data"), "data directory (env SLUICE_DATA)")
	lag := fs.Duration("replica-lag-time-max", envDuration("SLUICE_REPLICA_LAG_TIME_MAX", 10*time.Second), "a follower not caught up for this long leaves the ISR (env SLUICE_REPLICA_LAG_TIME_MAX)")
	peers := peerFlag{}
	fs.Var(peers, "peer-address", "dial broker ID at this address instead of its registered one, ID=host:port (repeatable)")
	logLevel := fs.String("log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	zk := addZKFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id <= 0 {
		return fmt.Errorf("--id must be a positive integer")
	}
	logger := newLogger(*logLevel).With("broker", *id)
	c, err := zk.dial(ctx, logger)
	if err != nil {
		return fmt.Errorf("ZooKeeper %s: %w", *zk.connect, err)
	}
	defer c.Close()
	b, err := broker.New(broker.Options{
		ID: int32(*id), Addr: *addr, AdvertisedAddr: *advertised, DataDir: *data,
		Coord: c, ReplicaLagTimeMax: *lag, SessionTimeout: *zk.sessionTimeout,
		PeerAddresses: peers, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer b.Close()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = b.Start(startCtx)
	cancel()
	if err != nil {
		return err
	}
	logger.Info("broker up", "addr", b.Addr(), "data", *data, "zk", *zk.connect)
	fmt.Printf("broker %d listening on %s\n", *id, b.Addr())
	<-ctx.Done()
	return nil
}

// runGateway is `sluice gateway`: a stateless public API node.
func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:8080"), "public HTTP address (env SLUICE_ADDR)")
	logLevel := fs.String("log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	zk := addZKFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := newLogger(*logLevel).With("component", "gateway")
	c, err := zk.dial(ctx, logger)
	if err != nil {
		return fmt.Errorf("ZooKeeper %s: %w", *zk.connect, err)
	}
	defer c.Close()
	gw, err := gateway.New(gateway.Options{Addr: *addr, Coord: c, Version: version, OpenAPI: sluice.OpenAPI, Logger: logger})
	if err != nil {
		return err
	}
	gw.Start()
	defer gw.Close()
	fmt.Printf("gateway listening on http://%s\n", gw.Addr())
	<-ctx.Done()
	return nil
}
