package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// franz-go's suite over SASL/SCRAM: a cluster with --auth required, whose
// Kafka listeners are SASL_PLAINTEXT, a SCRAM credential made with `sluice
// scram set`, and ACLs that let its principal do what the tests do.

// KgoSCRAMAuthTests are franz-go's own SCRAM tests, run unmodified: they
// dial KGO_TEST_SCRAM_SEEDS with the KGO_TEST_SCRAM credential (and with a
// user that does not exist, which must fail).
var KgoSCRAMAuthTests = []string{
	"TestSCRAMAuth",
	"TestSCRAMAuthBadCredentials",
}

// KgoSCRAMSuiteTests are tests of KgoSuiteTests also run over SCRAM, every
// client of theirs authenticating: produce, consume, a consumer group of
// each protocol with commits, metadata of every topic, topics created,
// grown and deleted. The rest of KgoSuiteTests (the ETL chains above all)
// add run time, not requests these do not send.
var KgoSCRAMSuiteTests = []string{
	"TestPing",
	"TestClient_Produce",
	"TestConsumeRegex",
	"TestAddRemovePartitions",
	"TestGroupSimple",
	"TestIssue865",
}

// KgoSCRAMPrincipal is the principal the SCRAM runs authenticate as; it is
// no super user, so every request goes through the ACLs.
const KgoSCRAMPrincipal = "User:kgo"

// kgoSCRAMACLs are what KgoSCRAMPrincipal is allowed: every operation on
// every topic and group, and on the cluster (CreateTopics asks CREATE on
// it, InitProducerId WRITE).
var kgoSCRAMACLs = [][]string{
	{"--resource-type", "topic", "--resource", "*", "--operation", "ALL"},
	{"--resource-type", "group", "--resource", "*", "--operation", "ALL"},
	{"--resource-type", "cluster", "--resource", "cluster", "--operation", "ALL"},
}

// kgoSASLHook is the line of pkg/kgo's helpers_test.go after which every
// test client's options are complete; kgoSASLLine, put after it, adds the
// KGO_TEST_SCRAM mechanism to them.
const (
	kgoSASLHook = "\tif testCert != nil {\n\t\topts = append(opts, DialTLSConfig(testCert))\n\t}\n"
	kgoSASLLine = "\tif saslScram != nil {\n\t\topts = append(opts, SASL(saslScram))\n\t}\n"
)

// patchKgoSASL makes every client pkg/kgo's tests build from KGO_SEEDS
// authenticate with KGO_TEST_SCRAM, as franz-go's own helpers do not. It
// fails if the helper it changes is no longer as expected.
func patchKgoSASL(dir string) error {
	path := filepath.Join(dir, "pkg", "kgo", "helpers_test.go")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Count(b, []byte(kgoSASLHook)) != 1 {
		return fmt.Errorf("%s: testClientOpts no longer ends with the TLS option; update kgoSASLHook", path)
	}
	b = bytes.Replace(b, []byte(kgoSASLHook), []byte(kgoSASLHook+kgoSASLLine), 1)
	return os.WriteFile(path, b, 0o644)
}

// SetupKgoSCRAM gives KgoSCRAMPrincipal a credential of mechanism
// (SCRAM-SHA-256 or SCRAM-SHA-512) with password and the ACLs of
// kgoSCRAMACLs, through the sluice CLI against the gateway at url with the
// admin token.
func SetupKgoSCRAM(t *testing.T, url, token, mechanism, password string) {
	t.Helper()
	run := func(stdin string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, Binary(t), args...)
		cmd.Env = append(os.Environ(), "SLUICE_URL="+url, "SLUICE_TOKEN="+token)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(password+"\n", "scram", "set", "--principal", KgoSCRAMPrincipal, "--mechanism", mechanism)
	for _, acl := range kgoSCRAMACLs {
		run("", append([]string{"acls", "create", "--principal", KgoSCRAMPrincipal}, acl...)...)
	}
}
