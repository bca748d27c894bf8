// Package faulttest runs a real multi-process Sluice cluster for fault
// tests: N `sluice broker` processes and one `sluice gateway` (AddGateway
// starts more) over the shared test ZooKeeper (each cluster under a chroot
// of its own), with a TCP proxy on every broker→broker link and every
// broker→ZooKeeper link so that a test can cut them, and process control
// (SIGKILL, restart, SIGSTOP/SIGCONT) by PID.
//
// A History (history.go) records what concurrent producers were told and
// checks it against what the partitions hold at the end; replicas.go compares
// the replicas' logs batch by batch. idempotent.go runs idempotent producers
// that resend each request until it is acknowledged (through a
// GatewayProxy that can drop answers); with Options.S3 the brokers tier to
// the test S3 server, each through a proxy (Broker.S3Link) that can stall
// in the middle of a chosen request, and tiered.go scrubs the
// remote-segment records against the bucket. groups.go runs consumer-group
// members of the public API and records their calls; groupcheck.go holds
// them against the topic and the group's records in __consumer_offsets.
//
// The package also holds the fault tests of single processes: `sluice dev`
// SIGKILLed mid-load and while its cleaner compacts (StartDev, in
// devprocess.go), and under hostile clients and corrupted tiered objects
// with its memory and goroutines watched; `sluice sink` processes of
// both kinds killed at every failpoint, as zombies, and with their gateway
// killed (sinkproc_test.go, sinks3proc_test.go); and secured broker and
// gateway processes. Binary builds the sluice binary (with -tags
// sluice_failpoints) once per test binary; cmd/sluice's tests use it and
// StartDev too.
//
// One seed drives every random choice of a test; it is printed at the start
// and on failure, and SLUICE_FAULT_SEED replays it. SLUICE_TEST_BINARY
// runs a prebuilt sluice binary instead of building ./cmd/sluice.
//
// Run (ZooKeeper comes from the test services):
//
//	make services-up && source .services/env
//	go test -count=1 -v ./internal/faulttest
//
// or scripts/with-services.sh go test -count=1 ./internal/faulttest.
package faulttest

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/tcpproxy"
	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/tlsfiles"
	"github.com/sluice-io/sluice/tier"
)

// EnvSeed overrides the seed of every test in the package.
const EnvSeed = "SLUICE_FAULT_SEED"

// Options shape a cluster. Zero values take the defaults.
type Options struct {
	// Brokers is the number of brokers, IDs 1..Brokers. Default 3.
	Brokers int
	// SessionTimeout is each broker's --zk-session-timeout. Default 3 s
	// (ZooKeeper raises it to its minimum, 2 ticks: 4 s with tickTime 2000).
	SessionTimeout time.Duration
	// ReplicaLagTimeMax is each broker's --replica-lag-time-max. Default 2 s.
	ReplicaLagTimeMax time.Duration
	// LogLevel of every process. Default info, or EnvLogLevel when set.
	LogLevel string
	// S3, when set, gives every broker tiered storage in that bucket
	// (--s3-*), each through a proxy of its own (Broker.S3Link), under a
	// fresh random key prefix (Cluster.S3Prefix). Default nil: local only.
	S3 *testsvc.S3Config
	// TierInterval is each broker's --tier-interval when S3 is set.
	// Default 1 s.
	TierInterval time.Duration
	// OffsetsTopicPartitions is every gateway's --offsets-topic-partitions:
	// the partition count of __consumer_offsets, which the first group
	// request creates. Default 0: the gateway's own default.
	OffsetsTopicPartitions int
	// ZKUser and ZKPassword, when set, are every process's ZooKeeper
	// digest credentials (--zk-user, --zk-password-file), and Coord's.
	// Default none: open nodes.
	ZKUser, ZKPassword string
	// TLS, when set, serves every broker's internal API over TLS only and
	// requires client certificates: a cluster CA (Cluster.CA) signs each
	// broker's certificate (server and client, common name broker:<id>)
	// and the gateways' client certificate (common name gateway), which
	// name the nodes to the brokers, and every node calls brokers with it (--tls-cert,
	// --tls-key, --tls-client-ca, --cluster-ca; --cluster-cert and
	// --cluster-key on gateways). Default false: plain HTTP.
	TLS bool
	// Kafka makes every broker serve Kafka's protocol (--kafka-addr) on a
	// loopback port of its own (Broker.KafkaAddr). Default false.
	Kafka bool
	// DataDirs gives brokers the data directory the test chose (one on a
	// filesystem it mounted, say), by ID; it must outlive the processes.
	// Default: a fresh temporary directory each.
	DataDirs map[int32]string
	// BrokerArgs are added to a broker's flags, by ID, after the harness's
	// own (a repeated flag overrides: the last one counts). Default none.
	BrokerArgs map[int32][]string
	// BrokerEnv is added to a broker's environment, by ID. Default none.
	BrokerEnv map[int32][]string
	// GatewayArgs are added to every gateway's flags (--push-allow-private
	// for tests that push to endpoints on loopback). Default none.
	GatewayArgs []string
}

