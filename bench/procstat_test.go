package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want time.Duration
		bad  bool
	}{
		{name: "plain", want: 1234*10*time.Millisecond + 56*10*time.Millisecond,
			line: "4242 (sluice) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 56 0 0 20 0 12 0 2284115 3133440 390 18446744073709551615\n"},
		// The command name may hold spaces and parentheses: fields count from the last ')'.
		{name: "name with spaces and parens", want: 7 * 10 * time.Millisecond,
			line: "17 (a) b (c) R 1 17 17 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1 1\n"},
		{name: "no name", line: "17 a R 1", bad: true},
		{name: "too short", line: "17 (a) R 1 2 3", bad: true},
		{name: "not a number", line: "17 (a) R 1 17 17 0 -1 0 0 0 0 0 x 4 0 0", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatCPU([]byte(tc.line))
			if tc.bad {
				if err == nil {
					t.Fatalf("parsed %q as %s", tc.line, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tsluice\nVmPeak:\t  900000 kB\nVmRSS:\t  412345 kB\nThreads:\t12\n"
	if got, err := parseStatusKB([]byte(status), "VmRSS"); err != nil || got != 412345<<10 {
		t.Fatalf("VmRSS = %d, %v", got, err)
	}
	if _, err := parseStatusKB([]byte(status), "VmSwap"); err == nil {
		t.Fatal("a missing field parsed")
	}
	if _, err := parseStatusKB([]byte("VmRSS:\t12 pages\n"), "VmRSS"); err == nil {
		t.Fatal("a field without kB parsed")
	}
}

func TestParseLimitsNOFILE(t *testing.T) {
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max processes             63704                63704                processes \n" +
		"Max open files            20000                40000                files     \n"
	if got, err := parseLimitsNOFILE([]byte(limits)); err != nil || got != 20000 {
		t.Fatalf("got %d, %v; want the soft limit 20000", got, err)
	}
	if got, err := parseLimitsNOFILE([]byte("Max open files            unlimited            unlimited            files\n")); err != nil || got != -1 {
		t.Fatalf("unlimited: got %d, %v", got, err)
	}
	if _, err := parseLimitsNOFILE([]byte("Max processes 1 1 processes\n")); err == nil {
		t.Fatal("limits without open files parsed")
	}
}

func TestParseLoadavg(t *testing.T) {
	if got := parseLoadavg([]byte("0.52 1.37 2.35 2/89 31510\n")); got != "0.52 1.37 2.35" {
		t.Fatalf("got %q", got)
	}
	if got := parseLoadavg([]byte("")); got != "unknown" {
		t.Fatalf("empty: got %q", got)
	}
}

func TestPromValue(t *testing.T) {
	body := "# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.\n" +
		"# TYPE go_memstats_heap_inuse_bytes gauge\n" +
		"go_memstats_heap_inuse_bytes_total 1\n" +
		"go_memstats_heap_inuse_bytes{le=\"x\"} 2\n" +
		"go_memstats_heap_inuse_bytes 1.2345678e+08\n" +
		"go_goroutines 6012 1700000000000\n"
	for _, tc := range []struct {
		name string
		want float64
		ok   bool
	}{
		{"go_memstats_heap_inuse_bytes", 1.2345678e+08, true},
		{"go_goroutines", 6012, true}, // a timestamp after the value
		{"go_threads", 0, false},
	} {
		got, ok := promValue([]byte(body), tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// This process's own /proc entries parse.
func TestSampleProcSelf(t *testing.T) {
	s, err := sampleProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.rss <= 0 || s.fds < 3 {
		t.Fatalf("sample %+v: want a resident set and stdin, stdout and stderr at least", s)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	sorted := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 6 * time.Millisecond}, {0.99, 10 * time.Millisecond}, {1, 10 * time.Millisecond}} {
		if got := percentile(sorted, tc.p); got != tc.want {
			t.Errorf("p%v = %s, want %s", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("none: %s", got)
	}
}

func TestMarkdownRow(t *testing.T) {
	if got, want := markdownRow("a|b", "", "c"), "| a/b | — | c |\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestProduceResultString(t *testing.T) {
	r := produceResult{stall: 10200 * time.Millisecond, stallOf: topicPartition{"scale-000", 4}, longest: 10 * time.Second, acked: 412,
		errs: map[string]int{"504 REQUEST_TIMED_OUT": 3, "503 NOT_LEADER": 2}}
	want := "10.2 (scale-000/4); longest single produce 10.0 s; 412 acknowledged; errors: 503 NOT_LEADER ×2, 504 REQUEST_TIMED_OUT ×3"
	if got := r.String(); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	r = produceResult{stall: time.Second, open: true, stallOf: topicPartition{"t", 0}, acked: 1}
	if got, want := r.String(), "≥ 1.0 (t/0); longest single produce 0.0 s; 1 acknowledged; no errors"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
