package broker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Failed logs. A replica whose log a disk error made read-only (ENOSPC,
// EIO on a write or an fsync: commitlog's sticky write error), or whose log
// could not be opened, can neither lead nor follow. The broker says so in
// its registration (api.BrokerRegistration.FailedLogs) as soon as the log
// fails: the log's OnFail kicks the storage loop, which rewrites the
// registration. The controller treats a failed replica as a dead one for
// that partition (decideLeader): its leadership moves to another in-sync
// replica at once, it leaves the ISR without waiting for the lag timeout,
// and with no other in-sync replica the partition goes offline. Readers
// (the topic and cluster views, Kafka's metadata) show it offline with the
// reason and the error.

// storageScanInterval is how often the storage loop looks at every log
// without being kicked (a failure it missed, a log that opened again).
const storageScanInterval = 2 * time.Second

// storageLoop keeps the registration's failed logs in step with the local
// logs: on a kick (a log failed) and every storageScanInterval. A rewrite
// that fails is tried again on the next turn.
func (b *Broker) storageLoop(ctx context.Context) {
	t := time.NewTicker(storageScanInterval)
	defer t.Stop()
	rc := &rechecks{logs: map[topicPartition]*logRecheck{}}
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-b.storageKick:
		case <-b.storageRecheck:
			force = true
		case <-t.C:
		}
		b.checkFreeSpace()
		b.recheckFailed(rc, force)
		now := b.scanFailedLogs()
		was := b.failedLogs()
		if slices.Equal(now, was) && b.failedRegistered.Load() {
			continue
		}
		if !slices.Equal(now, was) {
			b.logFailedChange(was, now)
			b.failed.Store(&now)
			b.failedRegistered.Store(false)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.rewriteRegistration(wctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("writing the failed logs into the registration failed; retrying", "err", err)
			}
			continue
		}
		b.failedRegistered.Store(true)
	}
}

// kickStorage asks the storage loop to look at the logs now.
func (b *Broker) kickStorage() {
	select {
	case b.storageKick <- struct{}{}:
	default:
	}
}

