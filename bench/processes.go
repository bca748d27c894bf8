package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/client"
)

// startProcessCluster runs n `sluice broker` processes and one `sluice
// gateway` process of exe (default: this process's executable) coordinated
// through the ZooKeeper at zk, under a chroot of their own, on loopback
// ports they choose (:0; the brokers register theirs, the gateway prints
// its own) in a temporary directory. Their output goes to files there; a
// start that fails prints their last lines. stop ends the gateway, then the
// brokers (SIGTERM, no drain: the bench is over), waiting for each, and
// removes the directory.
func startProcessCluster(ctx context.Context, exe string, n int, zk string) (string, func(), error) {
	if zk == "" {
		return "", nil, errors.New("--processes needs a ZooKeeper: --zk host:port (env SLUICE_TEST_ZK, which scripts/with-services.sh sets)")
	}
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", nil, err
		}
	}
	dir, err := os.MkdirTemp("", "sluice-bench-proc-")
	if err != nil {
		return "", nil, err
	}
	connect := fmt.Sprintf("%s/sluice-bench-%d", zk, time.Now().UnixNano())
	var (
		procs []*exec.Cmd
		names []string
	)
	stop := func() {
		// The gateway first (it was started last), so it never routes to a
		// broker that is gone.
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
		_ = os.RemoveAll(dir) // a throwaway cluster's data
	}
	start := func(name string, args ...string) error {
		out, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		defer func() { _ = out.Close() }() // the child writes through its own descriptor
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return err
		}
		procs, names = append(procs, cmd), append(names, name)
		return nil
	}
	fail := func(err error) (string, func(), error) {
		for _, name := range names {
			if b, rerr := os.ReadFile(filepath.Join(dir, name+".log")); rerr == nil {
				fmt.Fprintf(os.Stderr, "---- %s:\n%s", name, tail(b, 2000))
			}
		}
		stop()
		return "", nil, err
	}
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		if err := start("broker-"+id, "broker", "--id", id, "--addr", "127.0.0.1:0",
			"--data", filepath.Join(dir, "broker-"+id), "--zk", connect, "--log-level", "warn", "--drain-timeout", "0"); err != nil {
			return fail(err)
		}
	}
	// Private endpoints: `sluice bench push` pushes to 127.0.0.1.
	if err := start("gateway", "gateway", "--addr", "127.0.0.1:0", "--zk", connect, "--log-level", "warn", "--push-allow-private"); err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url, err := waitGatewayURL(wctx, filepath.Join(dir, "gateway.log"))
	if err != nil {
		return fail(fmt.Errorf("the process cluster did not come up: %w", err))
	}
	for {
		if err := waitBrokers(wctx, url, n, ""); err == nil {
			break
		} else if wctx.Err() != nil {
			return fail(fmt.Errorf("the process cluster did not come up: %w", err))
		}
	}
	return url, stop, nil
}

// gatewayListening is the line `sluice gateway` prints once it listens.
var gatewayListening = regexp.MustCompile(`gateway listening on (https?://\S+)`)

// waitGatewayURL reads the gateway's output file until it names the address
// the gateway listens on, or ctx ends.
func waitGatewayURL(ctx context.Context, logPath string) (string, error) {
	for {
		if b, err := os.ReadFile(logPath); err == nil {
			if m := gatewayListening.FindSubmatch(b); m != nil {
				return string(m[1]), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the gateway printed no address: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// waitBrokers polls the gateway until it sees n live brokers and a controller,
// so that the first topic created gets its full replication factor.
func waitBrokers(ctx context.Context, base string, n int, token string) error {
	cl, err := client.New(base, client.WithToken(token), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ci, err := cl.Cluster(ctx)
		if err == nil && ci.Controller >= 0 {
			alive := 0
			for _, b := range ci.Brokers {
				if b.Alive {
					alive++
				}
			}
			if alive >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway does not see %d brokers after 30 s", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
