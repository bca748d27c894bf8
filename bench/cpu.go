package bench

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// hostCPU reads the machine's busy CPU time from /proc/stat: every process
// on it, so the object store, Redis and the broker processes count with
// this one. A round's host CPU per megabyte moved tells where a ratio is
// bound by work rather than by waiting: two setups that spend the same CPU
// per megabyte on a machine that is saturated run at the ratio of those
// costs, whatever else is done. Zero where /proc/stat is not there.
func hostCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 || i == 7 { // idle, iowait, steal (the hypervisor's other guests)
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0
		}
		busy += n
	}
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(busy) * 10 * time.Millisecond
}

// cpuPerMB is a round's host CPU in milliseconds per megabyte moved.
func (r *benchResult) cpuPerMB() float64 {
	if r.bytes == 0 || r.hostCPU <= 0 {
		return 0
	}
	return float64(r.hostCPU.Milliseconds()) / (float64(r.bytes) / 1e6)
}

// selfCPU is this process's user and system CPU time: with an embedded
// cluster, sluice's whole share of hostCPU (and the load generator's).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures a round's host and own CPU.
type cpuMeter struct{ host, self time.Duration }

func startCPU() cpuMeter { return cpuMeter{hostCPU(), selfCPU()} }

// stop records the CPU spent since m in r.
func (m cpuMeter) stop(r *benchResult) {
	r.hostCPU, r.selfCPU = hostCPU()-m.host, selfCPU()-m.self
}

// selfCPUPerMB is a round's own CPU in milliseconds per megabyte moved.
func (r *benchResult) selfCPUPerMB() float64 {
	if r.bytes == 0 {
		return 0
	}
	return float64(r.selfCPU.Milliseconds()) / (float64(r.bytes) / 1e6)
}
