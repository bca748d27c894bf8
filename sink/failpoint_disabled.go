//go:build !sluice_failpoints

package sink

// FailpointsEnabled reports whether this build has failpoints
// (-tags sluice_failpoints): a test that arms one checks it first, since
// without them the process never dies where the test expects.
const FailpointsEnabled = false

// failpoint does nothing in a build without failpoints; calls to it
// compile to nothing.
func failpoint(string) {}
