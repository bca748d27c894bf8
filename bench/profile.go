package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// Profile starts the profiles of the whole process (load generator and any
// cluster in it) that `sluice bench` writes: with cpu set, a CPU profile to
// that file; with mutex set, a profile of mutex contention (where goroutines
// waited on locks others held) written to that file by stop. Call stop when
// the scenario ends; it is never nil.
func Profile(cpu, mutex string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close() // the profile's error is the one to report
			return stop, err
		}
		stops = append(stops, func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "cpu profile:", err)
			}
		})
	}
	if mutex != "" {
		runtime.SetMutexProfileFraction(5)
		stops = append(stops, func() {
			if err := writeProfile("mutex", mutex); err != nil {
				fmt.Fprintln(os.Stderr, "mutex profile:", err)
			}
		})
	}
	return stop, nil
}

// writeProfile writes the named runtime profile to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}