// EnvLogLevel sets the processes' default log level (debug shows, among
// others, every failed follower fetch).
const EnvLogLevel = "SLUICE_FAULTTEST_LOG_LEVEL"

func (o *Options) defaults() {
	if o.Brokers == 0 {
		o.Brokers = 3
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 3 * time.Second
	}
	if o.ReplicaLagTimeMax == 0 {
		o.ReplicaLagTimeMax = 2 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = os.Getenv(EnvLogLevel)
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.TierInterval == 0 {
		o.TierInterval = time.Second
	}
}

// Cluster is a running cluster. Its methods are called from the test's
// goroutine, except Logf, HTTP and the read-only API helpers, which any
// goroutine may call.
type Cluster struct {
	T    testing.TB
	Seed uint64
	// Rand is the test's source of random choices; only the test's goroutine
	// uses it (NewRand gives other goroutines their own).
	Rand *rand.Rand
	// URL is the gateway's base URL, http://127.0.0.1:PORT.
	URL string
	// ZK is the connect string with the cluster's chroot (direct, no proxy).
	ZK string
	// S3Prefix is the key prefix of the brokers' bucket ("" without S3).
	S3Prefix string
	// CA signs the brokers' and gateways' certificates (nil without
	// Options.TLS).
	CA *testcerts.CA

	opts    Options
	start   time.Time
	brokers map[int32]*Broker
	gateway *process
	more    []*process                   // gateways AddGateway started
	links   map[[2]int32]*tcpproxy.Proxy // [from, to]
	extra   []*tcpproxy.Proxy            // other proxies (GatewayProxy), closed with the links
	http    *http.Client
	zk      coord.Coordinator // Coord, opened on first use
	// zkPasswordFile holds Options.ZKPassword for the processes.
	zkPasswordFile string
	// gwCert and gwKey are the gateways' client certificate (Options.TLS).
	gwCert, gwKey string
	bucket        tier.Bucket // Bucket, opened on first use
}

// Broker is one broker process of the cluster.
type Broker struct {
	ID      int32
	Addr    string // internal API, as registered (the gateway dials it directly)
	DataDir string
	// ZKLink is the proxy between this broker and ZooKeeper.
	ZKLink *tcpproxy.Proxy
	// S3Link is the proxy between this broker and the S3 server (nil
	// without Options.S3). A broker (re)started while it is cut waits for
	// the bucket at startup, up to 30 s, and then exits.
	S3Link *tcpproxy.Proxy
	// URL is the internal API's base URL: http://Addr, or https://Addr
	// with Options.TLS.
	URL string
	// KafkaAddr is the Kafka listener's address with Options.Kafka, else "".
	KafkaAddr string
	proc      *process
}

// SeedFor returns the seed of a test: SLUICE_FAULT_SEED if set, else a fresh
// random one.
func SeedFor(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv(EnvSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", EnvSeed, s)
		}
		return n
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
}

// Start builds the binary (once), starts the brokers and the gateway, and
// waits until the gateway sees every broker and a controller. Everything is
// killed and closed when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts.defaults()
	seed := SeedFor(t)
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	c := &Cluster{
		T: t, Seed: seed, Rand: rand.New(rand.NewPCG(seed, h.Sum64())),
		opts: opts, start: time.Now(), brokers: map[int32]*Broker{}, links: map[[2]int32]*tcpproxy.Proxy{},
		http: &http.Client{Timeout: 15 * time.Second},
	}
	c.Logf("seed %d (replay with %s=%d)", seed, EnvSeed, seed)
	bin := Binary(t)
	c.ZK = testsvc.ZooKeeper(t) + "/faulttest-" + randomHex(6)

	// The data dirs first: cleanups run last-in first-out, so they are
	// removed only after the processes writing to them are dead.
	dataDirs := make([]string, opts.Brokers)
	for i := range dataDirs {
		dataDirs[i] = opts.DataDirs[int32(i+1)]
		if dataDirs[i] == "" {
			dataDirs[i] = t.TempDir()
		}
	}
	// On the way out: report (while the logs are fresh), then kill the
	// processes, then close the proxies they dialled, then delete the
	// objects they tiered.
	t.Cleanup(c.removeObjects)
	t.Cleanup(c.closeProxies)
	t.Cleanup(c.killAll)
	t.Cleanup(c.reportOnFailure)

	// The brokers', the gateway's, then with Kafka the listeners'.
	nPorts := opts.Brokers + 1
	if opts.Kafka {
		nPorts += opts.Brokers
	}
	ports := testsvc.FreePorts(t, nPorts)
	kafkaPorts := ports[opts.Brokers+1:]
	for i := 1; i <= opts.Brokers; i++ {
		id := int32(i)
		b := &Broker{ID: id, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i-1])), DataDir: dataDirs[i-1]}
		if opts.Kafka {
			b.KafkaAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(kafkaPorts[i-1]))
		}
		b.URL = "http://" + b.Addr
		if opts.TLS {
			b.URL = "https://" + b.Addr
		}
		zkHost, _, _ := strings.Cut(c.ZK, "/")
		p, err := tcpproxy.New(fmt.Sprintf("b%d→zk", id), zkHost, c.Logf)
		if err != nil {
			t.Fatal(err)
		}
		b.ZKLink = p
		if opts.S3 != nil {
			s3, err := tcpproxy.New(fmt.Sprintf("b%d→s3", id), opts.S3.Endpoint, c.Logf)
			if err != nil {
				t.Fatal(err)
			}
			b.S3Link = s3
		}
		c.brokers[id] = b
	}
	if opts.S3 != nil {
		c.S3Prefix = "faulttest-" + randomHex(6)
	}
	for _, from := range c.BrokerIDs() {
		for _, to := range c.BrokerIDs() {
			if from == to {
				continue
			}
			p, err := tcpproxy.New(fmt.Sprintf("b%d→b%d", from, to), c.brokers[to].Addr, c.Logf)
			if err != nil {
				t.Fatal(err)
			}
			c.links[[2]int32{from, to}] = p
		}
	}
	_, chroot, _ := strings.Cut(c.ZK, "/")
	var tlsArgs func(id int32) []string
	if opts.TLS {
		tlsArgs = c.setUpTLS()
	}
	if opts.ZKUser != "" {
		c.zkPasswordFile = filepath.Join(t.TempDir(), "zk-password")
		if err := os.WriteFile(c.zkPasswordFile, []byte(opts.ZKPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range c.BrokerIDs() {
		b := c.brokers[id]
		args := []string{"broker", "--id", strconv.Itoa(int(id)), "--addr", b.Addr, "--data", b.DataDir,
			"--zk", b.ZKLink.Addr() + "/" + chroot,
			"--zk-session-timeout", opts.SessionTimeout.String(),
			"--replica-lag-time-max", opts.ReplicaLagTimeMax.String(),
			"--log-level", opts.LogLevel}
		args = append(args, c.zkCredentialArgs()...)
		if b.KafkaAddr != "" {
			args = append(args, "--kafka-addr", b.KafkaAddr)
		}
		if n := opts.OffsetsTopicPartitions; n > 0 {
			args = append(args, "--offsets-topic-partitions", strconv.Itoa(n))
		}
		if tlsArgs != nil {
			args = append(args, tlsArgs(id)...)
		}
		if s3 := opts.S3; s3 != nil {
			secretFile := filepath.Join(filepath.Dir(b.DataDir), fmt.Sprintf("s3-secret-%d", id))
			if err := os.WriteFile(secretFile, []byte(s3.SecretKey+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--s3-endpoint", b.S3Link.Addr(), "--s3-bucket", s3.Bucket, "--s3-prefix", c.S3Prefix,
				"--s3-access-key", s3.AccessKey, "--s3-secret-key-file", secretFile, "--tier-interval", opts.TierInterval.String())
		}
		for _, to := range c.BrokerIDs() {
			if to != id {
				args = append(args, "--peer-address", fmt.Sprintf("%d=%s", to, c.links[[2]int32{id, to}].Addr()))
			}
		}
		args = append(args, opts.BrokerArgs[id]...)
		b.proc = newProcess(t, fmt.Sprintf("b%d", id), bin, args, c.Logf)
		b.proc.env = opts.BrokerEnv[id]
		if err := b.proc.start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range c.BrokerIDs() {
		c.waitBrokerReady(id, 30*time.Second)
	}
	gwAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[opts.Brokers]))
	c.URL = "http://" + gwAddr
	c.gateway = newProcess(t, "gw", bin, c.gatewayArgs(gwAddr), c.Logf)
	if err := c.gateway.start(); err != nil {
		t.Fatal(err)
	}
	c.waitGateway(c.URL)
	c.Logf("cluster up: %d brokers, gateway %s, zk %s", opts.Brokers, c.URL, c.ZK)
	return c
}

func (c *Cluster) gatewayArgs(addr string) []string {
	args := []string{"gateway", "--addr", addr, "--zk", c.ZK,
		"--zk-session-timeout", c.opts.SessionTimeout.String(), "--log-level", c.opts.LogLevel}
	if n := c.opts.OffsetsTopicPartitions; n > 0 {
		args = append(args, "--offsets-topic-partitions", strconv.Itoa(n))
	}
	args = append(args, c.zkCredentialArgs()...)
	if c.opts.TLS {
		args = append(args, "--cluster-ca", c.CA.File, "--cluster-cert", c.gwCert, "--cluster-key", c.gwKey)
	}
	return append(args, c.opts.GatewayArgs...)
}

// setUpTLS issues the cluster's certificates, makes the test's own HTTP
// client a holder of one (it calls brokers' health routes), and returns the
// TLS flags of each broker.
func (c *Cluster) setUpTLS() func(id int32) []string {
	c.CA = testcerts.NewCA(c.T, "sluice cluster CA")
	c.gwCert, c.gwKey = c.CA.Issue(c.T, "gateway", testcerts.Client)
	cfg, err := tlsfiles.ClientOptions{CAFile: c.CA.File, CertFile: c.gwCert, KeyFile: c.gwKey}.Config()
	if err != nil {
		c.T.Fatal(err)
	}
	c.http.Transport = &http.Transport{TLSClientConfig: cfg}
	return func(id int32) []string {
		// The common name is the node name: brokers identify their callers by it.
		cert, key := c.CA.Issue(c.T, brokerapi.BrokerNode(id), testcerts.Server|testcerts.Client)
		return []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", c.CA.File, "--cluster-ca", c.CA.File}
	}
}

// zkCredentialArgs are the processes' ZooKeeper credential flags.
func (c *Cluster) zkCredentialArgs() []string {
	if c.opts.ZKUser == "" {
		return nil
	}
	return []string{"--zk-user", c.opts.ZKUser, "--zk-password-file", c.zkPasswordFile}
}

// waitGateway waits until the gateway at url sees every broker and a
// controller.
func (c *Cluster) waitGateway(url string) {
	c.T.Helper()
	c.WaitFor("the gateway "+url+" to see every broker and a controller", 30*time.Second, func() (bool, string) {
		var ci api.ClusterInfo
		if err := c.getJSON(url+"/v1/cluster", &ci, 5*time.Second); err != nil {
			return false, err.Error()
		}
		alive := 0
		for _, b := range ci.Brokers {
			if b.Alive {
				alive++
			}
		}
		return alive == c.opts.Brokers && ci.Controller > 0, fmt.Sprintf("%d alive, controller %d", alive, ci.Controller)
	})
}

// AddGateway starts one more gateway (gateways hold no state: any of them
// serves any request, group members included), waits until it sees every
// broker and a controller, and returns its base URL. It is killed with the
// rest of the cluster.
func (c *Cluster) AddGateway() string {
	c.T.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testsvc.FreePorts(c.T, 1)[0]))
	p := newProcess(c.T, fmt.Sprintf("gw%d", len(c.more)+2), Binary(c.T), c.gatewayArgs(addr), c.Logf)
	c.more = append(c.more, p)
	if err := p.start(); err != nil {
		c.T.Fatal(err)
	}
	c.waitGateway("http://" + addr)
	return "http://" + addr
}

