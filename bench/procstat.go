package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// What another process costs, read from outside it through /proc (Linux).

// procSample is a process's CPU time, memory and descriptors at one moment.
type procSample struct {
	cpu time.Duration // user + system time since it started
	rss int64         // resident set, bytes
	fds int           // open file descriptors
}

// sampleProc reads pid's /proc/<pid>/stat, status and fd.
func sampleProc(pid int) (procSample, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procSample{}, err
	}
	var s procSample
	if s.cpu, err = parseProcStatCPU(b); err != nil {
		return procSample{}, err
	}
	if b, err = os.ReadFile(dir + "/status"); err != nil {
		return procSample{}, err
	}
	if s.rss, err = parseStatusKB(b, "VmRSS"); err != nil {
		return procSample{}, err
	}
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return procSample{}, err
	}
	s.fds = len(ents)
	return s, nil
}

// userHZ is the unit of /proc/<pid>/stat's times: 100 on every Linux this
// runs on.
const userHZ = 100

// parseProcStatCPU returns utime + stime of a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so the fields are counted from its last ')': utime and stime
// are fields 14 and 15 of the line.
func parseProcStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := bytes.Fields(b[i+1:]) // field 3 (state) onwards
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatusKB returns the field named key of /proc/<pid>/status
// ("VmRSS:   1234 kB") in bytes.
func parseStatusKB(b []byte, key string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc status %s: %q", key, rest)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc status %s: %w", key, err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("/proc status: no %s", key)
}

// procFDLimit is pid's soft limit of open files, from /proc/<pid>/limits;
// -1 when it cannot be read or is unlimited.
func procFDLimit(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return -1
	}
	n, err := parseLimitsNOFILE(b)
	if err != nil {
		return -1
	}
	return n
}

// parseLimitsNOFILE returns the soft limit of the "Max open files" line of
// /proc/<pid>/limits; -1 for unlimited.
func parseLimitsNOFILE(b []byte) (int64, error) {
	const name = "Max open files"
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(rest) // soft, hard, unit
		if len(f) < 2 {
			return 0, fmt.Errorf("/proc limits: %q", line)
		}
		if f[0] == "unlimited" {
			return -1, nil
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("/proc limits: no " + name)
}

// loadAverage is the machine's 1, 5 and 15 minute load averages as
// /proc/loadavg writes them ("0.52 0.58 0.59"), or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return parseLoadavg(b)
}

func parseLoadavg(b []byte) string {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// promValue returns the value of the unlabelled sample name in a
// Prometheus text exposition, and whether it is there.
func promValue(b []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue // another metric with this prefix, a labelled sample, or a comment
		}
		f := strings.Fields(rest) // value [timestamp]
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[0], 64)
		return v, err == nil
	}
	return 0, false
}
