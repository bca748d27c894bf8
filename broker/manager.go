package broker

import (
	"errors"
	"fmt"
	"log/slog"
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
// reconcile; handlers look partitions up concurrently.
type manager struct {
	self int32
	fs   commitlog.FS
	log  *slog.Logger
	deps *partitionDeps

	mu    sync.RWMutex // guards parts
	parts map[topicPartition]*Partition
}

func newManager(self int32, fsys commitlog.FS, log *slog.Logger, deps *partitionDeps) *manager {
	return &manager{self: self, fs: fsys, log: log, deps: deps, parts: map[topicPartition]*Partition{}}
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
func (m *manager) reconcile(md *cluster.Metadata) {
	want := map[topicPartition]bool{}
	for name, t := range md.Topics {
		cfg, err := api.ParseTopicConfig(t.Record.Configs, len(firstOr(t.Record.Replicas)))
		if err != nil {
			m.log.Error("topic has an invalid config; not opening it", "topic", name, "err", err)
			continue
		}
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
				p, err = m.open(tp, t.Record.ID, cfg, replicas)
				if err != nil {
					m.log.Error("cannot open partition", "partition", partitionDir(name, int32(i)), "err", err)
					continue
				}
				m.mu.Lock()
				m.parts[tp] = p
				m.mu.Unlock()
			}
			if t.StateVersions[i] >= 0 {
				p.applyState(t.States[i], t.StateVersions[i])
			}
		}
	}
	m.mu.Lock()
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
	l, err := commitlog.Open(m.fs, dir, commitlog.Options{
		SegmentBytes:       cfg.SegmentBytes,
		SegmentAge:         cfg.SegmentAge,
		IndexIntervalBytes: cfg.IndexIntervalBytes,
		FlushMessages:      cfg.FlushMessages,
		FlushInterval:      cfg.FlushInterval,
		RetentionAge:       cfg.Retention,
		RetentionBytes:     cfg.RetentionBytes,
		Logger:             m.log.With("partition", dir),
	})
	if err != nil {
		return nil, err
	}
	if err := commitlog.WriteFileAtomic(m.fs, dir, partitionMetaFile, []byte("topic_id: "+topicID+"\n")); err != nil {
		l.Close()
		return nil, err
	}
	p := newPartition(tp.topic, topicID, tp.id, l, cfg, replicas, m.deps)
	// A replica created by this process has no earlier leadership to hand
	// back; one whose log an earlier run left behind may (Partition.applyState).
	p.inherited = !inherited
	return p, nil
}

// fenceAll stops every partition from acting until fresh states arrive.
func (m *manager) fenceAll() {
	for _, p := range m.all() {
		p.fence()
	}
}

// closeAll closes every partition's log (flushing it and marking it clean).
func (m *manager) closeAll() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for tp, p := range m.parts {
		p.stopRole()
		if err := p.log.Close(); err != nil && !errors.Is(err, commitlog.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		delete(m.parts, tp)
	}
	return errors.Join(errs...)
}
