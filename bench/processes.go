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
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/client"
)

// startProcessCluster runs n `sluice broker` processes and one `sluice
// gateway` process of exe (default: this process's executable) coordinated
// through the ZooKeeper at zk; see startProcesses. stop ends them and
// removes their directory.
func startProcessCluster(ctx context.Context, exe string, n int, zk string) (string, func(), error) {
	pc, err := startProcesses(ctx, processOptions{binary: exe, brokers: n, zk: zk})
	if err != nil {
		return "", nil, err
	}
	return pc.url, pc.stop, nil
}

// processOptions configure startProcesses.
type processOptions struct {
	binary  string // the sluice binary; default: this process's executable
	brokers int    // `sluice broker` processes, ids 1 to brokers
	zk      string // ZooKeeper host:port; the cluster gets a chroot of its own
	// sessionTimeout is every process's --zk-session-timeout; 0 leaves
	// theirs (6 s).
	sessionTimeout time.Duration
	// drainTimeout is the brokers' --drain-timeout; 0 stops a broker at
	// once on SIGTERM (the bench is over).
	drainTimeout time.Duration
	// brokerFlags are more flags for every broker.
	brokerFlags []string
}

// processCluster is a cluster of `sluice broker` processes and one `sluice
// gateway` process of one binary, coordinated through a ZooKeeper under a
// chroot of their own, on loopback ports, in a temporary directory that
// holds their data and their output (NAME.log, every run of a process
// appended). A broker can be signalled and started again on its data and
// its address.
type processCluster struct {
	url     string // the gateway's base URL
	dir     string
	exe     string
	connect string // ZooKeeper connect string with the chroot
	opts    processOptions
	brokers map[int32]*childProcess
	gateway *childProcess
}

// childProcess is one process of a processCluster: its current run.
type childProcess struct {
	name    string
	logPath string
	args    []string

	cmd      *exec.Cmd
	done     chan struct{} // closed once the run has been waited for
	exitedAt time.Time     // when it was; set before done is closed
	waitErr  error         // what Wait returned; set before done is closed
}

// startProcesses runs o.brokers `sluice broker` processes and one `sluice
// gateway` on loopback ports they choose (:0; the brokers register theirs,
// the gateway prints its own) and returns once the gateway sees every
// broker and a controller. A start that fails prints the processes' last
// lines and stops what it started. The caller ends the cluster with stop.
func startProcesses(ctx context.Context, o processOptions) (*processCluster, error) {
	if o.zk == "" {
		return nil, errors.New("--processes needs a ZooKeeper: --zk host:port (env SLUICE_TEST_ZK, which scripts/with-services.sh sets)")
	}
	exe := o.binary
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "sluice-bench-proc-")
	if err != nil {
		return nil, err
	}
	pc := &processCluster{dir: dir, exe: exe, opts: o, brokers: map[int32]*childProcess{},
		connect: fmt.Sprintf("%s/sluice-bench-%d", o.zk, time.Now().UnixNano())}
	fail := func(err error) (*processCluster, error) {
		pc.printLogs(2000)
		pc.stop()
		return nil, err
	}
	for i := 1; i <= o.brokers; i++ {
		p, err := pc.start("broker-"+strconv.Itoa(i), pc.brokerArgs(int32(i), "127.0.0.1:0"))
		if err != nil {
			return fail(err)
		}
		pc.brokers[int32(i)] = p
	}
	// Private endpoints: `sluice bench push` pushes to 127.0.0.1.
	gwArgs := []string{"gateway", "--addr", "127.0.0.1:0", "--zk", pc.connect, "--log-level", benchLogLevel(), "--push-allow-private"}
	if o.sessionTimeout > 0 {
		gwArgs = append(gwArgs, "--zk-session-timeout", o.sessionTimeout.String())
	}
	if pc.gateway, err = pc.start("gateway", gwArgs); err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if pc.url, err = waitLogMatch(wctx, pc.gateway.logPath, gatewayListening); err != nil {
		return fail(fmt.Errorf("the process cluster did not come up: the gateway printed no address: %w", err))
	}
	for {
		if err := waitBrokers(wctx, pc.url, o.brokers, ""); err == nil {
			break
		} else if wctx.Err() != nil {
			return fail(fmt.Errorf("the process cluster did not come up: %w", err))
		}
	}
	return pc, nil
}

