// Package testsvc hands tests the addresses of the real services that
// scripts/services.sh starts for `make test`: ZooKeeper, Redis, an S3 server
// (versitygw) and headless Chromium.
//
// A missing service is a failure, never a skip: a test that quietly skips its
// check against the real thing is a defect. Run the tests through `make test`,
// or `make services-up` and then `source .services/env` before `go test`.
// The one exception is the fast lane, `go test -short` (`make test-unit`),
// which runs without services: there a test that needs one is skipped, and
// says which. The full lane never runs with -short.
package testsvc

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The variables written to the env file by scripts/services.sh start.
const (
	EnvZooKeeper     = "SLUICE_TEST_ZK"           // host:port of a standalone ZooKeeper
	EnvZKJava        = "SLUICE_TEST_ZK_JAVA"      // java binary that runs ZooKeeper
	EnvZKClasspath   = "SLUICE_TEST_ZK_CLASSPATH" // classpath holding ZooKeeper and slf4j-simple
	EnvRedis         = "SLUICE_TEST_REDIS"        // host:port of Redis
	EnvS3Endpoint    = "SLUICE_TEST_S3_ENDPOINT"  // host:port of the S3 server (plain HTTP)
	EnvS3AccessKey   = "SLUICE_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey   = "SLUICE_TEST_S3_SECRET_KEY"
	EnvS3Bucket      = "SLUICE_TEST_S3_BUCKET" // a bucket that exists
	EnvS3Region      = "SLUICE_TEST_S3_REGION" // optional, DefaultS3Region if unset
	EnvChromium      = "SLUICE_TEST_CHROMIUM"  // path of the chromium binary
	EnvKcat          = "SLUICE_TEST_KCAT"      // path of the kcat binary
	EnvNode          = "SLUICE_TEST_NODE"      // path of the node binary
	EnvKafkajs       = "SLUICE_TEST_KAFKAJS"   // node_modules dir holding kafkajs
	DefaultS3Region  = "us-east-1"
	zkStandaloneMain = "org.apache.zookeeper.server.ZooKeeperServerMain"
)

// shortLane reports whether this is the fast lane (go test -short); a
// variable so that the tests of this package can try both lanes.
var shortLane = testing.Short

func need(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" && shortLane() {
		t.Skipf("-short: %s is not set (this test needs a real service; the full lane, `make test`, runs it)", name)
	}
	if v == "" {
		t.Fatalf("%s is not set: run the tests through `make test`, which starts the real services", name)
	}
	return v
}

// ZooKeeper returns the host:port of the shared ZooKeeper. Tests share it:
// each should work under its own root znode (for example one named after t.Name()).
func ZooKeeper(t testing.TB) string {
	t.Helper()
	return need(t, EnvZooKeeper)
}

// Redis returns the host:port of the shared Redis. Tests share it: use
// distinct key prefixes, or SELECT a database of your own.
func Redis(t testing.TB) string {
	t.Helper()
	return need(t, EnvRedis)
}

// S3Config says how to reach the S3 server: plain HTTP, path-style, static V4 credentials.
type S3Config struct {
	Endpoint  string // host:port, no scheme
	AccessKey string
	SecretKey string
	Bucket    string // exists already; tests share it, so use a key prefix of your own
	Region    string
}

// S3 returns the S3 server's settings.
func S3(t testing.TB) S3Config {
	t.Helper()
	c := S3Config{
		Endpoint:  need(t, EnvS3Endpoint),
		AccessKey: need(t, EnvS3AccessKey),
		SecretKey: need(t, EnvS3SecretKey),
		Bucket:    need(t, EnvS3Bucket),
		Region:    os.Getenv(EnvS3Region),
	}
	if c.Region == "" {
		c.Region = DefaultS3Region
	}
	return c
}

// Chromium returns the path of the headless Chromium binary. As root it needs
// --no-sandbox.
func Chromium(t testing.TB) string {
	t.Helper()
	return need(t, EnvChromium)
}

// Kcat returns the path of kcat (Debian's, on librdkafka), the Kafka client
// the Kafka listener's tests run.
func Kcat(t testing.TB) string {
	t.Helper()
	return need(t, EnvKcat)
}

// Kafkajs returns the node binary and the node_modules dir that holds
// kafkajs (npm), for scripts to find it with NODE_PATH.
func Kafkajs(t testing.TB) (node, nodePath string) {
	t.Helper()
	return need(t, EnvNode), need(t, EnvKafkajs)
}

