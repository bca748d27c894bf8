package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/commitlog"
)

// partitionMetaFile sits beside a partition's segments and names the topic ID
// the log belongs to, so a log of a deleted topic is never served as part of a
// new topic of the same name.
const partitionMetaFile = "partition.metadata"

type topicPartition struct {
	topic string
	id    int32
}

// manager owns this broker's partitions: it opens, re-roles and deletes them
// to match the cluster metadata. Only the broker's reconcile goroutine calls
// reconcile (reconcileMu makes that a guarantee); handlers look partitions up
// concurrently.
//
// Fencing works by generation. Every loss of the coordinator link (fenceAll)
// starts a new fence generation and fences every partition with it; a
// partition then applies only states read at that generation or later. The
// session loop declares a generation live (markLive) once it has re-read the
// metadata in the reconnected session, and the reconcile loop stamps what it
// applies with the live generation it read before taking the snapshot. So a
// snapshot from before a disconnect, or published while the link was down,
// can never lift a fence.
type manager struct {
	self int32
	fs   commitlog.FS
	log  *slog.Logger
	deps *partitionDeps

	// reconcileMu serializes reconcile. Taken before mu and Partition.mu.
	reconcileMu sync.Mutex

	mu       sync.RWMutex // guards the fields below
	parts    map[topicPartition]*Partition
	fenceGen uint64                   // coordinator disconnections so far
	liveGen  uint64                   // the latest fence generation whose metadata was re-read live
	openErrs map[topicPartition]error // replicas assigned here whose log could not be opened
}

func newManager(self int32, fsys commitlog.FS, log *slog.Logger, deps *partitionDeps) *manager {
	return &manager{self: self, fs: fsys, log: log, deps: deps, parts: map[topicPartition]*Partition{}, openErrs: map[topicPartition]error{}}
}

// get returns a local partition or the error a client should see.
func (m *manager) get(md *cluster.Metadata, topic string, id int32) (*Partition, error) {
	m.mu.RLock()
	p := m.parts[topicPartition{topic, id}]
	m.mu.RUnlock()
	if p != nil {
		return p, nil
	}
	t, ok := md.Topics[topic]
	switch {
	case !ok:
		return nil, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic)
	case id < 0 || int(id) >= t.Partitions():
		return nil, api.Errorf(api.CodeUnknownPartition, "topic %q has no partition %d", topic, id)
	}
	return nil, api.Errorf(api.CodeNotLeader, "broker %d holds no replica of %s-%d", m.self, topic, id)
}

// topicPartitions returns the local partitions of a topic.
func (m *manager) topicPartitions(topic string) []*Partition {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Partition
	for tp, p := range m.parts {
		if tp.topic == topic {
			out = append(out, p)
		}
	}
	return out
}

// dropFailed takes a partition whose log failed out of the map and closes
// it, so that the next reconcile opens its log again through recovery (the
// CRC-checked tail, a partial batch cut). Under reconcileMu: no reconcile
// sees the partition half gone. It reports false when the partition is no
// longer here or its log has not failed.
func (m *manager) dropFailed(tp topicPartition) bool {
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	m.mu.Lock()
	p := m.parts[tp]
	if p == nil || p.log.Err() == nil {
		m.mu.Unlock()
		return false
	}
	delete(m.parts, tp)
	m.mu.Unlock()
	p.stopRole()
	if err := p.log.Close(); err != nil && !errors.Is(err, commitlog.ErrClosed) {
		m.log.Info("closed the failed log to open it again", "partition", p.String(), "err", err)
	}
	return true
}

// openFailures is a copy of the partitions the reconcile loop could not
// open, with the error of the last try.
func (m *manager) openFailures() map[topicPartition]error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.openErrs)
}

func (m *manager) all() []*Partition {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Partition, 0, len(m.parts))
	for _, p := range m.parts {
		out = append(out, p)
	}
	return out
}

func partitionDir(topic string, id int32) string { return topic + "-" + strconv.Itoa(int(id)) }

