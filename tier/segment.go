package tier

import (
	"context"
	"errors"

	"github.com/sluice-io/sluice/commitlog"
)

// RemoteSegment is the record of one segment in the object store. It is
// committed (by Metadata.Commit) only after its objects were uploaded and
// verified; readers trust nothing in the bucket that no record names.
type RemoteSegment struct {
	// ID is unique per upload attempt; the object keys contain it, so a
	// retried or concurrent upload never overwrites another's objects.
	ID string `json:"id"`
	// Base is the first offset; Next the offset after the last batch.
	Base int64 `json:"base_offset"`
	Next int64 `json:"next_offset"`
	// Size is the bytes of the log object; IndexSize of the offset index.
	Size      int64 `json:"size"`
	IndexSize int64 `json:"index_size"`
	// SHA256 of the log object, checked after upload against a read-back.
	SHA256 string `json:"sha256"`
	// CRC64NVME is the log object's CRC-64/NVME, 16 hex digits, computed
	// from the local segment and checked against the store's after upload
	// (when it reports one); the disk cache proves its files with it
	// (diskcache.go). Empty in records written before it was added.
	CRC64NVME string `json:"crc64nvme,omitempty"`
	// Epochs is the leader-epoch lineage inside the segment.
	Epochs []commitlog.EpochEntry `json:"epochs"`
	// LeaderEpoch is the epoch of the leader that uploaded it.
	LeaderEpoch  int32 `json:"leader_epoch"`
	MaxTimestamp int64 `json:"max_timestamp"`
	// Key is the objects' common key; the log is Key+".log", the index
	// Key+".index".
	Key        string `json:"key"`
	UploadedAt int64  `json:"uploaded_at_ms"`
}

// LogKey and IndexKey are the segment's objects.
func (s RemoteSegment) LogKey() string   { return s.Key + ".log" }
func (s RemoteSegment) IndexKey() string { return s.Key + ".index" }

// Metadata is where remote-segment records live (declared here, implemented
// by the broker over the coordinator). Every method may block on the
// coordinator and honours ctx.
type Metadata interface {
	// List returns the partition's committed records, ordered by Base.
	List(ctx context.Context) ([]RemoteSegment, error)
	// Commit records a segment. It fails with ErrSegmentExists when a record
	// with the same Base exists, and with ErrFenced when the caller no longer
	// leads the partition in the epoch it uploaded under.
	Commit(ctx context.Context, seg RemoteSegment) error
	// Remove deletes a record (retention); a missing one is not an error.
	Remove(ctx context.Context, seg RemoteSegment) error
}

// Sentinel errors of the tiering machinery.
var (
	ErrSegmentExists = errors.New("tier: a remote segment with this base offset is already recorded")
	ErrFenced        = errors.New("tier: the uploader no longer leads the partition")
	ErrGap           = errors.New("tier: the local log does not continue where the remote segments end")
)

// Covering returns the record that holds offset, or false.
func Covering(segs []RemoteSegment, offset int64) (RemoteSegment, bool) {
	lo, hi := 0, len(segs)
	for lo < hi {
		m := (lo + hi) / 2
		if segs[m].Next <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(segs) && segs[lo].Base <= offset {
		return segs[lo], true
	}
	return RemoteSegment{}, false
}
