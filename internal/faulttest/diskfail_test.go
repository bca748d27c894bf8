package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// A broker whose disk fails, as a process: its replicas' logs turn
// read-only, it says so in its registration, and the controller moves
// every leadership it held to an in-sync replica and drops it from the
// ISRs at once; the topic and cluster views show the replicas offline with
// the reason; once the disk is healthy again the broker probes it, opens
// the logs through recovery and rejoins every ISR, without a restart.
// Broker 1 runs at debug level, so that its failed probes show.

const (
	diskTopic = "df"   // 3 partitions, RF 3, min.insync.replicas 2
	soloTopic = "solo" // 3 partitions, RF 1: one of them on broker 1
	// failing is the broker whose disk fails.
	failing int32 = 1
	// diskErrorLine is what a log logs when a disk error makes it read-only.
	diskErrorLine = "log is read-only after a disk error"
	// probeFailedLine is broker 1's debug line for a failed disk probe.
	probeFailedLine = "the failed log's disk is not healthy yet"
	// brokerFaultFSEnv arms `sluice broker`'s fault filesystem in a build
	// with failpoints (cmd/sluice/brokerfaults_enabled.go).
	brokerFaultFSEnv = "SLUICE_BROKER_FAULTFS"
)

// TestDiskFullHandover puts broker 1's data directory on an 8 MiB tmpfs
// and fills it with an idempotent acks=all load on df and an acks=all load
// on broker 1's solo partition. Within 5 s of broker 1's first disk error
// every df partition it led has a new leader that acknowledges writes;
// the views show every replica of broker 1 offline with storage_error and
// ENOSPC, solo's partition offline. The tmpfs is grown to 256 MiB after
// broker 1's first probe failed on the full disk: within 30 s broker 1 is
// back in every ISR and leads solo's partition again, in the same process,
// and then the df partitions it led (their preferred replica).
// Nothing acknowledged is lost or stored twice, offsets are dense, and the
// df replicas agree batch by batch.
func TestDiskFullHandover(t *testing.T) {
	dir := mountTmpfs(t, 8)
	c := Start(t, Options{
		// Far above the test's waits: broker 1 must leave the ISRs because
		// its logs failed, not because it fell behind.
		ReplicaLagTimeMax: 30 * time.Second,
		DataDirs:          map[int32]string{failing: dir},
		// No free-space watermark: the test is of a write that fails on
		// the full disk (TestLowDiskSpaceHandsOver tests the watermark).
		BrokerArgs: map[int32][]string{failing: {"--log-level", "debug", "--min-free-bytes", "-1"}},
	})
	runDiskFailure(t, c, diskFailure{
		pad:     1024,
		wantErr: "no space left on device",
		heal: func() {
			if err := runCmd(10*time.Second, "mount", "-o", "remount,size=256m", dir); err != nil {
				t.Fatal(err)
			}
			c.Logf("REPAIR: b%d's tmpfs grown to 256 MiB (%s)", failing, fsSize(dir))
		},
	})
}

