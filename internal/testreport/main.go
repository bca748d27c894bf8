// Command testreport reads `go test -json` on its standard input, keeps the
// events in a file, prints what plain `go test` would (each package's
// result line, and the output of the tests that failed), and ends with the
// slowest packages and tests and a count of passed, failed and skipped
// tests. `make test` and `make test-unit` pipe their tests through it.
//
//	go test -json ./... | go run ./internal/testreport -o test-results.json
//
// It exits 0; the test command's own status is what a caller checks
// (bash's pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

// maxHeld bounds the output kept for one running test: a failing test's
// last lines are the ones that explain it.
const maxHeld = 1 << 20

type testKey struct{ pkg, test string }

type result struct {
	key     testKey
	elapsed float64
}

type report struct {
	out      io.Writer
	outErr   error              // the first write to out that failed; nothing is written after it
	held     map[testKey][]byte // output of tests still running
	packages []result
	tests    []result // top-level tests
	counts   map[string]int
	skipped  []testKey
}

func main() {
	file := flag.String("o", "", "write the events, as read, to this file")
	top := flag.Int("top", 10, "how many of the slowest packages and tests to list")
	flag.Parse()
	keep := io.Discard
	closeKeep := func() error { return nil }
	if *file != "" {
		f, err := os.Create(*file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		bw := bufio.NewWriter(f)
		keep = bw
		closeKeep = func() error {
			if err := bw.Flush(); err != nil {
				_ = f.Close() // the flush's error is the one to report
				return err
			}
			return f.Close()
		}
	}
	r := &report{out: os.Stdout, held: map[testKey][]byte{}, counts: map[string]int{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// A bufio.Writer keeps its first error for Flush, checked below.
		_, _ = keep.Write(line)
		_, _ = keep.Write([]byte{'\n'})
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			r.printf("%s\n", line) // not an event: a build error, say
			continue
		}
		r.add(ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading the events:", err)
	}
	r.summary(*top, *file)
	if err := closeKeep(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: writing the events:", err)
	}
	if r.outErr != nil {
		fmt.Fprintln(os.Stderr, "testreport: writing the report:", r.outErr)
	}
}

// printf writes to r.out unless a write to it has failed already; main
// reports that failure once the events are read.
func (r *report) printf(format string, args ...any) {
	if r.outErr == nil {
		_, r.outErr = fmt.Fprintf(r.out, format, args...)
	}
}

func (r *report) add(ev event) {
	if ev.Test == "" {
		switch ev.Action {
		case "output", "build-output":
			if ev.Output != "PASS\n" { // plain go test prints only the ok line then
				r.printf("%s", ev.Output)
			}
		case "pass", "fail":
			r.packages = append(r.packages, result{key: testKey{pkg: ev.Package}, elapsed: ev.Elapsed})
		}
		return
	}
	k := testKey{ev.Package, ev.Test}
	switch ev.Action {
	case "output":
		b := append(r.held[k], ev.Output...)
		if len(b) > maxHeld {
			b = append([]byte("[earlier output cut]\n"), b[len(b)-maxHeld:]...)
		}
		r.held[k] = b
	case "pass", "fail", "skip":
		if ev.Action == "fail" {
			r.printf("%s", r.held[k])
		}
		delete(r.held, k)
		if strings.Contains(ev.Test, "/") {
			return // subtests are counted and timed within their test
		}
		r.counts[ev.Action]++
		if ev.Action == "skip" {
			r.skipped = append(r.skipped, k)
		}
		r.tests = append(r.tests, result{key: k, elapsed: ev.Elapsed})
	}
}

func (r *report) summary(top int, file string) {
	// A test still running when its binary died (a panic, a timeout)
	// never reported its end: show what it printed.
	for k, b := range r.held {
		if !strings.Contains(k.test, "/") {
			r.printf("--- %s %s did not finish; its output:\n%s", k.pkg, k.test, b)
		}
	}
	slowest := func(rs []result) []result {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].elapsed > rs[j].elapsed })
		return rs[:min(top, len(rs))]
	}
	r.printf("\nslowest packages:\n")
	for _, p := range slowest(r.packages) {
		r.printf("  %7.1fs  %s\n", p.elapsed, p.key.pkg)
	}
	r.printf("slowest tests:\n")
	for _, t := range slowest(r.tests) {
		r.printf("  %7.1fs  %s %s\n", t.elapsed, t.key.test, t.key.pkg)
	}
	if n := len(r.skipped); n > 0 && n <= 30 {
		r.printf("skipped tests:\n")
		for _, k := range r.skipped {
			r.printf("  %s %s\n", k.test, k.pkg)
		}
	}
	r.printf("tests: %d passed, %d failed, %d skipped", r.counts["pass"], r.counts["fail"], r.counts["skip"])
	if file != "" {
		r.printf(" (events in %s)", file)
	}
	r.printf("\n")
}
