package main

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// sluice scram sets a principal's SCRAM credential from stdin, lists it
// (never its keys or password), and deletes it; deleting it again is
// UNKNOWN_SCRAM_CREDENTIAL, and a user without ALTER on the cluster may
// not set one.
func TestScramFromTheCLI(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: testBootstrapToken}})
	t.Setenv("SLUICE_URL", c.URL)
	admin := testBootstrapToken
	mustRun := func(token, stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := runAs(t, token, stdin, args...)
		if code != 0 {
			t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	if out := mustRun(admin, "s3cret-pw\n", "scram", "set", "--principal", "User:alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "4096"); !strings.Contains(out, "SCRAM-SHA-512 credential of User:alice (4096 iterations)") {
		t.Fatalf("scram set: %s", out)
	}
	out := mustRun(admin, "", "scram", "list", "-o", "json")
	if !strings.Contains(out, `"principal": "User:alice"`) || !strings.Contains(out, `"mechanism": "SCRAM-SHA-512"`) || strings.Contains(out, "s3cret") || strings.Contains(out, "key") {
		t.Fatalf("scram list:\n%s", out)
	}
	if code, _, errOut := runAs(t, admin, "", "scram", "set", "--principal", "User:alice"); code == 0 || !strings.Contains(errOut, "stdin") {
		t.Fatalf("scram set without a password: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runAs(t, admin, "pw\n", "scram", "set", "--principal", "User:alice", "--mechanism", "SCRAM-SHA-1"); code == 0 || !strings.Contains(errOut, "INVALID_REQUEST") {
		t.Fatalf("scram set of an unknown mechanism: exit %d: %s", code, errOut)
	}
	mustRun(admin, "", "scram", "delete", "--principal", "User:alice", "--mechanism", "SCRAM-SHA-512")
	if out := mustRun(admin, "", "scram", "list"); strings.Contains(out, "User:alice") {
		t.Fatalf("scram list after delete:\n%s", out)
	}
	if code, _, errOut := runAs(t, admin, "", "scram", "delete", "--principal", "User:alice", "--mechanism", "SCRAM-SHA-512"); code == 0 || !strings.Contains(errOut, "UNKNOWN_SCRAM_CREDENTIAL") {
		t.Fatalf("deleting again: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runAs(t, "", "pw\n", "scram", "set", "--principal", "User:bob"); code == 0 || !strings.Contains(errOut, "UNAUTHENTICATED") {
		t.Fatalf("scram set without a token: exit %d: %s", code, errOut)
	}
}
