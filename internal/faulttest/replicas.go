package faulttest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// BatchID identifies a stored batch: two replicas agree on a batch when its
// offsets, leader epoch and CRC (of everything after the CRC field: the
// records and their attributes) are equal.
type BatchID struct {
	BaseOffset int64
	LastOffset int64
	Epoch      int32
	CRC        uint32
}

// ReplicaLog is one broker's copy of a partition, as its data dir holds it.
type ReplicaLog struct {
	Broker  int32
	Offsets commitlog.Offsets // HW as checkpointed (accurate after a clean stop only)
	Epochs  []commitlog.EpochEntry
	Batches []BatchID
}

// ReadReplicaDir reads the partition directory dir (topic-p, in a data dir)
// with commitlog. Opening a log may recover (truncate) it, so it opens a
// copy and leaves dir as it was; the broker that owns dir must not be
// writing to it (stopped, or paused).
func ReadReplicaDir(dir string) (ReplicaLog, error) {
	tmp, err := os.MkdirTemp("", "faulttest-replica-")
	if err != nil {
		return ReplicaLog{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // a scratch copy
	name := filepath.Base(dir)
	if err := copyDir(dir, filepath.Join(tmp, name)); err != nil {
		return ReplicaLog{}, err
	}
	return openReplica(tmp, name)
}

// openReplica opens parent/name with commitlog and lists its batches.
func openReplica(parent, name string) (ReplicaLog, error) {
	var rl ReplicaLog
	dir := filepath.Join(parent, name)
	fsys, err := commitlog.NewOSFS(parent)
	if err != nil {
		return rl, err
	}
	defer fsys.Close()
	l, err := commitlog.Open(fsys, name, commitlog.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return rl, fmt.Errorf("open %s: %w", dir, err)
	}
	defer l.Close()
	rl.Offsets, rl.Epochs = l.Offsets(), l.Epochs()
	for next := rl.Offsets.LogStart; next < rl.Offsets.LogEnd; {
		res, err := l.Read(next, 64<<20, rl.Offsets.LogEnd)
		if err != nil {
			return rl, fmt.Errorf("read %s at %d: %w", dir, next, err)
		}
		b, err := res.ReadAll()
		if err != nil {
			return rl, err
		}
		if len(b) == 0 {
			return rl, fmt.Errorf("read %s at %d: nothing below the log end %d", dir, next, rl.Offsets.LogEnd)
		}
		n, err := recordbatch.Scan(b, true, func(h recordbatch.Header, batch []byte) error {
			if _, _, err := recordbatch.Decode(batch); err != nil {
				return fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
			}
			rl.Batches = append(rl.Batches, BatchID{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), Epoch: h.PartitionLeaderEpoch, CRC: h.CRC})
			return nil
		})
		if err != nil {
			return rl, fmt.Errorf("%s: %w", dir, err)
		}
		if n != len(b) {
			return rl, fmt.Errorf("%s: %d of %d bytes at offset %d are not whole, valid batches", dir, len(b)-n, len(b), next)
		}
		next = res.NextOffset
	}
	return rl, nil
}

// CompareReplicas checks that every replica holds the same batches below
// upTo (offsets, leader epoch, CRC), that each one's offsets are dense, and,
// with whole, that none holds anything at or past upTo (a converged,
// quiet partition). It returns the differences found.
func CompareReplicas(logs []ReplicaLog, upTo int64, whole bool) []string {
	var diffs []string
	below := func(rl ReplicaLog) []BatchID {
		var out []BatchID
		next := rl.Offsets.LogStart
		for _, b := range rl.Batches {
			if b.BaseOffset != next {
				diffs = append(diffs, fmt.Sprintf("b%d: batch at %d where %d was expected", rl.Broker, b.BaseOffset, next))
			}
			next = b.LastOffset + 1
			if b.LastOffset < upTo {
				out = append(out, b)
			} else if b.BaseOffset < upTo {
				diffs = append(diffs, fmt.Sprintf("b%d: batch %+v straddles the HW %d", rl.Broker, b, upTo))
			}
		}
		if next < upTo {
			diffs = append(diffs, fmt.Sprintf("b%d: log ends at %d, below the HW %d", rl.Broker, next, upTo))
		}
		if whole && next > upTo {
			diffs = append(diffs, fmt.Sprintf("b%d: log ends at %d, past the HW %d of a settled partition", rl.Broker, next, upTo))
		}
		return out
	}
	if len(logs) == 0 {
		return nil
	}
	ref := below(logs[0])
	for _, rl := range logs[1:] {
		got := below(rl)
		for i := 0; i < max(len(ref), len(got)); i++ {
			var a, b *BatchID
			if i < len(ref) {
				a = &ref[i]
			}
			if i < len(got) {
				b = &got[i]
			}
			if a == nil || b == nil || *a != *b {
				diffs = append(diffs, fmt.Sprintf("b%d and b%d differ at batch #%d: %s vs %s", logs[0].Broker, rl.Broker, i, fmtBatch(a), fmtBatch(b)))
				break
			}
		}
	}
	return diffs
}

func fmtBatch(b *BatchID) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("[%d..%d epoch %d crc %08x]", b.BaseOffset, b.LastOffset, b.Epoch, b.CRC)
}

