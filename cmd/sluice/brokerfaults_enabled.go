//go:build sluice_failpoints

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/commitlog/faultfs"
)

// A broker's disk faults for process tests, compiled only under the build
// tag sluice_failpoints (as the sinks' failpoints are): `sluice broker` started with
// SLUICE_BROKER_FAULTFS=signals keeps its data directory behind a fault
// filesystem (commitlog/faultfs) that signals drive: SIGUSR1 makes every
// fsync fail with EIO (a disk failing its flushes), SIGUSR2 makes them
// succeed again (the disk repaired). It logs "fault filesystem ready" once
// the signals are handled, and a line per change. In any other build
// (brokerfaults_disabled.go) the variable is not read and the broker opens
// its data directory as usual.
const brokerFaultFSEnv = "SLUICE_BROKER_FAULTFS"

// brokerFaultFS returns the fault filesystem over dataDir when
// SLUICE_BROKER_FAULTFS=signals (nil otherwise: the broker opens dataDir
// itself), and a stop function, called after the broker closed, that ends
// the signal handling and closes the directory.
func brokerFaultFS(ctx context.Context, dataDir string, logger *slog.Logger) (commitlog.FS, func(), error) {
	switch v := os.Getenv(brokerFaultFSEnv); v {
	case "":
		return nil, func() {}, nil
	case "signals":
	default:
		return nil, nil, fmt.Errorf("%s=%q: want signals", brokerFaultFSEnv, v)
	}
	osfs, err := commitlog.NewOSFS(dataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	ffs := faultfs.New(osfs)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by the returned stop function, which waits for it
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				if s == syscall.SIGUSR1 {
					ffs.FailSyncs(syscall.EIO)
					logger.Warn("fault filesystem: every fsync fails with EIO from now")
				} else {
					ffs.FailSyncs(nil)
					logger.Warn("fault filesystem: fsyncs succeed again")
				}
			}
		}
	}()
	logger.Warn("fault filesystem ready: SIGUSR1 fails every fsync with EIO, SIGUSR2 ends it", "data", dataDir)
	return ffs, func() {
		signal.Stop(sigs)
		cancel()
		wg.Wait()
		_ = osfs.Close()
	}, nil
}
