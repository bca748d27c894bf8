package sink

// Failpoints are compiled in only under the build tag sluice_failpoints
// (failpoint_enabled.go): crash tests build the binary, and run their own
// test binaries, with `-tags sluice_failpoints` (the Makefile's TEST_FLAGS;
// the test build helpers of cmd/sluice and internal/clustertest). In any
// other build (failpoint_disabled.go) failpoint is an empty function the
// compiler removes, and FailpointEnv does nothing.

// FailpointEnv names a step at which the process kills itself (SIGKILL),
// for crash tests: "after-poll", "after-claim", "after-reserve",
// "after-upload", "after-write" or "after-commit", optionally with ":N" to
// die the Nth time the step is reached (default the first). It is read
// once, at start, and only in a build with failpoints (FailpointsEnabled).
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