// reconcile makes the local partitions match md: opens the replicas assigned
// here, applies their leader states, and deletes those whose topic is gone.
// gen is the live generation (liveGeneration) read before md was taken:
// partitions fenced after it ignore md's states.
func (m *manager) reconcile(md *cluster.Metadata, gen uint64) {
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	want := map[topicPartition]bool{}
	cfgs := make(map[string]api.TopicConfig, len(md.Topics))
	var opens []replicaToOpen
	for name, t := range md.Topics {
		cfg, err := api.ParseTopicConfig(t.Record.Configs, len(firstOr(t.Record.Replicas)))
		if err != nil {
			m.log.Error("topic has an invalid config; not opening it", "topic", name, "err", err)
			continue
		}
		cfgs[name] = cfg
		for i, replicas := range t.Record.Replicas {
			if !isReplica(replicas, m.self) {
				continue
			}
			tp := topicPartition{name, int32(i)}
			want[tp] = true
			m.mu.RLock()
			p := m.parts[tp]
			m.mu.RUnlock()
			if p == nil {
				opens = append(opens, replicaToOpen{tp: tp, topicID: t.Record.ID, cfg: cfg, replicas: replicas})
			}
		}
	}
	m.openAll(opens)
	for name, t := range md.Topics {
		cfg, ok := cfgs[name]
		if !ok {
			continue
		}
		for i := range t.Record.Replicas {
			tp := topicPartition{name, int32(i)}
			if !want[tp] {
				continue
			}
			m.mu.RLock()
			p := m.parts[tp]
			m.mu.RUnlock()
			if p == nil {
				continue // it could not be opened (openErrs)
			}
			if *p.config() != cfg {
				if err := p.setConfig(cfg); err != nil {
					m.log.Error("cannot apply the topic's altered config", "partition", p.String(), "err", err)
				} else {
					m.log.Info("applied the topic's altered config", "partition", p.String())
				}
			}
			if t.StateVersions[i] >= 0 {
				p.applyState(t.States[i], t.StateVersions[i], gen)
			}
		}
	}
	m.mu.Lock()
	for tp := range m.openErrs {
		if !want[tp] {
			delete(m.openErrs, tp)
		}
	}
	var gone []*Partition
	for tp, p := range m.parts {
		if !want[tp] {
			gone = append(gone, p)
			delete(m.parts, tp)
		}
	}
	m.mu.Unlock()
	for _, p := range gone {
		m.log.Info("deleting partition no longer assigned here", "partition", p.String())
		p.stopRole()
		if err := p.log.Delete(); err != nil {
			m.log.Error("deleting partition", "partition", p.String(), "err", err)
		}
	}
}

// replicaToOpen is a replica assigned here that has no open log yet.
type replicaToOpen struct {
	tp       topicPartition
	topicID  string
	cfg      api.TopicConfig
	replicas []int32
}

// openWorkers is how many new replicas openAll opens at once.
const openWorkers = 16

// openAll opens the logs of new replicas, openWorkers at a time, and adds
// them to the map; a failure is kept in openErrs (and reported once). Each
// open creates files and syncs them and their directory: one after
// another, a broker took seconds over the replicas of a wide topic, which
// the create request waits for.
func (m *manager) openAll(opens []replicaToOpen) {
	var wg sync.WaitGroup
	next := make(chan replicaToOpen)
	for range min(openWorkers, len(opens)) {
		wg.Add(1)
		go func() { // owned by openAll, which waits for it
			defer wg.Done()
			for o := range next {
				m.openOne(o)
			}
		}()
	}
	for _, o := range opens {
		next <- o
	}
	close(next)
	wg.Wait()
}

// openOne opens one new replica's log and adds it to the map.
func (m *manager) openOne(o replicaToOpen) {
	p, err := m.open(o.tp, o.topicID, o.cfg, o.replicas)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.openErrs[o.tp] == nil {
			m.log.Error("cannot open partition", "partition", partitionDir(o.tp.topic, o.tp.id), "err", err)
			m.deps.logFailed()
		}
		m.openErrs[o.tp] = err
		return
	}
	delete(m.openErrs, o.tp)
	// Under mu, so a fenceAll either sees the partition or has
	// already moved the generation it starts from.
	p.fenceGen = m.fenceGen
	m.parts[o.tp] = p
}

// logOptions is the part of a topic config a partition's log takes.
func logOptions(cfg api.TopicConfig) commitlog.Options {
	return commitlog.Options{
		SegmentBytes:       cfg.SegmentBytes,
		SegmentAge:         cfg.SegmentAge,
		IndexIntervalBytes: cfg.IndexIntervalBytes,
		FlushMessages:      cfg.FlushMessages,
		FlushInterval:      cfg.FlushInterval,
		RetentionAge:       cfg.Retention,
		RetentionBytes:     cfg.RetentionBytes,
	}
}

