package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

const testBootstrapToken = "slc_00000000000000aa_1111111111111111111111111111111111111111111111111111111111111111"

// runAs runs one client command with SLUICE_TOKEN set to token.
func runAs(t *testing.T, token, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("SLUICE_TOKEN", token)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = runMain(ctx, clientIO{in: strings.NewReader(stdin), out: &out, errOut: &errOut}, args)
	return code, out.String(), errOut.String()
}

// TestTokensAndACLsFromTheCLI secures a cluster step by step as the README
// tells: the bootstrap token makes a token and an ACL for a user, who can
// then do what the ACL says and nothing else, until the token is revoked.
func TestTokensAndACLsFromTheCLI(t *testing.T) {
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
	mustRun(admin, "", "topics", "create", "orders")
	var tok api.Token
	if err := json.Unmarshal([]byte(mustRun(admin, "", "tokens", "create", "--principal", "User:alice", "--ttl", "1h", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	mustRun(admin, "", "acls", "create", "--principal", "User:alice", "--resource-type", "topic", "--resource", "orders", "--operation", "WRITE")
	if out := mustRun(admin, "", "acls", "list", "--principal", "User:alice"); !strings.Contains(out, "User:alice  topic     literal  orders  WRITE      allow") {
		t.Fatalf("acls list:\n%s", out)
	}
	if out := mustRun(admin, "", "tokens", "list"); !strings.Contains(out, tok.ID) || strings.Contains(out, tok.Token) {
		t.Fatalf("tokens list (the id, never the secret):\n%s", out)
	}

	mustRun(tok.Token, "hello\n", "produce", "orders")
	if code, _, errOut := runAs(t, tok.Token, "", "consume", "orders", "-e"); code == 0 || !strings.Contains(errOut, "NOT_AUTHORIZED") {
		t.Fatalf("alice consumes without READ: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runAs(t, "", "", "topics", "list"); code == 0 || !strings.Contains(errOut, "UNAUTHENTICATED") {
		t.Fatalf("no token: exit %d, %s", code, errOut)
	}

	mustRun(admin, "", "tokens", "delete", tok.ID)
	testwait.For(t, 10*time.Second, "the revoked token to be refused", func() bool {
		code, _, errOut := runAs(t, tok.Token, "again\n", "produce", "orders")
		return code != 0 && strings.Contains(errOut, "UNAUTHENTICATED")
	})
	if out := mustRun(admin, "", "acls", "delete", "--principal", "User:alice"); !strings.Contains(out, "orders") {
		t.Fatalf("acls delete:\n%s", out)
	}
}
