//go:build sluice_failpoints

package sink

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// FailpointsEnabled reports whether this build has failpoints
// (-tags sluice_failpoints): a test that arms one checks it first, since
// without them the process never dies where the test expects.
const FailpointsEnabled = true

type failpointSpec struct {
	step string
	at   int64
	hits atomic.Int64
}

var armed = parseFailpoint(os.Getenv(FailpointEnv))

func parseFailpoint(v string) *failpointSpec {
	if v == "" {
		return nil
	}
	step, n, _ := strings.Cut(v, ":")
	at, err := strconv.ParseInt(n, 10, 64)
	if err != nil || at < 1 {
		at = 1
	}
	return &failpointSpec{step: step, at: at}
}

// failpoint kills the process when the armed failpoint names step and this
// is the time it was armed for. Without SLUICE_SINK_FAILPOINT it does nothing.
func failpoint(step string) {
	fp := armed
	if fp == nil || fp.step != step || fp.hits.Add(1) != fp.at {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
