package tier

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// Uploader copies one partition's closed segments to the object store. It
// holds no goroutine: the broker's tiering loop calls UploadNext while this
// broker leads the partition.
//
// The order of a copy is what makes it safe: upload the log object and the
// index under a key no other attempt uses, read the log object back and check
// its size and SHA-256, and only then commit the record. A crash or a lost
// leadership before the commit leaves unreferenced objects (orphans, deleted
// after a grace period), never a record of something incomplete.
type Uploader struct {
	Bucket Bucket
	Meta   Metadata
	Log    *commitlog.Log
	// KeyPrefix ends in '/': every object of the partition lives under it.
	KeyPrefix string
	Logger    *slog.Logger
	Now       func() time.Time
}

// RemoteEnd is the offset after the last recorded segment (-1 for none).
func RemoteEnd(remote []RemoteSegment) int64 {
	if len(remote) == 0 {
		return -1
	}
	return remote[len(remote)-1].Next
}

// UploadNext copies the first closed segment (or its part) above the remote
// end. It returns nil when nothing is due.
func (u *Uploader) UploadNext(ctx context.Context, leaderEpoch int32, remote []RemoteSegment) (*RemoteSegment, error) {
	end := RemoteEnd(remote)
	var seg *commitlog.SegmentInfo
	for _, s := range u.Log.ClosedSegments() {
		if s.Next > end {
			seg = &s
			break
		}
	}
	if seg == nil {
		return nil, nil
	}
	if end >= 0 && seg.Base > end {
		return nil, fmt.Errorf("%w: remote ends at %d, the local log resumes at %d", ErrGap, end, seg.Base)
	}
	start := max(seg.Base, end)
	f, size, err := u.Log.OpenSegment(seg.Base, commitlog.SegmentLog)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened read-only
	entries, startPos, maxTS, err := scanSegment(f, size, start)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	n := size - startPos
	sum, crc, err := hashSection(f, startPos, n)
	if err != nil {
		return nil, err
	}
	rec := RemoteSegment{
		ID: newID(), Base: start, Next: seg.Next, Size: n, SHA256: sum, CRC64NVME: fmt.Sprintf("%016x", crc),
		Epochs: u.Log.EpochsIn(start, seg.Next), LeaderEpoch: leaderEpoch, MaxTimestamp: maxTS,
		UploadedAt: u.now().UnixMilli(),
	}
	rec.Key = fmt.Sprintf("%s%020d-%d-%s", u.KeyPrefix, start, leaderEpoch, rec.ID)
	index := encodeIndex(entries)
	rec.IndexSize = int64(len(index))

	if err := u.Bucket.Put(ctx, rec.LogKey(), commitlog.SectionReader(f, startPos, n), n); err != nil {
		return nil, fmt.Errorf("tier: uploading %s: %w", rec.LogKey(), err)
	}
	if err := u.Bucket.Put(ctx, rec.IndexKey(), bytes.NewReader(index), int64(len(index))); err != nil {
		return nil, fmt.Errorf("tier: uploading %s: %w", rec.IndexKey(), err)
	}
	if err := u.verify(ctx, rec, crc); err != nil {
		return nil, err
	}
	if err := u.Meta.Commit(ctx, rec); err != nil {
		if errors.Is(err, ErrSegmentExists) || errors.Is(err, ErrFenced) {
			// Someone else's record stands; ours are orphans now.
			u.deleteObjects(ctx, rec)
		}
		return nil, err
	}
	u.Logger.Info("segment tiered", "base", rec.Base, "next", rec.Next, "bytes", rec.Size, "key", rec.Key)
	return &rec, nil
}

// verify checks the log object's size and content: against the store's own
// CRC-64/NVME of what it received when the store reports one (S3 does), else
// by reading the object back and comparing SHA-256.
func (u *Uploader) verify(ctx context.Context, rec RemoteSegment, crc uint64) error {
	info, err := u.Bucket.Stat(ctx, rec.LogKey())
	if err != nil {
		return fmt.Errorf("tier: verifying %s: %w", rec.LogKey(), err)
	}
	if info.Size != rec.Size {
		return fmt.Errorf("tier: %s holds %d bytes, uploaded %d", rec.LogKey(), info.Size, rec.Size)
	}
	if info.HasCRC64NVME {
		if info.CRC64NVME != crc {
			return fmt.Errorf("tier: %s has CRC-64/NVME %016x, uploaded %016x", rec.LogKey(), info.CRC64NVME, crc)
		}
		return nil
	}
	rc, err := u.Bucket.Get(ctx, rec.LogKey())
	if err != nil {
		return fmt.Errorf("tier: verifying %s: %w", rec.LogKey(), err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return fmt.Errorf("tier: verifying %s: %w", rec.LogKey(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rec.SHA256 {
		return fmt.Errorf("tier: %s reads back with SHA-256 %s, uploaded %s", rec.LogKey(), got, rec.SHA256)
	}
	return nil
}

func (u *Uploader) deleteObjects(ctx context.Context, rec RemoteSegment) {
	for _, k := range []string{rec.LogKey(), rec.IndexKey()} {
		if err := u.Bucket.Delete(ctx, k); err != nil {
			u.Logger.Warn("deleting an unrecorded object failed; orphan cleanup will retry", "key", k, "err", err)
		}
	}
}

func (u *Uploader) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

// scanSegment reads the batch headers of a segment file from the batch that
// starts at offset start: one index entry per batch (positions relative to
// that batch), the byte position where it starts, and the largest timestamp.
func scanSegment(f commitlog.File, size, start int64) (entries []indexEntry, startPos int64, maxTS int64, err error) {
	var hbuf [recordbatch.HeaderSize]byte
	startPos, maxTS = -1, -1
	for pos := int64(0); pos < size; {
		if _, err := f.ReadAt(hbuf[:], pos); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: reading batch header at %d: %v", api.ErrStorage, pos, err)
		}
		h, err := recordbatch.ParseHeader(hbuf[:])
		if err != nil {
			return nil, 0, 0, err
		}
		if h.BaseOffset >= start {
			if startPos < 0 {
				if h.BaseOffset != start {
					return nil, 0, 0, fmt.Errorf("%w: no batch starts at %d", ErrGap, start)
				}
				startPos = pos
			}
			entries = append(entries, indexEntry{h.BaseOffset, pos - startPos})
			maxTS = max(maxTS, h.MaxTimestamp)
		}
		pos += int64(h.Size())
	}
	return entries, startPos, maxTS, nil
}

// hashSection returns the SHA-256 (kept in the record) and the CRC-64/NVME
// (compared with the store's) of a section of a segment file.
func hashSection(f commitlog.File, off, n int64) (string, uint64, error) {
	h := sha256.New()
	c := NewCRC64NVME()
	if _, err := io.Copy(io.MultiWriter(h, c), commitlog.SectionReader(f, off, n)); err != nil {
		return "", 0, fmt.Errorf("%w: hashing segment: %v", api.ErrStorage, err)
	}
	return hex.EncodeToString(h.Sum(nil)), c.Sum64(), nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
