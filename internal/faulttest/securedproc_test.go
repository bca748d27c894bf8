package faulttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

var listeningLine = regexp.MustCompile(`listening on (?:http://)?(127\.0\.0\.1:\d+)`)

// startListening runs `sluice args...` with env added and returns the
// address it prints once it listens; stderr goes to t.Log.
func startListening(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(append(os.Environ(), "SLUICE_ADDR=", "SLUICE_DATA=", "SLUICE_ZK=", "SLUICE_AUTH=", "SLUICE_CLUSTER_SECRET=", "SLUICE_BOOTSTRAP_TOKEN="), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = LogWriter(t, name+": ")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-done })
	select {
	case addr := <-found:
		return addr
	case <-done:
		t.Fatalf("%s exited before it listened", name)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not print its address", name)
	}
	return ""
}

// TestSecuredClusterProcesses runs `sluice broker` and `sluice gateway`
// processes over ZooKeeper with SLUICE_AUTH=required and a cluster secret,
// and calls the broker's port directly: a forged principal header without
// a signature is 401, a gateway's signature for a principal without ACLs
// 403, for the admin 2xx; a signature replayed with another principal 401.
// A broker told to check ACLs without a secret does not start.
func TestSecuredClusterProcesses(t *testing.T) {
	dir := t.TempDir()
	zk := testsvc.ZooKeeper(t) + fmt.Sprintf("/secured-%d", time.Now().UnixNano())
	const secret = "a-cluster-secret-of-32-bytes-...."
	token, _, err := auth.NewToken("User:admin", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secretFile, tokenFile := filepath.Join(dir, "secret"), filepath.Join(dir, "token")
	for f, v := range map[string]string{secretFile: secret + "\n", tokenFile: token + "\n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Without the secret: a clear refusal at start.
	out, err := exec.Command(Binary(t), "broker", "--id", "1", "--auth", "required", "--zk", zk, "--data", filepath.Join(dir, "nosecret")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "--auth required needs the cluster secret") {
		t.Fatalf("a broker with --auth required and no secret: %v\n%s", err, out)
	}

	env := []string{"SLUICE_AUTH=required"}
	brokerAddr := startListening(t, "broker 1", env, "broker", "--id", "1", "--addr", "127.0.0.1:0", "--zk", zk,
		"--data", filepath.Join(dir, "b1"), "--cluster-secret-file", secretFile, "--drain-timeout", "0")
	gwAddr := startListening(t, "gateway", env, "gateway", "--addr", "127.0.0.1:0", "--zk", zk,
		"--cluster-secret-file", secretFile, "--bootstrap-token-file", tokenFile)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := client.New("http://"+gwAddr, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "the topic to be created through the gateway", func() bool {
		_, err := admin.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: 1})
		return err == nil || errors.Is(err, api.ErrTopicExists)
	})
	// Through the gateway the admin's calls carry its principal to the broker.
	testwait.For(t, 30*time.Second, "a produce through the gateway", func() bool {
		_, err := admin.Produce(ctx, "orders", []client.Record{{Value: []byte(`"v"`)}}, client.ProduceOptions{})
		return err == nil
	})

	batch, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`"direct"`)}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	produce := func(na *brokerapi.NodeAuth, principal string) error {
		bc := brokerapi.NewClient()
		defer bc.Close()
		bc.Auth = na
		_, err := bc.Produce(auth.WithPrincipal(ctx, principal), brokerAddr, "orders", 0, "1", 10*time.Second, -1, batch)
		return err
	}
	gateway := &brokerapi.NodeAuth{Secret: []byte(secret), Node: brokerapi.NodeGateway}
	for _, tc := range []struct {
		name      string
		na        *brokerapi.NodeAuth
		principal string
		want      api.Code
	}{
		{"a forged header, unsigned", nil, "User:admin", api.CodeUnauthenticated},
		{"signed for a principal without ACLs", gateway, "User:nobody", api.CodeNotAuthorized},
		{"signed for the admin", gateway, "User:admin", ""},
	} {
		err := produce(tc.na, tc.principal)
		var ae *api.Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &ae) || ae.Code != tc.want):
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}

	// A signature for User:nobody with User:admin in the header.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+brokerAddr+strings.Replace(brokerapi.PathTopicStatus, "{topic}", "orders", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(brokerapi.HeaderPrincipal, "User:nobody")
	gateway.Sign(req, time.Now())
	req.Header.Set(brokerapi.HeaderPrincipal, "User:admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a replayed signature with another principal: %d, want 401", resp.StatusCode)
	}
}