// TestFsyncEIOHandover runs broker 1 over the fault filesystem of a build
// with failpoints and makes every fsync there fail with EIO (SIGUSR1):
// the same handover and views as a full disk, with the EIO in the views.
// The probes fail while the fault lasts; once it ends (SIGUSR2) the next
// probe passes and broker 1 rejoins every ISR within 30 s, in the same
// process, with nothing acknowledged lost or stored twice.
func TestFsyncEIOHandover(t *testing.T) {
	c := Start(t, Options{
		ReplicaLagTimeMax: 30 * time.Second,
		BrokerEnv:         map[int32][]string{failing: {brokerFaultFSEnv + "=signals"}},
		BrokerArgs:        map[int32][]string{failing: {"--log-level", "debug"}},
	})
	if _, _, ok := c.Poll(5*time.Second, func() (bool, string) {
		return len(c.GrepBrokerLog(failing, "fault filesystem ready")) > 0, ""
	}); !ok {
		t.Fatalf("b%d did not log \"fault filesystem ready\" with %s=signals: the sluice binary (%s) must be built with -tags sluice_failpoints", failing, brokerFaultFSEnv, Binary(t))
	}
	signalAndWait := func(sig syscall.Signal, line string) {
		t.Helper()
		if err := c.Broker(failing).proc.signal(sig); err != nil {
			t.Fatal(err)
		}
		c.WaitFor(fmt.Sprintf("b%d to log %q", failing, line), 10*time.Second, func() (bool, string) {
			return len(c.GrepBrokerLog(failing, line)) > 0, ""
		})
	}
	runDiskFailure(t, c, diskFailure{
		wantErr: "input/output error",
		inject: func() {
			signalAndWait(syscall.SIGUSR1, "every fsync fails with EIO from now")
			c.Logf("FAULT: every fsync of b%d fails with EIO", failing)
		},
		heal: func() {
			signalAndWait(syscall.SIGUSR2, "fsyncs succeed again")
			c.Logf("REPAIR: b%d's fsyncs succeed again", failing)
		},
	})
}

// diskFailure is one way broker 1's disk fails and is repaired.
type diskFailure struct {
	pad int // bytes added to every value
	// inject starts the fault; nil when the load brings it on (a full disk).
	inject func()
	// wantErr is in the error of every failed log.
	wantErr string
	// heal repairs the disk; broker 1's first probe has failed by then.
	heal func()
}