// KillGateway SIGKILLs the gateway serving url (the first one or one
// AddGateway started) and waits for it to exit.
func (c *Cluster) KillGateway(url string) {
	c.T.Helper()
	addr := strings.TrimPrefix(url, "http://")
	for _, p := range append([]*process{c.gateway}, c.more...) {
		if p != nil && slices.Contains(p.args, addr) {
			if err := p.signal(syscall.SIGKILL); err != nil {
				c.T.Fatal(err)
			}
			_ = p.wait(10 * time.Second)
			c.Logf("killed the gateway at %s", addr)
			return
		}
	}
	c.T.Fatalf("no gateway serves %s", url)
}

// GatewayProxy returns a new proxy in front of the gateway, for a client
// whose link to the gateway a test wants to break (its URL is
// "http://"+Addr()). It is closed with the cluster's other proxies.
func (c *Cluster) GatewayProxy(name string) *tcpproxy.Proxy {
	c.T.Helper()
	p, err := tcpproxy.New(name, strings.TrimPrefix(c.URL, "http://"), c.Logf)
	if err != nil {
		c.T.Fatal(err)
	}
	c.extra = append(c.extra, p)
	return p
}

// Logf logs with the wall-clock time (to match the processes' log lines)
// and the time since the cluster started.
func (c *Cluster) Logf(format string, args ...any) {
	now := time.Now()
	c.T.Logf("%s +%6.3fs  %s", now.Format("15:04:05.000"), now.Sub(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// NewRand returns a random source for another goroutine, drawn from Rand.
func (c *Cluster) NewRand() *rand.Rand {
	return rand.New(rand.NewPCG(c.Rand.Uint64(), c.Rand.Uint64()))
}

// BrokerIDs lists the brokers' IDs in order.
func (c *Cluster) BrokerIDs() []int32 {
	ids := make([]int32, 0, len(c.brokers))
	for id := range c.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Broker returns broker id.
func (c *Cluster) Broker(id int32) *Broker {
	b, ok := c.brokers[id]
	if !ok {
		c.T.Fatalf("no broker %d", id)
	}
	return b
}

// Link is the proxy that carries broker from's calls to broker to.
func (c *Cluster) Link(from, to int32) *tcpproxy.Proxy {
	p, ok := c.links[[2]int32{from, to}]
	if !ok {
		c.T.Fatalf("no link b%d→b%d", from, to)
	}
	return p
}

// Kill sends SIGKILL to broker id and waits for it to exit.
func (c *Cluster) Kill(id int32) {
	c.T.Helper()
	c.Logf("FAULT: SIGKILL b%d (pid %d)", id, c.Broker(id).proc.pid())
	if err := c.Broker(id).proc.kill(); err != nil {
		c.T.Fatal(err)
	}
}

// Stop ends broker id cleanly (SIGTERM; SIGKILL after 15 s).
func (c *Cluster) Stop(id int32) {
	c.T.Helper()
	c.Logf("stopping b%d (SIGTERM, pid %d)", id, c.Broker(id).proc.pid())
	if err := c.Broker(id).proc.stop(15 * time.Second); err != nil {
		c.T.Fatal(err)
	}
}

// StartBroker starts broker id again (same ID, data dir, ports) without
// waiting for it to be ready.
func (c *Cluster) StartBroker(id int32) {
	c.T.Helper()
	if err := c.Broker(id).proc.start(); err != nil {
		c.T.Fatal(err)
	}
}

// Restart starts broker id again and waits until it is registered.
func (c *Cluster) Restart(id int32) {
	c.T.Helper()
	c.StartBroker(id)
	c.waitBrokerReady(id, 30*time.Second)
}

// Pause sends SIGSTOP to broker id.
func (c *Cluster) Pause(id int32) {
	c.T.Helper()
	c.Logf("FAULT: SIGSTOP b%d (pid %d)", id, c.Broker(id).proc.pid())
	if err := c.Broker(id).proc.signal(syscall.SIGSTOP); err != nil {
		c.T.Fatal(err)
	}
}

// Resume sends SIGCONT to broker id.
func (c *Cluster) Resume(id int32) {
	c.T.Helper()
	c.Logf("SIGCONT b%d (pid %d)", id, c.Broker(id).proc.pid())
	if err := c.Broker(id).proc.signal(syscall.SIGCONT); err != nil {
		c.T.Fatal(err)
	}
}

// BrokerLog returns every output line of broker id so far, all runs, each
// prefixed with "b<id>#<run>| ".
func (c *Cluster) BrokerLog(id int32) []string { return c.Broker(id).proc.allLines() }

// GrepBrokerLog returns broker id's lines that contain every one of words.
func (c *Cluster) GrepBrokerLog(id int32, words ...string) []string {
	var out []string
	for _, l := range c.BrokerLog(id) {
		ok := true
		for _, w := range words {
			if !strings.Contains(l, w) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// grepAll is GrepBrokerLog over every broker, in broker order.
func (c *Cluster) grepAll(words ...string) []string {
	var out []string
	for _, id := range c.BrokerIDs() {
		out = append(out, c.GrepBrokerLog(id, words...)...)
	}
	return out
}

// Running reports whether broker id's process is alive (paused counts).
func (c *Cluster) Running(id int32) bool { return c.Broker(id).proc.running() }

// waitBrokerReady polls the broker's health route until it is registered
// and has metadata.
func (c *Cluster) waitBrokerReady(id int32, timeout time.Duration) {
	c.T.Helper()
	b := c.Broker(id)
	c.WaitFor(fmt.Sprintf("b%d to be ready", id), timeout, func() (bool, string) {
		if !b.proc.running() {
			c.T.Fatalf("b%d exited while starting; its last lines:\n%s", id, strings.Join(b.proc.lastLines(), "\n"))
		}
		var h brokerapi.Health
		err := c.getJSON(b.URL+brokerapi.PathHealth, &h, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		return h.Ready, fmt.Sprintf("%+v", h)
	})
}

// WaitFor polls cond every 50 ms until it holds, and fails the test with
// cond's last status if timeout passes first. It returns how long it waited.
func (c *Cluster) WaitFor(what string, timeout time.Duration, cond func() (ok bool, status string)) time.Duration {
	c.T.Helper()
	d, status, ok := c.Poll(timeout, cond)
	if !ok {
		c.T.Fatalf("timed out after %v waiting for %s; last status: %s", timeout, what, status)
	}
	return d
}

// Poll is WaitFor without failing: ok is false on timeout.
func (c *Cluster) Poll(timeout time.Duration, cond func() (ok bool, status string)) (waited time.Duration, status string, ok bool) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, status = cond()
		if ok {
			return time.Since(start), status, true
		}
		if time.Now().After(deadline) {
			return time.Since(start), status, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- teardown

func (c *Cluster) killAll() {
	for _, gw := range append([]*process{c.gateway}, c.more...) {
		if gw == nil {
			continue
		}
		if err := gw.kill(); err != nil {
			c.T.Errorf("cleanup: %v", err)
		}
	}
	for _, id := range c.BrokerIDs() {
		if p := c.brokers[id].proc; p != nil {
			if err := p.kill(); err != nil {
				c.T.Errorf("cleanup: %v", err)
			}
		}
	}
}

func (c *Cluster) closeProxies() {
	for _, p := range c.links {
		p.Close()
	}
	for _, p := range c.extra {
		p.Close()
	}
	for _, b := range c.brokers {
		if b.ZKLink != nil {
			b.ZKLink.Close()
		}
		if b.S3Link != nil {
			b.S3Link.Close()
		}
	}
}

// removeObjects deletes the objects the brokers put under the cluster's S3
// prefix, unless the test failed (they are kept for a look then).
func (c *Cluster) removeObjects() {
	if c.opts.S3 == nil || c.S3Prefix == "" {
		return
	}
	if c.T.Failed() {
		c.T.Logf("objects kept for inspection: s3://%s/%s/", c.opts.S3.Bucket, c.S3Prefix)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := tier.NewS3(ctx, s3Options(*c.opts.S3, c.opts.S3.Endpoint, c.S3Prefix))
	if err != nil {
		c.T.Errorf("cleanup: %v", err)
		return
	}
	defer b.Close()
	var keys []string
	err = b.List(ctx, "", func(o tier.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	for _, k := range keys {
		if derr := b.Delete(ctx, k); derr != nil && err == nil {
			err = derr
		}
	}
	if err != nil {
		c.T.Errorf("cleanup: deleting the objects under %s: %v", c.S3Prefix, err)
	}
}

func (c *Cluster) reportOnFailure() {
	if !c.T.Failed() {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "FAILED with seed %d (replay: %s=%d go test -run '^%s$' ./internal/faulttest)\n", c.Seed, EnvSeed, c.Seed, c.T.Name())
	procs := []*process{}
	for _, id := range c.BrokerIDs() {
		if p := c.brokers[id].proc; p != nil {
			procs = append(procs, p)
		}
	}
	if c.gateway != nil {
		procs = append(procs, c.gateway)
	}
	procs = append(procs, c.more...)
	for _, p := range procs {
		fmt.Fprintf(&sb, "---- last lines of %s (pid %d, running %v):\n", p.name, p.pid(), p.running())
		for _, l := range p.lastLines() {
			sb.WriteString("  " + l + "\n")
		}
	}
	c.T.Log(sb.String())
}

// ---------------------------------------------------------------- helpers

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
