package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/tier"
)

// zkFlags are the coordinator flags shared by broker and gateway.
type zkFlags struct {
	connect        *string
	sessionTimeout *time.Duration
	user           *string
	passwordFile   *string
}

func addZKFlags(fs *flag.FlagSet) zkFlags {
	return zkFlags{
		connect:        fs.String("zk", envOr("SLUICE_ZK", "127.0.0.1:2181"), "ZooKeeper ensemble host:port[,host:port][/chroot] (env SLUICE_ZK)"),
		sessionTimeout: fs.Duration("zk-session-timeout", envDuration("SLUICE_ZK_SESSION_TIMEOUT", 6*time.Second), "ZooKeeper session timeout (env SLUICE_ZK_SESSION_TIMEOUT)"),
		user:           fs.String("zk-user", envOr("SLUICE_ZK_USER", ""), "ZooKeeper digest user: sessions authenticate as it and every node the cluster creates is readable and writable by it alone; every node of the cluster needs the same user and password (env SLUICE_ZK_USER)"),
		// Like the S3 secret: never on the command line, never in -h.
		passwordFile: fs.String("zk-password-file", "", "file holding the password of --zk-user (trailing newline ignored); default: the environment variable SLUICE_ZK_PASSWORD"),
	}
}

// credentials are the digest user and password, both or neither.
func (z zkFlags) credentials() (user, password string, err error) {
	password = os.Getenv("SLUICE_ZK_PASSWORD")
	if *z.passwordFile != "" {
		b, err := os.ReadFile(*z.passwordFile)
		if err != nil {
			return "", "", fmt.Errorf("--zk-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	switch {
	case *z.user == "" && password != "":
		return "", "", errors.New("a ZooKeeper password (SLUICE_ZK_PASSWORD or --zk-password-file) needs --zk-user")
	case *z.user != "" && password == "":
		return "", "", errors.New("--zk-user needs a password: SLUICE_ZK_PASSWORD or --zk-password-file")
	}
	return *z.user, password, nil
}

func (z zkFlags) dial(ctx context.Context, logger *slog.Logger) (*coord.ZK, error) {
	servers, chroot, err := coord.ParseZKConnect(*z.connect)
	if err != nil {
		return nil, err
	}
	user, password, err := z.credentials()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return coord.DialZK(ctx, coord.ZKOptions{
		Servers: servers, Chroot: chroot, SessionTimeout: *z.sessionTimeout,
		Logger:     log.New(slogWriter{logger}, "", 0),
		DigestUser: user, DigestPassword: password,
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
	kafkaAddr := fs.String("kafka-addr", envOr("SLUICE_KAFKA_ADDR", ""), "serve Kafka's wire protocol on this address, host:port (env SLUICE_KAFKA_ADDR; default: none, no port opened)")
	kafkaAdvertised := fs.String("kafka-advertised-addr", envOr("SLUICE_KAFKA_ADVERTISED_ADDR", ""), "host:port Kafka clients are told to dial (env SLUICE_KAFKA_ADVERTISED_ADDR; default: the --kafka-addr listen address)")
	kafkaSec := addKafkaSecurityFlags(fs)
	data := fs.String("data", envOr("SLUICE_DATA", "./data"), "data directory (env SLUICE_DATA)")
	lag := fs.Duration("replica-lag-time-max", envDuration("SLUICE_REPLICA_LAG_TIME_MAX", 10*time.Second), "a follower not caught up for this long leaves the ISR (env SLUICE_REPLICA_LAG_TIME_MAX)")
	brokerOffsetsParts := fs.Int("offsets-topic-partitions", envInt("SLUICE_OFFSETS_TOPIC_PARTITIONS", 50), "partitions of __consumer_offsets when a Kafka client's first group request makes this broker create it (env SLUICE_OFFSETS_TOPIC_PARTITIONS; as the gateways')")
	minFreeBytes := fs.Int64("min-free-bytes", envInt64("SLUICE_MIN_FREE_BYTES", 256<<20), "below the larger of this many free bytes and --min-free-percent of the data directory's filesystem, refuse appends and hand every replica over; -1: no watermark (env SLUICE_MIN_FREE_BYTES)")
	minFreePercent := fs.Float64("min-free-percent", envFloat("SLUICE_MIN_FREE_PERCENT", 1), "see --min-free-bytes (env SLUICE_MIN_FREE_PERCENT)")
	recheck := fs.Duration("failed-log-recheck", envDuration("SLUICE_FAILED_LOG_RECHECK", 5*time.Second), "first wait before the disk of a log that failed is probed to open the log again; doubles per failed probe, up to 20 s (env SLUICE_FAILED_LOG_RECHECK)")
	peers := peerFlag{}
	fs.Var(peers, "peer-address", "dial broker ID at this address instead of its registered one, ID=host:port (repeatable)")
	logLevel := fs.String("log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	tierInterval := fs.Duration("tier-interval", envDuration("SLUICE_TIER_INTERVAL", 5*time.Second), "how often closed segments are copied to the object store (env SLUICE_TIER_INTERVAL)")
	cleanerInterval := fs.Duration("cleaner-interval", envDuration("SLUICE_CLEANER_INTERVAL", 15*time.Second), "how often compacted topics' closed segments are cleaned (env SLUICE_CLEANER_INTERVAL)")
	drainTimeout := fs.Duration("drain-timeout", envDuration("SLUICE_DRAIN_TIMEOUT", 30*time.Second), "on SIGTERM, wait up to this long for this broker's leaderships to move to other replicas before stopping; 0 stops at once (env SLUICE_DRAIN_TIMEOUT)")
	remoteCache := addRemoteCacheFlag(fs)
	openFiles := fs.Int("open-segment-files", envInt("SLUICE_OPEN_SEGMENT_FILES", commitlog.DefaultMaxOpenFiles), "segment file descriptors kept open between uses, across every partition here; more open while more are in use at once (env SLUICE_OPEN_SEGMENT_FILES)")
	orphanGrace := fs.Duration("tier-orphan-grace", envDuration("SLUICE_TIER_ORPHAN_GRACE", 10*time.Minute), "objects no record names are deleted once this old; longer than any upload (env SLUICE_TIER_ORPHAN_GRACE)")
	zk := addZKFlags(fs)
	s3 := addS3Flags(fs)
	limits := addLimitFlags(fs, api.LimitScopeBroker)
	secretf := addClusterSecretFlag(fs)
	authf := addBrokerAuthFlags(fs)
	tlsf := addBrokerTLSFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := limits.err(); err != nil {
		return err
	}
	secret, err := secretf.value()
	if err != nil {
		return err
	}
	authOpts, err := authf.brokerOptions()
	if err != nil {
		return err
	}
	serverTLS, peerTLS, err := tlsf.options()
	if err != nil {
		return err
	}
	if authOpts.Required && secret == nil && (serverTLS == nil || serverTLS.ClientCAFile == "") {
		return errors.New("--auth required needs the cluster secret (--cluster-secret-file or SLUICE_CLUSTER_SECRET) or --tls-client-ca with node certificates (common name gateway or broker:<id>): without either anyone who reaches the broker's port could name any principal")
	}
	if *id <= 0 {
		return fmt.Errorf("--id must be a positive integer")
	}
	if *recheck <= 0 {
		return fmt.Errorf("--failed-log-recheck must be positive")
	}
	if *remoteCache < 0 {
		return fmt.Errorf("--remote-cache-bytes must be 0 (off) or positive")
	}
	logger := newLogger(*logLevel) // the broker adds its id to every line
	c, err := zk.dial(ctx, logger)
	if err != nil {
		return fmt.Errorf("ZooKeeper %s: %w", *zk.connect, err)
	}
	defer closeLogged(logger, "the ZooKeeper session", c)
	bucket, err := s3.open(ctx)
	if err != nil {
		return err
	}
	if bucket != nil {
		defer closeLogged(logger, "the object store", bucket)
		logger.Info("tiered storage", "bucket", bucket)
	}
	faultFS, stopFaults, err := brokerFaultFS(ctx, *data, logger)
	if err != nil {
		return err
	}
	defer stopFaults() // after the broker closed (deferred below)
	b, err := broker.New(broker.Options{
		ID: int32(*id), Addr: *addr, AdvertisedAddr: *advertised, DataDir: *data, FS: faultFS,
		Coord: c, ReplicaLagTimeMax: *lag, FailedLogRecheck: *recheck, OffsetsTopicPartitions: *brokerOffsetsParts,
		MinFreeBytes: *minFreeBytes, MinFreePercent: *minFreePercent, SessionTimeout: *zk.sessionTimeout,
		PeerAddresses: peers, Logger: logger, TierInterval: *tierInterval, OrphanGrace: *orphanGrace,
		CleanerInterval: *cleanerInterval, MaxPartitionsPerBroker: limits.maxPartitionsPerBroker(),
		OpenSegmentFiles:        *openFiles,
		RemoteCacheBytes:        *remoteCache,
		MaxGroupsPerCoordinator: limits.maxGroupsPerCoordinator(),
		Bucket:                  bucket, // nil: local only
		ClusterSecret:           secret,
		Auth:                    authOpts,
		TLS:                     serverTLS,
		PeerTLS:                 peerTLS,
		Kafka: broker.KafkaOptions{Addr: *kafkaAddr, AdvertisedAddr: *kafkaAdvertised, Limits: limits.kafkaLimits(),
			SecurityProtocol: *kafkaSec.protocol, SASLMechanisms: kafkaSec.mechanisms()},
	})
	if err != nil {
		return err
	}
	defer closeLogged(logger, "the broker", b)
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = b.Start(startCtx)
	cancel()
	if err != nil {
		return err
	}
	logger.Info("broker up", "addr", b.Addr(), "data", *data, "zk", *zk.connect)
	fmt.Printf("broker %d listening on %s\n", *id, b.Addr())
	if k := b.KafkaAddr(); k != "" {
		fmt.Printf("broker %d serving Kafka clients on %s (%s)\n", *id, k, b.KafkaSecurityProtocol())
	}
	<-ctx.Done()
	if *drainTimeout > 0 {
		// Controlled shutdown: the session (and with it the registration)
		// ends only after the leaderships have moved.
		dctx, cancel := context.WithTimeout(context.Background(), *drainTimeout)
		held, err := b.Drain(dctx)
		cancel()
		if err != nil {
			logger.Warn("controlled shutdown: leaderships not all moved in time; stopping anyway", "timeout", *drainTimeout, "leaderships", held)
		} else {
			logger.Info("controlled shutdown: leaderships handed over", "leaderships_kept", held)
		}
	}
	return nil
}

// runGateway is `sluice gateway`: a stateless public API node.
func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:8080"), "public HTTP address (env SLUICE_ADDR)")
	logLevel := fs.String("log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	gwLimits := addLimitFlags(fs, api.LimitScopeGateway)
	offsetsParts := fs.Int("offsets-topic-partitions", envInt("SLUICE_OFFSETS_TOPIC_PARTITIONS", 50), "partitions of __consumer_offsets when this gateway creates it (env SLUICE_OFFSETS_TOPIC_PARTITIONS)")
	zk := addZKFlags(fs)
	authf := addAuthFlags(fs)
	secretf := addClusterSecretFlag(fs)
	tlsf := addTLSFlags(fs)
	originf := addOriginFlags(fs)
	clusterTLS := addClusterTLSFlags(fs)
	pushPrivate := fs.Bool("push-allow-private", envOr("SLUICE_PUSH_ALLOW_PRIVATE", "") == "true",
		"let push subscriptions deliver to loopback, private and link-local addresses (env SLUICE_PUSH_ALLOW_PRIVATE=true)")
	pushInstance := fs.String("push-instance", envOr("SLUICE_PUSH_INSTANCE", ""),
		"this gateway's static member id in push groups; keep it across restarts (default gw-<host>-<addr>; env SLUICE_PUSH_INSTANCE)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tlsOpts, err := tlsf.options()
	if err != nil {
		return err
	}
	brokerTLS, err := clusterTLS.options()
	if err != nil {
		return err
	}
	authOpts, _, err := authf.options("")
	if err != nil {
		return err
	}
	secret, err := secretf.value()
	if err != nil {
		return err
	}
	logger := newLogger(*logLevel).With("component", "gateway")
	c, err := zk.dial(ctx, logger)
	if err != nil {
		return fmt.Errorf("ZooKeeper %s: %w", *zk.connect, err)
	}
	defer closeLogged(logger, "the ZooKeeper session", c)
	if err := gwLimits.err(); err != nil {
		return err
	}
	gwOpts := gateway.Options{Addr: *addr, Coord: c, Version: version, OpenAPI: sluice.OpenAPI, Logger: logger, OffsetsTopicPartitions: *offsetsParts, Auth: authOpts, ClusterSecret: secret, TLS: tlsOpts, BrokerTLS: brokerTLS,
		PushAllowPrivate: *pushPrivate, PushInstance: *pushInstance}
	gwLimits.applyGateway(&gwOpts)
	originf.apply(&gwOpts)
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return err
	}
	gw.Start()
	defer closeLogged(logger, "the gateway", gw)
	scheme := "http"
	if tlsOpts != nil {
		scheme = "https"
	}
	fmt.Printf("gateway listening on %s://%s\n", scheme, gw.Addr())
	<-ctx.Done()
	return nil
}

// s3Flags configure the broker's object store.
type s3Flags struct {
	endpoint, bucket, prefix, accessKey, secretKeyFile *string
	tls                                                *bool
}

func addS3Flags(fs *flag.FlagSet) s3Flags {
	return s3Flags{
		endpoint:  fs.String("s3-endpoint", envOr("SLUICE_S3_ENDPOINT", ""), "S3 endpoint host:port for tiered storage; empty keeps data local only (env SLUICE_S3_ENDPOINT)"),
		bucket:    fs.String("s3-bucket", envOr("SLUICE_S3_BUCKET", ""), "S3 bucket (env SLUICE_S3_BUCKET)"),
		prefix:    fs.String("s3-prefix", envOr("SLUICE_S3_PREFIX", ""), "key prefix inside the bucket (env SLUICE_S3_PREFIX)"),
		accessKey: fs.String("s3-access-key", envOr("SLUICE_S3_ACCESS_KEY", ""), "S3 access key (env SLUICE_S3_ACCESS_KEY)"),
		// The secret never goes on the command line (where ps shows it) nor
		// into -h's defaults: it comes from the environment or a file.
		secretKeyFile: fs.String("s3-secret-key-file", "", "file holding the S3 secret key (trailing newline ignored); default: the environment variable SLUICE_S3_SECRET_KEY"),
		tls:           fs.Bool("s3-tls", envOr("SLUICE_S3_TLS", "") == "true", "use HTTPS to the S3 endpoint (env SLUICE_S3_TLS=true)"),
	}
}

// open returns the configured bucket, or nil when no endpoint is set.
func (s s3Flags) open(ctx context.Context) (tier.Bucket, error) {
	if *s.endpoint == "" {
		return nil, nil
	}
	return s.openS3(ctx)
}

// openS3 returns the configured S3 bucket; an endpoint is required.
func (s s3Flags) openS3(ctx context.Context) (*tier.S3, error) {
	if *s.endpoint == "" {
		return nil, errors.New("--s3-endpoint is required")
	}
	secret := os.Getenv("SLUICE_S3_SECRET_KEY")
	if *s.secretKeyFile != "" {
		b, err := os.ReadFile(*s.secretKeyFile)
		if err != nil {
			return nil, fmt.Errorf("S3 secret key: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := tier.NewS3(ctx, tier.S3Options{
		Endpoint: *s.endpoint, Bucket: *s.bucket, Prefix: *s.prefix,
		AccessKey: *s.accessKey, SecretKey: secret, TLS: *s.tls,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 %s/%s: %w", *s.endpoint, *s.bucket, err)
	}
	return b, nil
}

// defaultRemoteCacheBytes is --remote-cache-bytes' default: enough for a
// few hundred segments of a replay to be read again from local disk,
// small beside a broker's data directory.
const defaultRemoteCacheBytes = 1 << 30

// addRemoteCacheFlag adds --remote-cache-bytes, the bound of the broker's
// disk cache of remote segments (broker.Options.RemoteCacheBytes).
func addRemoteCacheFlag(fs *flag.FlagSet) *int64 {
	return fs.Int64("remote-cache-bytes", envInt64("SLUICE_REMOTE_CACHE_BYTES", defaultRemoteCacheBytes),
		"bound of the disk cache of tiered segments read back from the object store, under <data>/remote-cache: a segment read again is served from local disk with sendfile; 0: off, the memory cache only (env SLUICE_REMOTE_CACHE_BYTES)")
}
