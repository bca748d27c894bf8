package faulttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The sluice binary, built once per test binary.
var build struct {
	sync.Once
	path string
	err  error
}

// EnvBinary names a prebuilt sluice binary to run instead of building one
// (a release build, an older build, or a known-good build while the tree
// does not compile). EnvBinaryAlias is its older name, still read.
const (
	EnvBinary      = "SLUICE_TEST_BINARY"
	EnvBinaryAlias = "SLUICE_FAULTTEST_BIN"
)

// prebuilt returns the binary EnvBinary (or EnvBinaryAlias) names, "" when
// neither is set.
func prebuilt() string {
	if p := os.Getenv(EnvBinary); p != "" {
		return p
	}
	return os.Getenv(EnvBinaryAlias)
}

// Binary builds ./cmd/sluice with -tags sluice_failpoints into a temporary
// directory, once per test binary, and returns its path (or the one
// EnvBinary names). Every package whose tests call it removes the build
// from its TestMain with RemoveBinary.
func Binary(t testing.TB) string {
	t.Helper()
	build.Do(func() {
		if p := prebuilt(); p != "" {
			build.path, build.err = filepath.Abs(p)
			return
		}
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		dir, err := os.MkdirTemp("", "faulttest-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-tags", "sluice_failpoints", "-o", build.path, "./cmd/sluice")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// RemoveBinary deletes the binary Binary built, if it built one; call it
// from TestMain after the tests ran.
func RemoveBinary() {
	if build.path != "" && prebuilt() == "" {
		_ = os.RemoveAll(filepath.Dir(build.path))
	}
}

// moduleRoot walks up from the working directory (the package's, under go
// test) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// tailLines is how many lines of each process's output the failure report
// shows; maxLines bounds what is kept for tests to search.
const (
	tailLines = 40
	maxLines  = 100_000
)

// process is one child process of the harness (a broker or the gateway) that
// can be started again with the same arguments after it ended. Its output
// goes to t.Log, prefixed with its name, and its last lines are kept.
type process struct {
	name string
	bin  string
	args []string
	env  []string // added to the test's environment
	t    testing.TB
	logf func(format string, args ...any)

	mu     sync.Mutex // guards the fields below
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current run has been waited for
	paused bool
	lines  []string // every line of every run, up to maxLines
	runs   int
}

func newProcess(t testing.TB, name, bin string, args []string, logf func(string, ...any)) *process {
	return &process{name: name, bin: bin, args: args, t: t, logf: logf}
}

// start launches a new run. The process is killed if the test binary dies
// (Pdeathsig), so a crashed test leaves nothing behind.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	p.runs++
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), "SLUICE_ADDR=", "SLUICE_DATA=", "SLUICE_ZK=", "SLUICE_LOG_LEVEL=")
	cmd.Env = append(cmd.Env, p.env...)
	// One writer per stream, so that a line is never spliced from both.
	wout, werr := &lineWriter{p: p, run: p.runs}, &lineWriter{p: p, run: p.runs}
	cmd.Stdout, cmd.Stderr = wout, werr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	go func() {
		err := cmd.Wait() // returns once the output is copied
		wout.flush()
		werr.flush()
		p.logf("%s (pid %d) exited: %v", p.name, cmd.Process.Pid, exitString(err))
		close(done)
	}()
	p.logf("%s started (pid %d, run %d)", p.name, cmd.Process.Pid, p.runs)
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// pid returns the current run's PID, 0 when none runs.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// isPaused reports whether the current run was sent SIGSTOP and not SIGCONT.
func (p *process) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && p.cmd != nil && !p.exitedLocked()
}

// running reports whether the current run has not exited (paused counts).
func (p *process) running() bool { return p.pid() != 0 }

// signal sends sig to the current run, by PID.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := syscall.Kill(p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: kill -%d %d: %w", p.name, sig, p.cmd.Process.Pid, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// wait waits up to timeout for the current run to exit.
func (p *process) wait(timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.name, timeout)
	}
}

// kill sends SIGKILL (a stopped process dies too) and waits for the exit.
func (p *process) kill() error {
	if !p.running() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil && p.running() {
		return err
	}
	return p.wait(10 * time.Second)
}

// stop asks for a clean exit (SIGCONT, then SIGTERM) and kills the process
// if it has not exited within timeout.
func (p *process) stop(timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = p.signal(syscall.SIGCONT)
	if err := p.signal(syscall.SIGTERM); err != nil && p.running() {
		return err
	}
	if err := p.wait(timeout); err != nil {
		p.logf("%s: %v; sending SIGKILL", p.name, err)
		return p.kill()
	}
	return nil
}

// addLine logs one output line and keeps it in the ring.
func (p *process) addLine(run int, line string) {
	prefixed := fmt.Sprintf("%s#%d| %s", p.name, run, line)
	p.mu.Lock()
	if len(p.lines) < maxLines {
		p.lines = append(p.lines, prefixed)
	}
	p.mu.Unlock()
	p.t.Log(prefixed)
}

// lastLines returns the last tailLines lines, oldest first.
func (p *process) lastLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines[max(0, len(p.lines)-tailLines):])
}

// allLines returns every line kept, oldest first, each prefixed with
// "name#run| ".
func (p *process) allLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// lineWriter splits one output stream of a process into lines for
// process.addLine.
type lineWriter struct {
	p   *process
	run int

	mu  sync.Mutex // guards buf
	buf []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.p.addLine(w.run, strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.p.addLine(w.run, string(w.buf))
		w.buf = nil
	}
}