func (pc *processCluster) brokerArgs(id int32, addr string) []string {
	s := strconv.Itoa(int(id))
	args := []string{"broker", "--id", s, "--addr", addr, "--data", filepath.Join(pc.dir, "broker-"+s),
		"--zk", pc.connect, "--log-level", benchLogLevel(), "--drain-timeout", pc.opts.drainTimeout.String()}
	if pc.opts.sessionTimeout > 0 {
		args = append(args, "--zk-session-timeout", pc.opts.sessionTimeout.String())
	}
	return append(args, pc.opts.brokerFlags...)
}

// start runs exe with args, its output appended to NAME.log.
func (pc *processCluster) start(name string, args []string) (*childProcess, error) {
	p := &childProcess{name: name, logPath: filepath.Join(pc.dir, name+".log"), args: args}
	out, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = out.Close() }() // the child writes through its own descriptor
	cmd := exec.Command(pc.exe, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		err := cmd.Wait()
		p.exitedAt, p.waitErr = time.Now(), err
		close(p.done)
	}()
	return p, nil
}

// brokerListening is the line `sluice broker` prints once it listens.
var brokerListening = regexp.MustCompile(`broker \d+ listening on (\S+)`)

// restartBroker starts broker id again, once its run has exited, on its
// data directory and on the address its first run listened on (as a
// supervisor restarts a broker with the same configuration).
func (pc *processCluster) restartBroker(ctx context.Context, id int32) error {
	old := pc.brokers[id]
	if old == nil {
		return fmt.Errorf("no broker %d", id)
	}
	if !old.exited() {
		return fmt.Errorf("%s is still running (pid %d)", old.name, old.pid())
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addr, err := waitLogMatch(ctx, old.logPath, brokerListening) // the first run's line comes first
	if err != nil {
		return fmt.Errorf("%s's address: %w", old.name, err)
	}
	p, err := pc.start(old.name, pc.brokerArgs(id, addr))
	if err != nil {
		return err
	}
	pc.brokers[id] = p
	return nil
}

func (p *childProcess) pid() int { return p.cmd.Process.Pid }

func (p *childProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *childProcess) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// end sends SIGTERM and waits for the run to exit, SIGKILL after grace.
func (p *childProcess) end(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stop ends the gateway first (it was started last, and so never routes
// to a broker that is gone), then every broker at once (SIGTERM; SIGKILL
// after 15 s, a drain included: the bench is over), and removes the
// directory.
func (pc *processCluster) stop() {
	pc.gateway.end(15 * time.Second)
	var wg sync.WaitGroup
	for _, p := range pc.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.end(15 * time.Second)
		}()
	}
	wg.Wait()
	if os.Getenv("SLUICE_BENCH_KEEP") != "" {
		progressf("processes' data and logs kept in %s (SLUICE_BENCH_KEEP)", pc.dir)
		return
	}
	_ = os.RemoveAll(pc.dir) // a throwaway cluster's data
}

// printLogs writes the last n bytes of every process's output to stderr.
func (pc *processCluster) printLogs(n int) {
	for _, name := range pc.names() {
		if b, err := os.ReadFile(filepath.Join(pc.dir, name+".log")); err == nil {
			fmt.Fprintf(os.Stderr, "---- %s:\n%s", name, tail(b, n))
		}
	}
}

func (pc *processCluster) names() []string {
	var names []string
	for i := 1; i <= pc.opts.brokers; i++ {
		if pc.brokers[int32(i)] != nil {
			names = append(names, pc.brokers[int32(i)].name)
		}
	}
	if pc.gateway != nil {
		names = append(names, pc.gateway.name)
	}
	return names
}

// gatewayListening is the line `sluice gateway` prints once it listens.
var gatewayListening = regexp.MustCompile(`gateway listening on (https?://\S+)`)

// waitLogMatch reads a process's output file until re matches in it and
// returns the first match's first group, or fails once ctx ends.
func waitLogMatch(ctx context.Context, logPath string, re *regexp.Regexp) (string, error) {
	for {
		if b, err := os.ReadFile(logPath); err == nil {
			if m := re.FindSubmatch(b); m != nil {
				return string(m[1]), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no line matching %q in %s: %w", re, filepath.Base(logPath), ctx.Err())
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

// benchLogLevel is the processes' --log-level: warn, or SLUICE_BENCH_LOG_LEVEL
// (with SLUICE_BENCH_KEEP, to read what the processes did afterwards).
func benchLogLevel() string {
	if l := os.Getenv("SLUICE_BENCH_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}
