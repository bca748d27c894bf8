package faulttest

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// DevProcess is a `sluice dev` child process: broker, controller and
// gateway in one process over one data directory.
type DevProcess struct {
	// URL is the gateway's base URL, http://127.0.0.1:PORT.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

var gatewayLine = regexp.MustCompile(`gateway (http://127\.0\.0\.1:\d+)`)

// StartDev starts `sluice dev` (with extra flags) on a free loopback port
// over dataDir and waits until it is ready. Its output goes to t.Log; it is
// killed when the test ends.
func StartDev(t testing.TB, dataDir string, extra ...string) *DevProcess {
	t.Helper()
	return StartDevEnv(t, dataDir, nil, extra...)
}

// StartDevEnv is StartDev with env (NAME=value) added to the process's
// environment.
func StartDevEnv(t testing.TB, dataDir string, env []string, extra ...string) *DevProcess {
	t.Helper()
	cmd := exec.Command(Binary(t), append([]string{"dev", "--addr", "127.0.0.1:0", "--data", dataDir, "--log-level", "warn"}, extra...)...)
	cmd.Env = append(append(os.Environ(), "SLUICE_ADDR=", "SLUICE_DATA="), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = LogWriter(t, "sluice dev: ")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &DevProcess{cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := gatewayLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Kill() })
	select {
	case p.URL = <-found:
	case <-p.done:
		t.Fatal("sluice dev exited before it was up")
	case <-time.After(30 * time.Second):
		t.Fatal("sluice dev did not print its address")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice dev not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (p *DevProcess) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process.
func (p *DevProcess) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process's PID.
func (p *DevProcess) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been waited for.
func (p *DevProcess) Done() <-chan struct{} { return p.done }

// LogWriter returns a writer that sends each line written to it to t.Log,
// after prefix: a child process's stdout or stderr.
func LogWriter(t testing.TB, prefix string) io.Writer { return logWriter{t, prefix} }

type logWriter struct {
	t      testing.TB
	prefix string
}

func (w logWriter) Write(b []byte) (int, error) {
	for _, l := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		w.t.Log(w.prefix + string(l))
	}
	return len(b), nil
}