// failedLogs is the last scan's failed logs, sorted (nil: none).
func (b *Broker) failedLogs() []api.FailedLog {
	if p := b.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// scanFailedLogs lists the local replicas whose log failed, those the
// reconcile loop could not open, and, while the free space is below its
// watermark, every other one, sorted by topic and partition.
func (b *Broker) scanFailedLogs() []api.FailedLog {
	return b.scanLogs(b.lowSpaceRefusal())
}

// scanLogs is scanFailedLogs with low the low-space refusal (nil: list only
// the logs that failed).
func (b *Broker) scanLogs(low error) []api.FailedLog {
	var out []api.FailedLog
	for _, p := range b.parts.all() {
		if err := p.log.Err(); err != nil {
			out = append(out, api.FailedLog{Topic: p.Topic, Partition: p.ID, Reason: api.ReasonStorageError, Error: err.Error()})
		} else if low != nil {
			out = append(out, api.FailedLog{Topic: p.Topic, Partition: p.ID, Reason: api.ReasonStorageError, Error: low.Error()})
		}
	}
	for tp, err := range b.parts.openFailures() {
		out = append(out, api.FailedLog{Topic: tp.topic, Partition: tp.id, Reason: api.ReasonStorageError, Error: err.Error()})
	}
	slices.SortFunc(out, func(a, b api.FailedLog) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return out
}

// logFailedChange logs each log that failed or came back since the last scan.
func (b *Broker) logFailedChange(was, now []api.FailedLog) {
	key := func(f api.FailedLog) string { return partitionDir(f.Topic, f.Partition) }
	old := map[string]bool{}
	for _, f := range was {
		old[key(f)] = true
	}
	cur := map[string]bool{}
	for _, f := range now {
		cur[key(f)] = true
		if !old[key(f)] {
			b.log.Error("replica offline: its log failed; the controller moves its leadership and drops it from the ISR", "partition", key(f), "err", f.Error)
		}
	}
	for _, f := range was {
		if !cur[key(f)] {
			b.log.Info("replica's log is healthy again", "partition", key(f))
		}
	}
}

// rewriteRegistration sets the registration to b.registration() while
// this session owns the node; when the node is missing or another
// session's, the register loop creates it with the current data.
func (b *Broker) rewriteRegistration(ctx context.Context) error {
	path := cluster.BrokerPath(b.opts.ID)
	for {
		data, st, err := b.opts.Coord.Get(ctx, path)
		switch {
		case errors.Is(err, coord.ErrNoNode):
			return nil // the register loop writes the current data
		case err != nil:
			return err
		case st.EphemeralOwner != b.opts.Coord.SessionID():
			return nil // a previous session's node: the register loop replaces it
		}
		want := b.registration()
		if string(data) == string(want) {
			return nil
		}
		_, err = b.opts.Coord.Set(ctx, path, want, st.Version)
		if !errors.Is(err, coord.ErrBadVersion) {
			return err
		}
		// The shutting-down mark went in meanwhile: read again.
	}
}

// failedReplicas indexes the failed logs of every registered broker:
// failed[broker][topic/partition].
func failedReplicas(md *cluster.Metadata) map[int32]map[string]string {
	var out map[int32]map[string]string
	for id, reg := range md.Brokers {
		if len(reg.FailedLogs) == 0 {
			continue
		}
		if out == nil {
			out = map[int32]map[string]string{}
		}
		m := make(map[string]string, len(reg.FailedLogs))
		for _, f := range reg.FailedLogs {
			m[partitionDir(f.Topic, f.Partition)] = f.Error
		}
		out[id] = m
	}
	return out
}

// registrationJSON encodes a registration.
func registrationJSON(reg api.BrokerRegistration) []byte {
	b, _ := json.Marshal(reg)
	return b
}

// Recovery without a restart. While some logs are failed, the data
// directory's disk is probed on a backoff (Options.FailedLogRecheck, 5 s,
// doubling to recheckMaxWait): a file written, fsynced and removed at the
// directory's root, one probe a turn however many logs failed. Once it
// passes, every failed log is closed and dropped, and the reconcile loop
// opens it again through the normal recovery path (the CRC-checked tail, a
// partial batch cut); the replica then follows its leader (KIP-101
// truncation applies) and the leader's ISR loop takes it back once it
// caught up. A log that fails again soon after its re-open (within
// recheckSettle) waits a backoff of its own before the next one, so a disk
// that is still nearly full is not hammered. POST
// /internal/v1/storage/recheck (sluice broker's operators) probes at once.

// recheckMaxWait caps the wait between two probes: a repaired disk is seen
// within it.
const recheckMaxWait = 20 * time.Second

// recheckSettle is how long a re-opened log must stay healthy for its own
// backoff to start over.
const recheckSettle = 5 * time.Minute

// rechecks is the storage loop's probe state; only that loop touches it.
type rechecks struct {
	attempts int       // failed probes since the logs last were all healthy
	next     time.Time // the next probe; zero: none due (no failed log)
	logs     map[topicPartition]*logRecheck
}

// logRecheck is one log's re-open history.
type logRecheck struct {
	reopens int       // re-opens within recheckSettle of the one before
	last    time.Time // the last re-open
}

func recheckBackoff(first time.Duration, attempts int) time.Duration {
	return min(first<<min(attempts, 6), max(first, recheckMaxWait))
}

// recheckFailed probes the disk when its time has come (at once with
// force) and re-opens the failed logs when it passes.
func (b *Broker) recheckFailed(rc *rechecks, force bool) {
	now := time.Now()
	failed := b.scanLogs(nil) // the logs that failed, not those low space hands over
	for tp, lr := range rc.logs {
		if now.Sub(lr.last) > recheckSettle {
			delete(rc.logs, tp)
		}
	}
	if len(failed) == 0 {
		rc.attempts, rc.next = 0, time.Time{}
		return
	}
	if rc.next.IsZero() {
		rc.next = now.Add(recheckBackoff(b.opts.FailedLogRecheck, 0))
	}
	if !force && now.Before(rc.next) {
		return
	}
	if err := b.probeDisk(probeFile); err != nil {
		rc.attempts++
		rc.next = now.Add(recheckBackoff(b.opts.FailedLogRecheck, rc.attempts))
		b.log.Debug("the failed log's disk is not healthy yet", "failed_logs", len(failed), "err", err, "next_probe", rc.next.Sub(now))
		return
	}
	rc.attempts, rc.next = 0, now.Add(recheckBackoff(b.opts.FailedLogRecheck, 0))
	for _, f := range failed {
		tp := topicPartition{f.Topic, f.Partition}
		lr := rc.logs[tp]
		if lr == nil {
			lr = &logRecheck{}
			rc.logs[tp] = lr
		}
		// A log that failed again soon after its last re-open waits its
		// own backoff (unless asked).
		if !force && lr.reopens > 0 && now.Sub(lr.last) < recheckBackoff(b.opts.FailedLogRecheck, lr.reopens) {
			continue
		}
		dir := partitionDir(tp.topic, tp.id)
		b.log.Info("the failed log's disk passed its probe; opening the log again", "partition", dir, "reopens", lr.reopens)
		lr.reopens++
		lr.last = now
		b.parts.dropFailed(tp) // an open failure has no partition to drop
	}
	b.kickReconcile()
}

// probeFile is the file probeDisk writes at the data directory's root.
const probeFile = ".disk-probe"

// probeDisk writes 4 KiB to a new file, name, fsyncs it and removes it:
// whether the disk takes writes again.
func (b *Broker) probeDisk(name string) error {
	f, err := b.fs.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(make([]byte, 4096), 0)
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	rerr := b.fs.Remove(name)
	return errors.Join(werr, cerr, rerr)
}

// handleStorageRecheck is POST PathStorageRecheck: probe every failed log's
// disk now and re-open those that pass (answered before the probes run).
func (b *Broker) handleStorageRecheck(w http.ResponseWriter, _ *http.Request) {
	select {
	case b.storageRecheck <- struct{}{}:
	default:
	}
	apihttp.WriteJSON(w, http.StatusAccepted, brokerapi.StorageRecheckResult{FailedLogs: nonNilFailed(b.failedLogs())})
}

func nonNilFailed(f []api.FailedLog) []api.FailedLog {
	if f == nil {
		return []api.FailedLog{}
	}
	return f
}

// The low-space watermark. A disk that fills fails the write that hits it
// half-way, and that log turns read-only. The storage loop measures the
// data directory's free space every turn instead; below the watermark
// (Options.MinFreeBytes, MinFreePercent) leader appends are refused with a
// retriable STORAGE_ERROR and every local replica is listed in the
// registration's failed_logs, so the controller moves the leaderships away
// and the leaders take the replicas out of their ISRs, as for failed logs;
// followers go on copying (their logs fail only if the disk does fill).
// Above it again, the list clears and the replicas rejoin: the preferred
// leaders come back with the controller's rebalance.

// lowSpaceRefusal is the error leader appends get while the free space is
// below the watermark, nil otherwise.
func (b *Broker) lowSpaceRefusal() error {
	if p := b.lowSpace.Load(); p != nil {
		return *p
	}
	return nil
}

// checkFreeSpace measures the free space and moves in or out of the low
// state, with a log line per transition. A failed measurement changes
// nothing.
func (b *Broker) checkFreeSpace() {
	if b.opts.FreeSpace == nil || b.opts.MinFreeBytes < 0 {
		return
	}
	free, total, err := b.opts.FreeSpace()
	if err != nil {
		b.log.Debug("measuring the data directory's free space failed", "err", err)
		return
	}
	mark := max(uint64(b.opts.MinFreeBytes), uint64(b.opts.MinFreePercent/100*float64(total))) //nolint:gosec // MinFreeBytes >= 0 here
	was := b.lowSpaceRefusal()
	switch {
	case free < mark && was == nil:
		var err error = api.Errorf(api.CodeStorageError, "low disk space: %d MiB free, below the watermark of %d MiB", free>>20, mark>>20)
		b.lowSpace.Store(&err)
		b.log.Error("free space below the watermark: refusing appends and handing every replica over", "free_bytes", free, "watermark_bytes", mark)
		b.kickStorage()
	case free >= mark && was != nil:
		b.lowSpace.Store(nil)
		b.log.Info("free space above the watermark again: taking appends", "free_bytes", free, "watermark_bytes", mark)
	}
}