// SnapshotReplicas reads partition p of topic from every broker's data dir.
// A running broker is paused (SIGSTOP) while its directory is copied, so
// that no write is in progress, and resumed at once.
func (c *Cluster) SnapshotReplicas(topic string, p int32) []ReplicaLog {
	c.T.Helper()
	name := fmt.Sprintf("%s-%d", topic, p)
	var out []ReplicaLog
	for _, id := range c.BrokerIDs() {
		b := c.Broker(id)
		tmp := c.T.TempDir()
		// A paused broker stays paused; a running one is paused for the copy.
		running := b.proc.running() && !b.proc.isPaused()
		if running {
			if err := b.proc.signal(syscall.SIGSTOP); err != nil {
				c.T.Fatal(err)
			}
		}
		err := copyDir(filepath.Join(b.DataDir, name), filepath.Join(tmp, name))
		if running {
			if rerr := b.proc.signal(syscall.SIGCONT); rerr != nil {
				c.T.Fatal(rerr)
			}
		}
		if err != nil {
			c.T.Fatalf("copy b%d's %s: %v", id, name, err)
		}
		rl, err := openReplica(tmp, name)
		if err != nil {
			c.T.Fatalf("b%d: %v", id, err)
		}
		rl.Broker = id
		out = append(out, rl)
	}
	return out
}

// DescribeReplicas renders the replicas' positions and lineages on one line each.
func DescribeReplicas(logs []ReplicaLog) string {
	s := ""
	for _, rl := range logs {
		s += fmt.Sprintf("\n  b%d: %d batches, log end %d, checkpointed HW %d, epochs %v", rl.Broker, len(rl.Batches), rl.Offsets.LogEnd, rl.Offsets.HighWatermark, rl.Epochs)
	}
	return s
}

// copyDir copies the regular files of src into dst (created).
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy error is the one to report
		return err
	}
	return out.Close()
}

// TrimReplicas returns copies of logs that start at from: batches wholly
// below it are left out (replicas of a tiered partition trim their local
// copies each at its own pace; compare them where they overlap).
func TrimReplicas(logs []ReplicaLog, from int64) []ReplicaLog {
	out := make([]ReplicaLog, len(logs))
	for i, rl := range logs {
		rl.Batches = slices.DeleteFunc(slices.Clone(rl.Batches), func(b BatchID) bool { return b.LastOffset < from })
		rl.Offsets.LogStart = max(rl.Offsets.LogStart, from)
		out[i] = rl
	}
	return out
}