// runDiskFailure is the scenario of both tests: topics, loads, the fault,
// the handover and views, the repair, the rejoin and the checks.
func runDiskFailure(t *testing.T, c *Cluster, f diskFailure) {
	t.Helper()
	c.CreateTopic(diskTopic, 3, 3, 2)
	c.CreateTopic(soloTopic, 3, 1, 1)
	df := c.WaitFullISR(diskTopic, 30*time.Second, false)
	solo := c.WaitFullISR(soloTopic, 30*time.Second, false)
	var led []int32
	for _, p := range df.Partitions {
		if p.Leader == failing {
			led = append(led, p.Partition)
		}
	}
	soloP := int32(-1)
	for _, p := range solo.Partitions {
		if p.Leader == failing {
			soloP = p.Partition
		}
	}
	if len(led) == 0 || soloP < 0 {
		t.Fatalf("b%d leads no partition of %s or %s: %s; %s", failing, diskTopic, soloTopic, DescribePartitions(df), DescribePartitions(solo))
	}
	pid := c.Broker(failing).proc.pid()

	dfParts := allPartitions(3)
	load := c.StartIdempotentLoad(diskTopic, IdemOptions{Producers: 4, Partitions: dfParts, Pad: f.pad})
	h := NewHistory(c, soloTopic)
	h.Pad = f.pad
	soloLoad := h.StartLoad(LoadOptions{Producers: 1, Partitions: []int32{soloP}, Timeout: 2 * time.Second})
	c.WaitFor("100 acknowledged idempotent requests", 30*time.Second, func() (bool, string) {
		n := load.Acked()
		return n >= 100, fmt.Sprintf("%d acknowledged", n)
	})
	if f.inject != nil {
		f.inject()
	}

	var t0 time.Time
	var first string
	c.WaitFor(fmt.Sprintf("b%d's first disk error", failing), 2*time.Minute, func() (bool, string) {
		lines := c.GrepBrokerLog(failing, diskErrorLine)
		if len(lines) == 0 {
			return false, fmt.Sprintf("%d idempotent requests acknowledged", load.Acked())
		}
		first, t0 = lines[0], logTime(t, lines)
		return true, ""
	})
	c.Logf("b%d's first disk error at %s: %s", failing, t0.Format("15:04:05.000"), first)

	// Within 5 s of it: a new leader for each partition broker 1 led, and
	// acks=all writes acknowledged by it.
	deadline := t0.Add(5 * time.Second)
	c.WaitFor(fmt.Sprintf("a new leader of %s %v within 5 s of the disk error", diskTopic, led), time.Until(deadline), func() (bool, string) {
		tp, err := c.Topic(diskTopic)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range led {
			if pi := tp.Partitions[p]; pi.Offline || pi.Leader <= 0 || pi.Leader == failing {
				return false, DescribePartitions(tp)
			}
		}
		return true, ""
	})
	newLeaders := time.Now()
	handover := newLeaders.Sub(t0)
	c.WaitFor(fmt.Sprintf("acks=all writes to %s %v acknowledged by the new leaders within 5 s of the disk error", diskTopic, led), time.Until(deadline), func() (bool, string) {
		for _, p := range led {
			if load.AckedSince(p, newLeaders) == 0 {
				return false, fmt.Sprintf("p%d: none acknowledged since the new leader", p)
			}
		}
		return true, ""
	})
	produceBack := time.Since(t0)
	c.Logf("handover: new leaders of %v %v after b%d's first disk error, acks=all acknowledged again after %v",
		led, handover.Round(time.Millisecond), failing, produceBack.Round(time.Millisecond))

	// Every replica of broker 1 fails (they all write to the failed disk):
	// the views say so, with the reason and the error.
	c.WaitFor("the topic and cluster views to show b1's replicas offline", 20*time.Second, func() (bool, string) {
		return failedViews(c, soloP, f.wantErr)
	})
	views := time.Since(t0)
	c.Logf("views: every replica of b%d offline with %s after %v", failing, api.ReasonStorageError, views.Round(time.Millisecond))

	// The disk is still failing: broker 1's probe fails, and its replicas
	// stay offline.
	c.WaitFor(fmt.Sprintf("b%d's probe of a failed log's disk to fail", failing), 20*time.Second, func() (bool, string) {
		return len(c.GrepBrokerLog(failing, probeFailedLine)) > 0, ""
	})
	if ok, status := failedViews(c, soloP, f.wantErr); !ok {
		t.Fatalf("after a failed probe: %s", status)
	}
	probed := c.GrepBrokerLog(failing, probeFailedLine)
	if !strings.Contains(probed[0], f.wantErr) {
		t.Errorf("b%d's probe failed for another reason than %q: %s", failing, f.wantErr, probed[0])
	}
	c.Logf("b%d's first failed probe %v after its first disk error: %s", failing, logTime(t, probed).Sub(t0).Round(time.Millisecond), probed[0])

	healed := time.Now()
	f.heal()
	c.WaitFor(fmt.Sprintf("b%d back in every ISR within 30 s of the repair", failing), 30*time.Second, func() (bool, string) {
		tp, err := c.Topic(diskTopic)
		if err != nil {
			return false, err.Error()
		}
		for _, pi := range tp.Partitions {
			if pi.Offline || !slices.Contains(pi.ISR, failing) || len(pi.OfflineReplicas) > 0 {
				return false, fmt.Sprintf("%s: %+v", diskTopic, pi)
			}
		}
		sp, err := c.Partition(soloTopic, soloP)
		if err != nil {
			return false, err.Error()
		}
		if sp.Offline || sp.Leader != failing || len(sp.OfflineReplicas) > 0 {
			return false, fmt.Sprintf("%s: %+v", soloTopic, sp)
		}
		ci, err := c.ClusterInfo()
		if err != nil {
			return false, err.Error()
		}
		for _, b := range ci.Brokers {
			if len(b.FailedLogs) > 0 {
				return false, fmt.Sprintf("b%d still reports %+v", b.ID, b.FailedLogs)
			}
		}
		return true, ""
	})
	rejoin := time.Since(healed)
	c.Logf("rejoin: b%d back in every ISR, %s/%d led by it again, %v after the repair", failing, soloTopic, soloP, rejoin.Round(time.Millisecond))
	if now := c.Broker(failing).proc.pid(); now != pid {
		t.Errorf("b%d runs as pid %d, not %d: it was restarted", failing, now, pid)
	}

	// The controller gives broker 1 back the leaderships it held (it is
	// their preferred replica): its re-opened logs lead, with the
	// idempotent producers' state they recovered.
	c.WaitFor(fmt.Sprintf("b%d to lead %s %v again", failing, diskTopic, led), 30*time.Second, func() (bool, string) {
		tp, err := c.Topic(diskTopic)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range led {
			if pi := tp.Partitions[p]; pi.Leader != failing {
				return false, DescribePartitions(tp)
			}
		}
		return true, ""
	})
	leadsAgain := time.Since(healed)

	// Writes go on everywhere, broker 1's RF 1 partition included.
	after := time.Now()
	c.WaitFor("acknowledged writes to every partition after the rejoin", 20*time.Second, func() (bool, string) {
		for _, p := range dfParts {
			if load.AckedSince(p, after) == 0 {
				return false, fmt.Sprintf("%s/%d: none acknowledged since the rejoin", diskTopic, p)
			}
		}
		for _, op := range h.Ops() {
			if op.Outcome == OK && op.Start.After(after) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s/%d: none acknowledged since the rejoin", soloTopic, soloP)
	})
	load.Stop()
	soloLoad.Stop()
	tp := c.WaitFullISR(diskTopic, 30*time.Second, true)
	c.Logf("settled: %s", DescribePartitions(tp))

	r := load.Check(dfParts)
	t.Logf("idempotent history of %s: %s", diskTopic, r)
	if r.Violations() > 0 {
		t.Errorf("%s: %d violations", diskTopic, r.Violations())
	}
	hr := h.Check([]int32{soloP})
	t.Logf("history of %s/%d: %s", soloTopic, soloP, hr)
	if hr.Violations() > 0 {
		t.Errorf("%s/%d: %d violations", soloTopic, soloP, hr.Violations())
	}
	for _, p := range dfParts {
		hw := tp.Partitions[p].HighWatermark
		logs := c.SnapshotReplicas(diskTopic, p)
		if diffs := CompareReplicas(logs, hw, true); len(diffs) > 0 {
			t.Errorf("%s/%d: replicas differ below the HW %d:%s\n  %s", diskTopic, p, hw, DescribeReplicas(logs), joinLines(diffs))
		}
	}
	offline := c.GrepBrokerLog(failing, "replica offline: its log failed")
	reopened := c.GrepBrokerLog(failing, "passed its probe; opening the log again")
	if len(reopened) < len(dfParts)+1 {
		t.Errorf("b%d re-opened %d logs after a passed probe, want its %d failed ones:\n  %s", failing, len(reopened), len(dfParts)+1, joinLines(reopened))
	}
	t.Logf("figures: seed %d; b%d's first disk error %s; new leaders of %v %v after it, acks=all acknowledged again after %v, views %v; "+
		"b%d's replicas offline %d, re-opened %d; back in every ISR %v after the repair, leading %v again after %v; df: requests %d, records %d, missing %d, duplicates %d, moved %d; "+
		"%s/%d: acknowledged %d, lost %d, unknown %d",
		c.Seed, failing, f.wantErr, led, handover.Round(time.Millisecond), produceBack.Round(time.Millisecond), views.Round(time.Millisecond),
		failing, len(offline), len(reopened), rejoin.Round(time.Millisecond), led, leadsAgain.Round(time.Millisecond), r.Requests, r.Records, r.Missing, r.Duplicates, r.Moved,
		soloTopic, soloP, hr.Acked, hr.Lost, hr.OpsUnknown)
}

// failedViews reports whether the views show every replica of the failing
// broker offline for a storage error whose text holds wantErr: df led and
// in sync elsewhere, solo's partition soloP offline, the cluster view's
// failed_logs and the broker's sluice_broker_failed_logs.
func failedViews(c *Cluster, soloP int32, wantErr string) (bool, string) {
	tp, err := c.Topic(diskTopic)
	if err != nil {
		return false, err.Error()
	}
	for _, pi := range tp.Partitions {
		if pi.Offline || pi.Leader == failing || slices.Contains(pi.ISR, failing) || !storageOffline(pi, wantErr) {
			return false, fmt.Sprintf("%s: %+v", diskTopic, pi)
		}
	}
	sp, err := c.Partition(soloTopic, soloP)
	if err != nil {
		return false, err.Error()
	}
	if !sp.Offline || !storageOffline(sp, wantErr) {
		return false, fmt.Sprintf("%s: %+v", soloTopic, sp)
	}
	ci, err := c.ClusterInfo()
	if err != nil {
		return false, err.Error()
	}
	want := map[string]bool{fmt.Sprintf("%s/%d", soloTopic, soloP): true}
	for _, p := range tp.Partitions {
		want[fmt.Sprintf("%s/%d", diskTopic, p.Partition)] = true
	}
	for _, b := range ci.Brokers {
		if b.ID != failing {
			if len(b.FailedLogs) > 0 {
				return false, fmt.Sprintf("b%d reports failed logs: %+v", b.ID, b.FailedLogs)
			}
			continue
		}
		for _, fl := range b.FailedLogs {
			if fl.Reason == api.ReasonStorageError && strings.Contains(fl.Error, wantErr) {
				delete(want, fmt.Sprintf("%s/%d", fl.Topic, fl.Partition))
			}
		}
		if len(want) > 0 {
			return false, fmt.Sprintf("the cluster view's b%d lacks %v: %+v", failing, want, b.FailedLogs)
		}
	}
	n, err := failedLogsMetric(c, failing)
	if err != nil {
		return false, err.Error()
	}
	if n < 4 {
		return false, fmt.Sprintf("b%d's sluice_broker_failed_logs %d", failing, n)
	}
	return true, ""
}

// storageOffline reports whether pi lists the failing broker's replica
// offline for a storage error whose text holds wantErr.
func storageOffline(pi api.PartitionInfo, wantErr string) bool {
	for _, o := range pi.OfflineReplicas {
		if o.Broker == failing && o.Reason == api.ReasonStorageError && strings.Contains(o.Error, wantErr) {
			return true
		}
	}
	return false
}

// failedLogsMetric reads sluice_broker_failed_logs from broker id's /metrics.
func failedLogsMetric(c *Cluster, id int32) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Broker(id).URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "sluice_broker_failed_logs "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("b%d's /metrics has no sluice_broker_failed_logs (%v)", id, sc.Err())
}

