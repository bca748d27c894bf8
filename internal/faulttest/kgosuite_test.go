package faulttest

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The lists of the franz-go suite are consistent, and docs/kafka-compat.md
// names every test run and every one excluded, with its reason.
func TestKgoSuiteLists(t *testing.T) {
	if err := checkKgoLists(); err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "kafka-compat.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range KgoSuiteTests {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/kafka-compat.md does not list %s", name)
		}
	}
	for _, name := range append(slices.Clone(KgoSCRAMAuthTests), KgoSCRAMSuiteTests...) {
		if !strings.Contains(string(doc), "`"+name+"` over SCRAM") {
			t.Errorf("docs/kafka-compat.md does not list %s as run over SCRAM", name)
		}
	}
	for name, reason := range KgoSuiteExcluded {
		if !strings.Contains(string(doc), "`"+name+"`") || !strings.Contains(string(doc), reason) {
			t.Errorf("docs/kafka-compat.md does not list %s with its reason %q", name, reason)
		}
	}
}

// franz-go's own pkg/kgo integration tests against `sluice dev
// --kafka-addr`: three brokers in one process, replication factor 3.
func TestKgoSuiteDev(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs franz-go's tests against a sluice dev process")
	}
	port := freePortRun(t, 3)
	StartDev(t, t.TempDir(), "--kafka-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	var seeds []string
	for i := range 3 {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(port+i)))
	}
	RunKgoSuite(t, seeds, 3)
}

// franz-go's own pkg/kgo integration tests against three broker processes
// over ZooKeeper, replication factor 3.
func TestKgoSuiteZooKeeper(t *testing.T) {
	c := Start(t, Options{Kafka: true})
	var seeds []string
	for _, id := range c.BrokerIDs() {
		seeds = append(seeds, c.Broker(id).KafkaAddr)
	}
	RunKgoSuite(t, seeds, 3)
}

// franz-go's SCRAM tests, and a subset of the suite with every client
// authenticating, against `sluice dev --auth required --kafka-addr`: SASL
// listeners, a principal that is no super user, allowed by ACLs. First
// with SCRAM-SHA-256 (the subset too), then the SCRAM tests with
// SCRAM-SHA-512.
func TestKgoSuiteSCRAM(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs franz-go's tests against a sluice dev process")
	}
	const token = "slc_00000000000000aa_1111111111111111111111111111111111111111111111111111111111111111"
	port := freePortRun(t, 3)
	dev := StartDevEnv(t, t.TempDir(), []string{"SLUICE_BOOTSTRAP_TOKEN=" + token},
		"--auth", "required", "--kafka-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	var seeds []string
	for i := range 3 {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(port+i)))
	}
	user := strings.TrimPrefix(KgoSCRAMPrincipal, "User:")
	SetupKgoSCRAM(t, dev.URL, token, "SCRAM-SHA-256", "pw-256")
	SetupKgoSCRAM(t, dev.URL, token, "SCRAM-SHA-512", "pw-512")

	dir := copyFranzGo(t)
	if err := patchKgoSASL(dir); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"KGO_SEEDS=" + strings.Join(seeds, ","),
		"KGO_TEST_RF=3",
		"KGO_TEST_SCRAM_SEEDS=" + strings.Join(seeds, ","),
	}
	runKgoTests(t, dir, append(slices.Clone(KgoSCRAMAuthTests), KgoSCRAMSuiteTests...),
		append(env, "KGO_TEST_SCRAM="+user+":pw-256"))
	runKgoTests(t, dir, KgoSCRAMAuthTests, append(env, "KGO_TEST_SCRAM="+user+":pw-512:512"))
}

// freePortRun finds n consecutive free loopback ports below the ephemeral
// range (sluice dev --kafka-addr PORT listens on PORT..PORT+n-1) and
// returns the first.
func freePortRun(t *testing.T, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		first := 20000 + rand.IntN(12000)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first+i)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return first
		}
	}
	t.Fatalf("no %d consecutive free loopback ports", n)
	return 0
}