// ZKRuntime is what it takes to run a ZooKeeper server of one's own.
type ZKRuntime struct {
	Java      string
	Classpath string
}

// ZooKeeperRuntime returns the java binary and classpath of the installed ZooKeeper.
func ZooKeeperRuntime(t testing.TB) ZKRuntime {
	t.Helper()
	return ZKRuntime{Java: need(t, EnvZKJava), Classpath: need(t, EnvZKClasspath)}
}

// ZKServer is a standalone ZooKeeper of a test's own, on a fresh loopback port,
// for tests that must stop or crash ZooKeeper and bring it back. It keeps its
// port and data dir across Stop and Start, so clients reconnect to the same
// address and find the same data.
type ZKServer struct {
	Addr string // 127.0.0.1:port

	t       testing.TB
	rt      ZKRuntime
	dir     string
	mu      sync.Mutex
	cmd     *exec.Cmd
	waitErr chan error
}

// StartZooKeeper starts a standalone ZooKeeper and waits until it serves.
// It is killed when the test ends.
func StartZooKeeper(t testing.TB) *ZKServer {
	t.Helper()
	z := &ZKServer{t: t, rt: ZooKeeperRuntime(t), dir: t.TempDir()}
	port := FreePorts(t, 1)[0]
	z.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := strings.Join([]string{
		"tickTime=2000",
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + filepath.Join(z.dir, "data"),
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false", // else it listens on 0.0.0.0:8080
		"4lw.commands.whitelist=ruok,srvr,stat,mntr",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(z.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatalf("testsvc: write zoo.cfg: %v", err)
	}
	t.Cleanup(z.Stop)
	z.Start()
	return z
}

// Start (re)starts the server on its port and data dir and waits until it serves.
func (z *ZKServer) Start() {
	z.t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd != nil {
		z.t.Fatalf("testsvc: ZooKeeper %s is already running", z.Addr)
	}
	logf, err := os.OpenFile(filepath.Join(z.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		z.t.Fatalf("testsvc: %v", err)
	}
	defer logf.Close()
	cmd := exec.Command(z.rt.Java, "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
		"-cp", z.rt.Classpath, zkStandaloneMain, filepath.Join(z.dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		z.t.Fatalf("testsvc: start ZooKeeper: %v", err)
	}
	z.cmd = cmd
	z.waitErr = make(chan error, 1)
	go func(ch chan error) { ch <- cmd.Wait() }(z.waitErr)

	deadline := time.Now().Add(60 * time.Second)
	for {
		if ZKMode(z.Addr) != "" {
			return
		}
		select {
		case err := <-z.waitErr:
			z.cmd = nil
			z.t.Fatalf("testsvc: ZooKeeper exited before it was ready (%v); log:\n%s", err, z.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			z.t.Fatalf("testsvc: ZooKeeper not ready on %s after 60s; log:\n%s", z.Addr, z.logTail())
		}
	}
}

// Stop kills the server at once (SIGKILL: a crash, no clean shutdown) and
// waits for it to exit. It does nothing if the server is not running.
func (z *ZKServer) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd == nil {
		return
	}
	_ = z.cmd.Process.Kill()
	_ = <-z.waitErr // killed: its exit status says only that
	z.cmd = nil
}

func (z *ZKServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(z.dir, "zookeeper.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// ZKMode asks the ZooKeeper at addr for `srvr` and returns its Mode
// ("standalone", "leader", "follower"), or "" if it does not answer in time.
func ZKMode(addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte("srvr")); err != nil {
		return ""
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(mode)
		}
	}
	return ""
}

// FreePorts returns n distinct loopback ports that were free a moment ago,
// for a server that must be told its port before it starts and keep it
// across restarts (a ZooKeeper, a broker process a test kills and starts
// again behind a proxy). A server that can bind 127.0.0.1:0 and report its
// port should do that instead. The ports are drawn below the kernel's
// ephemeral range (32768 and up by default), so that outgoing connections
// cannot take one between the pick and the bind, nor while its server is
// down.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		port := 20000 + rand.IntN(12768)
		if slices.Contains(out, port) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		out = append(out, port)
	}
	if len(out) < n {
		t.Fatalf("testsvc: found only %d free loopback ports of %d", len(out), n)
	}
	return out
}

// String makes a ZKServer print as its address.
func (z *ZKServer) String() string { return fmt.Sprintf("zookeeper(%s)", z.Addr) }
