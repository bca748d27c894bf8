package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/faulttest"
)

// TestHelpShowsNoSecrets: -h of the roles that take secrets from the
// environment shows their flags but never the values.
func TestHelpShowsNoSecrets(t *testing.T) {
	bin := faulttest.Binary(t)
	const secret = "do-not-print-this-password"
	for _, role := range []string{"broker", "gateway"} {
		cmd := exec.Command(bin, role, "-h")
		cmd.Env = append(cmd.Environ(), "SLUICE_ZK_USER=sluice", "SLUICE_ZK_PASSWORD="+secret, "SLUICE_CLUSTER_SECRET="+secret,
			"SLUICE_S3_SECRET_KEY="+secret, "SLUICE_BOOTSTRAP_TOKEN="+secret)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "-zk-password-file") {
			t.Errorf("sluice %s -h does not list --zk-password-file:\n%s", role, out)
		}
		if strings.Contains(string(out), secret) {
			t.Errorf("sluice %s -h prints a secret from the environment:\n%s", role, out)
		}
	}
}