// mountTmpfs mounts a tmpfs of sizeMiB on a fresh directory and unmounts it
// when the test ends (after the cluster's processes are killed: the
// cleanup is registered before Start's). It fails the test, naming what it
// needs, where mounting is refused.
func mountTmpfs(t *testing.T, sizeMiB int) string {
	t.Helper()
	dir := t.TempDir()
	if err := runCmd(10*time.Second, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", sizeMiB), "tmpfs", dir); err != nil {
		t.Fatalf("this test puts a broker's data directory on a %d MiB tmpfs it mounts itself: it needs root (CAP_SYS_ADMIN) and mount(8) (running as uid %d): %v",
			sizeMiB, os.Getuid(), err)
	}
	t.Cleanup(func() {
		if err := runCmd(10*time.Second, "umount", dir); err != nil {
			t.Errorf("cleanup: %v; detaching it", err)
			if err := runCmd(10*time.Second, "umount", "-l", dir); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	t.Logf("mounted a tmpfs on %s (%s)", dir, fsSize(dir))
	return dir
}

// fsSize describes the size and free space of the filesystem holding dir.
func fsSize(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d KiB, %d KiB free", st.Blocks*uint64(st.Bsize)/1024, st.Bavail*uint64(st.Bsize)/1024)
}

// runCmd runs a command, bounded by timeout, and returns its output with
// any error.
func runCmd(timeout time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
