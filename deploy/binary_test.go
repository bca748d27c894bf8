package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The sluice binary, built once per test binary from the parent module.
var build struct {
	sync.Once
	dir, path string
	err       error
}

// sluiceBinary builds ./cmd/sluice of the repository into a temporary
// directory (once) and returns its path.
func sluiceBinary(t testing.TB) string {
	t.Helper()
	build.Do(func() {
		dir, err := os.MkdirTemp("", "deploy-test-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.dir, build.path = dir, filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/sluice")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// repoRoot is the sluice module's directory: the parent of this one.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(b, []byte("module github.com/sluice-io/sluice\n")) {
		t.Fatalf("%s is not the sluice module's root (%v)", root, err)
	}
	return root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// checkFlags runs the real binary with a container's arguments and "-h"
// appended: the command's flag set parses every flag before it (an unknown
// flag or a bad value fails there) and then stops at -h. env is the
// container's environment; every SLUICE_* name in it must be one the
// command documents in its usage. shellScript, when set, is a script that
// starts the binary (a Kubernetes container's sh -c line); it runs with
// "-h" appended.
func checkFlags(t *testing.T, what string, args []string, env map[string]string, shellScript string) {
	t.Helper()
	bin := sluiceBinary(t)
	var cmd *exec.Cmd
	if shellScript != "" {
		cmd = exec.Command("/bin/sh", "-c", shellScript+" -h")
	} else {
		cmd = exec.Command(bin, append(append([]string{}, args...), "-h")...)
	}
	cmd.Env = []string{"PATH=" + filepath.Dir(bin) + ":/usr/bin:/bin", "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	text := string(out)
	switch {
	case strings.Contains(text, "flag provided but not defined"), strings.Contains(text, "invalid value"),
		strings.Contains(text, "unknown command"), strings.Contains(text, "bad flag syntax"):
		t.Errorf("%s: the binary refuses its arguments %q:\n%s", what, args, text)
		return
	case !strings.Contains(text, "Usage of "), err != nil && !strings.Contains(text, "flag: help requested"):
		// -h prints the flag set's usage and exits 0 (older binaries: 1
		// with "flag: help requested").
		t.Errorf("%s: the binary did not reach -h after its arguments %q (%v):\n%s", what, args, err, text)
		return
	}
	for k := range env {
		if strings.HasPrefix(k, "SLUICE_") && !strings.Contains(text, k) {
			t.Errorf("%s: environment variable %s is not one the command reads (its usage does not name it):\n%s", what, k, text)
		}
	}
}
