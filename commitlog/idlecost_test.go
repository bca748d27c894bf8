package commitlog_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/sluice-io/sluice/commitlog"
)

// openFDs counts the process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors needs /proc/self/fd (Linux): %v", err)
	}
	return len(ents)
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkIdleLogs opens b.N partition logs the way a broker holds its
// replicas at rest and reports what each costs while idle: live heap bytes
// and open file descriptors per log (the process's, /proc/self/fd).
//
//   - created: opened, one leader epoch assigned, a few records appended
//     and fsynced, the HW checkpointed (a new partition);
//
//   - written: then 256 KiB of one-record batches (~3,000, a millisecond
//     apart), fsynced;
//
//   - reopened: written, closed and opened again (a restarted broker).
//
//     go test -run '^$' -bench IdleLogs/created -benchtime 2000x ./commitlog/
//     go test -run '^$' -bench 'IdleLogs/(written|reopened)' -benchtime 200x ./commitlog/
func BenchmarkIdleLogs(b *testing.B) {
	for _, c := range []struct {
		name   string
		bytes  int
		reopen bool
	}{{"created", 0, false}, {"written", 256 << 10, false}, {"reopened", 256 << 10, true}} {
		b.Run(c.name, func(b *testing.B) {
			fsys := osFS(b, b.TempDir())
			rec := batch(b, "idle", 3, 1)
			// One-record batches a millisecond apart, as a partition taking
			// a thousand small produces a second gets them.
			var small [][]byte
			for n := 0; n < c.bytes; n += len(small[len(small)-1]) {
				small = append(small, batch(b, "v", 1, 1_700_000_000_000+int64(len(small))))
			}
			logs := make([]*commitlog.Log, 0, b.N)
			defer func() {
				for _, l := range logs {
					_ = l.Close()
				}
			}()
			fds0, heap0 := openFDs(b), heapInUse()
			b.ResetTimer()
			for i := range b.N {
				l, err := commitlog.Open(fsys, fmt.Sprintf("t-%d", i), commitlog.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.AssignEpoch(1); err != nil {
					b.Fatal(err)
				}
				if _, err := l.Append(rec, 1); err != nil {
					b.Fatal(err)
				}
				for _, sb := range small {
					if _, err := l.Append(sb, 1); err != nil {
						b.Fatal(err)
					}
				}
				commit(l)
				if err := l.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := l.CheckpointHW(); err != nil {
					b.Fatal(err)
				}
				if c.reopen {
					if err := l.Close(); err != nil {
						b.Fatal(err)
					}
					if l, err = commitlog.Open(fsys, fmt.Sprintf("t-%d", i), commitlog.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				logs = append(logs, l)
			}
			b.StopTimer()
			heap, fds := heapInUse(), openFDs(b)
			b.ReportMetric(float64(int64(heap)-int64(heap0))/float64(b.N), "heapB/log")
			b.ReportMetric(float64(fds-fds0)/float64(b.N), "fds/log")
			runtime.KeepAlive(logs)
			runtime.KeepAlive(small) // in heap0 too
		})
	}
}
