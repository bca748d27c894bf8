package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// TestQuotasFromTheCLI sets, lists and deletes quotas as the README shows,
// and checks the usage errors.
func TestQuotasFromTheCLI(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: testBootstrapToken}})
	t.Setenv("SLUICE_URL", c.URL)
	admin := testBootstrapToken
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errOut := runAs(t, admin, "", args...)
		if code != 0 {
			t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	out := mustRun("quotas", "set", "--principal", "User:alice", "--producer-byte-rate", "1048576", "--request-rate", "100")
	if !strings.Contains(out, "User:alice  -          1048576      -          100") {
		t.Fatalf("quotas set:\n%s", out)
	}
	mustRun("quotas", "set", "--principal", "<default>", "--client-id", "<default>", "--consumer-byte-rate", "2e6")
	var l api.QuotaList
	if err := json.Unmarshal([]byte(mustRun("quotas", "list", "-o", "json")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Quotas) != 2 || l.Quotas[0] != (api.Quota{Principal: "<default>", ClientID: "<default>", ConsumerByteRate: 2e6}) ||
		l.Quotas[1] != (api.Quota{Principal: "User:alice", ProducerByteRate: 1048576, RequestRate: 100}) {
		t.Fatalf("quotas list: %+v", l.Quotas)
	}
	if out := mustRun("quotas", "list", "--principal", "User:alice"); strings.Contains(out, "<default>") || !strings.Contains(out, "User:alice") {
		t.Fatalf("quotas list --principal User:alice:\n%s", out)
	}
	mustRun("quotas", "delete", "--principal", "User:alice")
	if code, _, errOut := runAs(t, admin, "", "quotas", "delete", "--principal", "User:alice"); code == 0 || !strings.Contains(errOut, "UNKNOWN_QUOTA") {
		t.Fatalf("deleting it again: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runAs(t, admin, "", "quotas", "set", "--producer-byte-rate", "1"); code != 2 || !strings.Contains(errOut, "--principal") {
		t.Fatalf("set without an entity: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runAs(t, admin, "", "quotas", "set", "--principal", "User:bob"); code == 0 || !strings.Contains(errOut, "INVALID_REQUEST") {
		t.Fatalf("set without a rate: exit %d, %s", code, errOut)
	}
	// A client id goes with every command.
	t.Setenv("SLUICE_CLIENT_ID", "bad id")
	if code, _, errOut := runAs(t, admin, "", "topics", "list"); code == 0 || !strings.Contains(errOut, "client id") {
		t.Fatalf("a bad SLUICE_CLIENT_ID: exit %d, %s", code, errOut)
	}
}
