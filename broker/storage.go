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
	rechecks := map[topicPartition]*recheck{}
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
		b.recheckFailed(rechecks, force)
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

// scanFailedLogs lists the local replicas whose log failed, and those the
// reconcile loop could not open, sorted by topic and partition.
func (b *Broker) scanFailedLogs() []api.FailedLog {
	var out []api.FailedLog
	for _, p := range b.parts.all() {
		if err := p.log.Err(); err != nil {
			out = append(out, api.FailedLog{Topic: p.Topic, Partition: p.ID, Reason: api.ReasonStorageError, Error: err.Error()})
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

// Recovery without a restart. Each failed log's disk is probed on a
// backoff (Options.FailedLogRecheck, 5 s, doubling to a minute): a file written, fsynced and removed
// in the partition's directory. Once the probe passes, the failed log is
// closed and dropped, and the reconcile loop opens it again through the
// normal recovery path (the CRC-checked tail, a partial batch cut); the
// replica then follows its leader (KIP-101 truncation applies) and the
// leader's ISR loop takes it back once it caught up. A log that fails again
// soon after (within recheckSettle) keeps its backoff, so a disk that is
// still nearly full is not hammered. POST /internal/v1/storage/recheck
// (sluice broker's operators) probes every failed log at once.

// recheckSettle is how long a re-opened log must stay healthy for its
// backoff to start over.
const recheckSettle = 5 * time.Minute

// recheck is the storage loop's backoff for one failed log.
type recheck struct {
	attempts int
	next     time.Time // the next probe
	reopened time.Time // the last re-open (zero: none)
}

func recheckBackoff(first time.Duration, attempts int) time.Duration {
	return min(first<<min(attempts, 6), max(first, time.Minute))
}

// recheckFailed probes the disks of the failed logs whose time has come
// (every one with force) and re-opens those that pass. Called by the
// storage loop only, which owns rechecks.
func (b *Broker) recheckFailed(rechecks map[topicPartition]*recheck, force bool) {
	now := time.Now()
	failed := map[topicPartition]bool{}
	for _, f := range b.scanFailedLogs() {
		tp := topicPartition{f.Topic, f.Partition}
		failed[tp] = true
		r := rechecks[tp]
		if r == nil {
			r = &recheck{next: now.Add(recheckBackoff(b.opts.FailedLogRecheck, 0))}
			rechecks[tp] = r
		}
		if !force && now.Before(r.next) {
			continue
		}
		r.attempts++
		r.next = now.Add(recheckBackoff(b.opts.FailedLogRecheck, r.attempts))
		dir := partitionDir(tp.topic, tp.id)
		if err := b.probeDisk(dir); err != nil {
			b.log.Debug("the failed log's disk is not healthy yet", "partition", dir, "err", err, "next_probe", r.next.Sub(now))
			continue
		}
		b.log.Info("the failed log's disk passed its probe; opening the log again", "partition", dir, "attempt", r.attempts)
		r.reopened = now
		b.parts.dropFailed(tp) // an open failure has no partition to drop
		b.kickReconcile()
	}
	for tp, r := range rechecks {
		if !failed[tp] && now.Sub(r.reopened) > recheckSettle {
			delete(rechecks, tp)
		}
	}
}

// probeFile is the file probeDisk writes in a partition's directory.
const probeFile = ".disk-probe"

// probeDisk writes 4 KiB to a new file in dir, fsyncs it and removes it:
// whether the disk takes writes again.
func (b *Broker) probeDisk(dir string) error {
	name := dir + "/" + probeFile
	if err := b.fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
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
