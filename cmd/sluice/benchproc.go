package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// startProcessCluster runs n `sluice broker` processes and one `sluice
// gateway` process (this binary) coordinated through the ZooKeeper at zk,
// under a chroot of their own, on loopback ports in a temporary directory.
// Their output goes to files there; a start that fails prints their last
// lines. stop ends the gateway, then the brokers (SIGTERM, no drain: the
// bench is over), waiting for each, and removes the directory.
func startProcessCluster(ctx context.Context, n int, zk string) (string, func(), error) {
	if zk == "" {
		return "", nil, errors.New("--processes needs a ZooKeeper: --zk host:port (env SLUICE_TEST_ZK, which scripts/with-services.sh sets)")
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
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
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		id := strconv.Itoa(i)
		if err := start("broker-"+id, "broker", "--id", id, "--addr", "127.0.0.1:"+port,
			"--data", filepath.Join(dir, "broker-"+id), "--zk", connect, "--log-level", "warn", "--drain-timeout", "0"); err != nil {
			return fail(err)
		}
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	if err := start("gateway", "gateway", "--addr", "127.0.0.1:"+port, "--zk", connect, "--log-level", "warn"); err != nil {
		return fail(err)
	}
	url := "http://127.0.0.1:" + port
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := waitBrokers(wctx, url, n, ""); err == nil {
			break
		} else if wctx.Err() != nil {
			return fail(fmt.Errorf("the process cluster did not come up: %w", err))
		}
	}
	return url, stop, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
