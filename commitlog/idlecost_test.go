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
		t.Skipf("no /proc/self/fd: %v", err)
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
// replicas at rest (created, one leader epoch assigned, a few records
// appended and fsynced, the HW checkpointed) and reports what each costs
// while idle: live heap bytes and open file descriptors per log.
//
//	go test -run '^$' -bench IdleLogs -benchtime 2000x ./commitlog/
func BenchmarkIdleLogs(b *testing.B) {
	fsys := osFS(b, b.TempDir())
	rec := batch(b, "idle", 3, 1)
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
		logs = append(logs, l)
		if err := l.AssignEpoch(1); err != nil {
			b.Fatal(err)
		}
		buf := append([]byte(nil), rec...)
		if _, err := l.Append(buf, 1); err != nil {
			b.Fatal(err)
		}
		commit(l)
		if err := l.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := l.CheckpointHW(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	heap, fds := heapInUse(), openFDs(b)
	b.ReportMetric(float64(int64(heap)-int64(heap0))/float64(b.N), "heapB/log")
	b.ReportMetric(float64(fds-fds0)/float64(b.N), "fds/log")
	runtime.KeepAlive(logs)
}
