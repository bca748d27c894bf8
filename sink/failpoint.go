package sink

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// FailpointEnv names a step at which the process kills itself (SIGKILL),
// for crash tests: "after-poll", "after-claim", "after-reserve",
// "after-upload", "after-write" or "after-commit", optionally with ":N" to
// die the Nth time the step is reached (default the first). It is read
// once, at start.
const FailpointEnv = "SLUICE_SINK_FAILPOINT"

// The steps a failpoint can name, in the order a batch passes them.
const (
	StepAfterPoll    = "after-poll"    // a poll answered, nothing claimed or written
	StepAfterClaim   = "after-claim"   // new grants claimed in the store, the group not yet told
	StepAfterReserve = "after-reserve" // S3 archive: a range reserved in the fence object, its object not uploaded
	StepAfterUpload  = "after-upload"  // S3 archive: an object created, the sink not yet told it is durable
	StepAfterWrite   = "after-write"   // a partition's batch written, its group commit not sent
	StepAfterCommit  = "after-commit"  // a group commit answered
)

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
