package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/sink"
)

const sinkUsage = "usage: sluice sink redis --group G --topics T[,T] [--redis redis://host:port/db] [--mode stream|hash|string] [--prefix P] [--parallel-writes N] [--url URL] [--metrics-addr ADDR]\n" +
	"       sluice sink s3 --group G --topics T[,T] --s3-endpoint HOST:PORT --s3-bucket B [--prefix P] [--max-records N] [--max-bytes N] [--max-interval D] [--parallel-writes N] [--url URL] [--metrics-addr ADDR]"

// runSink is `sluice sink redis|s3`: an exactly-once sink as a group member.
func runSink(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "s3" {
		return runSinkS3(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "redis" {
		return errors.New(sinkUsage)
	}
	fs := flag.NewFlagSet("sink redis", flag.ContinueOnError)
	base := gatewayFlag(fs)
	group := fs.String("group", envOr("SLUICE_GROUP", ""), "consumer group (env SLUICE_GROUP); its members share the partitions")
	topics := fs.String("topics", envOr("SLUICE_TOPICS", ""), "topics to write, comma-separated (env SLUICE_TOPICS)")
	redisURL := fs.String("redis", envOr("SLUICE_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (env SLUICE_REDIS_URL)")
	mode := fs.String("mode", sink.ModeStream, "stream (XADD per record), hash (HSET key value per topic) or string (SET per key)")
	prefix := fs.String("prefix", sink.DefaultPrefix, "prefix of every Redis key written")
	instance := fs.String("instance-id", envOr("SLUICE_INSTANCE_ID", ""), "static member id: a restart takes the partitions back without a rebalance")
	session := fs.Duration("session-timeout", 0, "group session timeout (0: the server's 30s)")
	maxRecords := fs.Int("max-records", 500, "records per poll")
	parallel := fs.Int("parallel-writes", 8, "partitions of one poll written at once (each partition's batches stay in order)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on this address (/metrics); empty: none")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *group == "" || *topics == "" {
		return errors.New(sinkUsage)
	}
	ropts, err := redis.ParseURL(*redisURL)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	store, err := sink.NewRedisStore(rdb, sink.RedisOptions{Group: *group, Mode: *mode, Prefix: *prefix})
	if err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	metrics := sink.NewMetrics()
	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, metrics.Handler())
		if err != nil {
			return err
		}
		defer stop()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := sink.New(cl, sink.Options{
		Group: *group, Topics: strings.Split(*topics, ","), Store: store, InstanceID: *instance,
		SessionTimeout: *session, MaxRecords: *maxRecords, ParallelWrites: *parallel, Metrics: metrics, Logger: logger,
	})
	if err != nil {
		return err
	}
	return runWithProgress(ctx, s, *group, nil)
}

// runWithProgress runs s, with a progress line when stderr is a terminal;
// extra, if not nil, adds the store's own figures to it. Once the sink has
// joined group it prints "sink joined group <group>" on stdout: the process
// is then up (its signal handlers installed, SIGTERM a clean stop), and
// tests and scripts can wait for the line.
func runWithProgress(ctx context.Context, s *sink.Sink, group string, extra func() string) error {
	if isTerminal(os.Stderr) {
		stop := startProgress(s, extra)
		defer stop()
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.Joined():
			fmt.Printf("sink joined group %s\n", group)
		case <-done:
		}
	}()
	return s.Run(ctx)
}

// serveMetrics serves h at /metrics on addr until the returned stop is called.
func serveMetrics(addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return func() { _ = srv.Close(); <-done }, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress rewrites one line on stderr every second with the sink's
// totals and rate (and extra's figures); stop ends it and moves to a new line.
func startProgress(s *sink.Sink, extra func() string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := int64(0), time.Now()
		for {
			select {
			case <-quit:
				fmt.Fprintln(os.Stderr)
				return
			case now := <-t.C:
				st := s.Stats()
				rate := float64(st.Written-last) / now.Sub(lastAt).Seconds()
				last, lastAt = st.Written, now
				line := fmt.Sprintf("written %d records in %d batches, %.0f rec/s, %d partitions, %d fenced", st.Written, st.Batches, rate, st.Partitions, st.Fenced)
				if extra != nil {
					line += ", " + extra()
				}
				fmt.Fprint(os.Stderr, "\r\033[K"+line)
			}
		}
	}()
	return func() { close(quit); <-done }
}