func firstOr(r [][]int32) []int32 {
	if len(r) == 0 {
		return nil
	}
	return r[0]
}

// open opens (creating if needed) a partition's log, setting aside a log left
// by an earlier topic of the same name.
func (m *manager) open(tp topicPartition, topicID string, cfg api.TopicConfig, replicas []int32) (*Partition, error) {
	dir := partitionDir(tp.topic, tp.id)
	b, exists, err := commitlog.ReadFile(m.fs, dir, partitionMetaFile)
	inherited := exists // a log left by an earlier run of this broker
	switch {
	case err != nil:
		return nil, err
	case exists:
		if got := strings.TrimSpace(strings.TrimPrefix(string(b), "topic_id:")); got != topicID {
			stray := fmt.Sprintf("%s.%s-stray", dir, got)
			m.log.Warn("setting aside the log of an earlier topic with the same name", "partition", dir, "moved_to", stray)
			if err := m.fs.Rename(dir, stray); err != nil {
				return nil, err
			}
			inherited = false
		}
	}
	lo := logOptions(cfg)
	lo.Logger = m.log.With("partition", dir)
	lo.Files = m.deps.files
	lo.OnFail = func(error) { m.deps.logFailed() }
	l, err := commitlog.Open(m.fs, dir, lo)
	if err != nil {
		return nil, err
	}
	if err := commitlog.WriteFileAtomic(m.fs, dir, partitionMetaFile, []byte("topic_id: "+topicID+"\n")); err != nil {
		_ = l.Close() // the write error is the one to report
		return nil, err
	}
	p := newPartition(tp.topic, topicID, tp.id, l, cfg, replicas, m.deps)
	// A replica created by this process has no earlier leadership to hand
	// back; one whose log an earlier run left behind may (Partition.applyState).
	p.inherited = !inherited
	return p, nil
}

// fenceAll starts a new fence generation and stops every partition from
// acting until states read live in it (or later) are applied.
func (m *manager) fenceAll() {
	m.mu.Lock()
	m.fenceGen++
	gen := m.fenceGen
	ps := make([]*Partition, 0, len(m.parts))
	for _, p := range m.parts {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.fence(gen)
	}
}

// fenceGeneration is the current fence generation; a re-read of the metadata
// begun now can declare it live (markLive) when it succeeds.
func (m *manager) fenceGeneration() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.fenceGen
}

// markLive records that the metadata was re-read in a live session after the
// fence of generation gen: snapshots taken from now on may lift it.
func (m *manager) markLive(gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.liveGen = max(m.liveGen, gen)
}

// liveGeneration stamps a snapshot about to be taken for reconcile.
func (m *manager) liveGeneration() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.liveGen
}

// fenced reports whether a fence is in force: the link was lost and no
// re-read since has been declared live.
func (m *manager) fenced() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.liveGen < m.fenceGen
}

// closeAll closes every partition's log (flushing it and marking it clean).
func (m *manager) closeAll() error {
	// Empty the map under the lock, then stop and close outside it:
	// stopRole waits for the partition to leave its stream, Close fsyncs,
	// and mu is never held while calling into a partition.
	m.mu.Lock()
	parts := make([]*Partition, 0, len(m.parts))
	for tp, p := range m.parts {
		parts = append(parts, p)
		delete(m.parts, tp)
	}
	m.mu.Unlock()
	// Each close fsyncs its segments and writes its checkpoints: one at a
	// time, thousands of partitions took tens of seconds and a stopping
	// broker outlived its drain timeout. closeWorkers at once keep the
	// disk busy without a goroutine per partition.
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan *Partition)
	)
	for range min(closeWorkers, len(parts)) {
		wg.Add(1)
		go func() { // owned by closeAll, which waits for it
			defer wg.Done()
			for p := range next {
				p.stopRole()
				if err := p.log.Close(); err != nil && !errors.Is(err, commitlog.ErrClosed) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", p, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range parts {
		next <- p
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// closeWorkers is how many partitions closeAll stops and closes at once.
const closeWorkers = 16
