package faulttest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/tcpproxy"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/recordbatch"
	"github.com/sluice-io/sluice/tier"
)

// Tiered storage, as the test sees it from outside the brokers: the
// remote-segment records in ZooKeeper and the objects in the bucket.

// Coord returns a handle on the cluster's ZooKeeper chroot (direct, no
// proxy), opened on first use and closed when the test ends.
func (c *Cluster) Coord() coord.Coordinator {
	c.T.Helper()
	if c.zk != nil {
		return c.zk
	}
	servers, chroot, err := coord.ParseZKConnect(c.ZK)
	if err != nil {
		c.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	z, err := coord.DialZK(ctx, coord.ZKOptions{Servers: servers, Chroot: chroot, SessionTimeout: 10 * time.Second,
		DigestUser: c.opts.ZKUser, DigestPassword: c.opts.ZKPassword})
	if err != nil {
		c.T.Fatalf("dial the cluster's ZooKeeper: %v", err)
	}
	c.T.Cleanup(func() { _ = z.Close() })
	c.zk = z
	return z
}

// Bucket returns the brokers' bucket, with their key prefix, reached
// directly (not through any broker's S3Link). The cluster must have been
// started with Options.S3.
func (c *Cluster) Bucket() tier.Bucket {
	c.T.Helper()
	if c.opts.S3 == nil {
		c.T.Fatal("the cluster has no S3 (Options.S3)")
	}
	if c.bucket != nil {
		return c.bucket
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := tier.NewS3(ctx, s3Options(*c.opts.S3, c.opts.S3.Endpoint, c.S3Prefix))
	if err != nil {
		c.T.Fatalf("open the bucket: %v", err)
	}
	c.T.Cleanup(func() { _ = b.Close() })
	c.bucket = b
	return b
}

func s3Options(s testsvc.S3Config, endpoint, prefix string) tier.S3Options {
	return tier.S3Options{Endpoint: endpoint, Bucket: s.Bucket, Prefix: prefix, AccessKey: s.AccessKey, SecretKey: s.SecretKey, Region: s.Region}
}

// RemoteRecords lists partition p's remote-segment records in ZooKeeper
// (/brokers/topics/{t}/partitions/{p}/remote/{%020d base}), in name order.
func (c *Cluster) RemoteRecords(topic string, p int32) ([]tier.RemoteSegment, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	z := c.Coord()
	dir := cluster.PartitionPath(topic, p) + "/remote"
	names, _, err := z.Children(ctx, dir)
	if errors.Is(err, coord.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	var out []tier.RemoteSegment
	for _, n := range names {
		data, _, err := z.Get(ctx, dir+"/"+n)
		if errors.Is(err, coord.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		var rec tier.RemoteSegment
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, nil, fmt.Errorf("record %s/%s: %w", dir, n, err)
		}
		out = append(out, rec)
	}
	return out, names, nil
}

// TopicID is the topic's incarnation ID from its ZooKeeper record (part of
// every object key).
func (c *Cluster) TopicID(topic string) string {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	data, _, err := c.Coord().Get(ctx, cluster.TopicPath(topic))
	if err != nil {
		c.T.Fatalf("topic record %s: %v", topic, err)
	}
	var rec api.TopicRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		c.T.Fatalf("topic record %s: %v", topic, err)
	}
	return rec.ID
}

// ScrubReport compares the records of a topic's partitions with the
// bucket.
type ScrubReport struct {
	Records int   // remote-segment records
	Bytes   int64 // log bytes they name
	Objects int   // objects under the cluster's prefix
	// Orphans are objects no record names: uploads that never got their
	// record (allowed until the brokers' orphan grace, 10 min, passes).
	Orphans    int
	OrphanKeys []string
	// Violations, counted per record.
	Missing     int // a named object does not exist
	WrongSize   int // an object's size is not the recorded one
	BadContent  int // SHA-256, batch CRCs, offsets, index or epochs do not match the record
	Gaps        int // a record starts past the previous one's end (or the first past 0)
	Overlaps    int // a record starts before the previous one's end
	BadNames    int // a record's node name is not its base offset
	RemoteEnd   map[int32]int64
	RemoteStart map[int32]int64
	Problems    []string
}

// Violations counts what must never happen.
func (r *ScrubReport) Violations() int {
	return r.Missing + r.WrongSize + r.BadContent + r.Gaps + r.Overlaps + r.BadNames
}

func (r *ScrubReport) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *ScrubReport) String() string {
	s := fmt.Sprintf("records %d (%d log bytes), objects %d, orphans %d; missing %d, wrong size %d, bad content %d, gaps %d, overlaps %d, bad names %d; remote start %v, remote end %v",
		r.Records, r.Bytes, r.Objects, r.Orphans, r.Missing, r.WrongSize, r.BadContent, r.Gaps, r.Overlaps, r.BadNames, r.RemoteStart, r.RemoteEnd)
	for _, p := range r.Problems {
		s += "\n  VIOLATION: " + p
	}
	return s
}

// Scrub checks every record of the topic's partitions against the bucket:
// both objects exist with the recorded sizes; the log object has the
// recorded SHA-256 and holds valid batches (CRC) with dense offsets from
// Base to Next, in the recorded epochs; the index object lists exactly
// those batches; records chain from offset 0 (no whole-log retention in
// these tests) with no gap and no overlap. Objects no record names are
// counted as orphans.
func (c *Cluster) Scrub(topic string, partitions []int32) *ScrubReport {
	c.T.Helper()
	r := &ScrubReport{RemoteEnd: map[int32]int64{}, RemoteStart: map[int32]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := c.Bucket()
	objects := map[string]tier.ObjectInfo{}
	if err := b.List(ctx, "", func(o tier.ObjectInfo) error {
		objects[o.Key] = o
		return nil
	}); err != nil {
		c.T.Fatalf("scrub: list the bucket: %v", err)
	}
	r.Objects = len(objects)
	named := map[string]bool{}
	for _, p := range partitions {
		recs, names, err := c.RemoteRecords(topic, p)
		if err != nil {
			c.T.Fatalf("scrub: records of p%d: %v", p, err)
		}
		r.RemoteStart[p], r.RemoteEnd[p] = -1, -1
		next := int64(0)
		for i, rec := range recs {
			r.Records++
			r.Bytes += rec.Size
			named[rec.LogKey()], named[rec.IndexKey()] = true, true
			if names[i] != fmt.Sprintf("%020d", rec.Base) {
				r.BadNames++
				r.problem("p%d: record %s holds base %d", p, names[i], rec.Base)
			}
			switch {
			case rec.Base > next:
				r.Gaps++
				r.problem("p%d: record [%d, %d) starts past %d: offsets [%d, %d) are in no record", p, rec.Base, rec.Next, next, next, rec.Base)
			case rec.Base < next:
				r.Overlaps++
				r.problem("p%d: record [%d, %d) overlaps the previous one, which ends at %d", p, rec.Base, rec.Next, next)
			}
			next = rec.Next
			c.scrubRecord(ctx, r, b, objects, p, rec)
		}
		if len(recs) > 0 {
			r.RemoteStart[p], r.RemoteEnd[p] = recs[0].Base, recs[len(recs)-1].Next
		}
	}
	var orphans []string
	for k := range objects {
		if !named[k] {
			orphans = append(orphans, k)
		}
	}
	sort.Strings(orphans)
	r.Orphans, r.OrphanKeys = len(orphans), orphans
	return r
}

// scrubRecord checks one record's objects.
func (c *Cluster) scrubRecord(ctx context.Context, r *ScrubReport, b tier.Bucket, objects map[string]tier.ObjectInfo, p int32, rec tier.RemoteSegment) {
	what := fmt.Sprintf("p%d record [%d, %d) key %s", p, rec.Base, rec.Next, rec.Key)
	for key, size := range map[string]int64{rec.LogKey(): rec.Size, rec.IndexKey(): rec.IndexSize} {
		o, ok := objects[key]
		if !ok {
			// Listed before the records were read: look again.
			info, err := b.Stat(ctx, key)
			if err != nil {
				r.Missing++
				r.problem("%s: object %s: %v", what, key, err)
				return
			}
			o = info
		}
		if o.Size != size {
			r.WrongSize++
			r.problem("%s: object %s holds %d bytes, the record says %d", what, key, o.Size, size)
			return
		}
	}
	logBytes, err := getAll(ctx, b, rec.LogKey())
	if err != nil {
		r.Missing++
		r.problem("%s: %v", what, err)
		return
	}
	idx, err := getAll(ctx, b, rec.IndexKey())
	if err != nil {
		r.Missing++
		r.problem("%s: %v", what, err)
		return
	}
	bad := func(format string, args ...any) {
		r.BadContent++
		r.problem("%s: %s", what, fmt.Sprintf(format, args...))
	}
	sum := sha256.Sum256(logBytes)
	if hex.EncodeToString(sum[:]) != rec.SHA256 {
		bad("SHA-256 %x, the record says %s", sum, rec.SHA256)
		return
	}
	if len(idx)%16 != 0 {
		bad("index of %d bytes is not whole 16-byte entries", len(idx))
		return
	}
	next, pos, i := rec.Base, 0, 0
	n, err := recordbatch.Scan(logBytes, true, func(h recordbatch.Header, batch []byte) error {
		if h.BaseOffset != next {
			return fmt.Errorf("batch at offset %d where %d was due", h.BaseOffset, next)
		}
		if _, _, err := recordbatch.Decode(batch); err != nil {
			return fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
		}
		if want := epochAt(rec.Epochs, h.BaseOffset); h.PartitionLeaderEpoch != want {
			return fmt.Errorf("batch at %d has leader epoch %d, the record's lineage %v says %d", h.BaseOffset, h.PartitionLeaderEpoch, rec.Epochs, want)
		}
		if h.PartitionLeaderEpoch > rec.LeaderEpoch {
			return fmt.Errorf("batch at %d has leader epoch %d, past the uploader's %d", h.BaseOffset, h.PartitionLeaderEpoch, rec.LeaderEpoch)
		}
		if (i+1)*16 > len(idx) {
			return fmt.Errorf("index has %d entries, the log more batches", len(idx)/16)
		}
		eo, ep := int64(binary.BigEndian.Uint64(idx[i*16:])), int64(binary.BigEndian.Uint64(idx[i*16+8:]))
		if eo != h.BaseOffset || ep != int64(pos) {
			return fmt.Errorf("index entry %d is (%d, %d), the batch is at (%d, %d)", i, eo, ep, h.BaseOffset, pos)
		}
		i++
		pos += len(batch)
		next = h.NextOffset()
		return nil
	})
	switch {
	case err != nil:
		bad("%v", err)
	case n != len(logBytes):
		bad("%d of %d bytes are not whole valid batches", len(logBytes)-n, len(logBytes))
	case next != rec.Next:
		bad("batches end at %d, the record says %d", next, rec.Next)
	case i != len(idx)/16:
		bad("index has %d entries for %d batches", len(idx)/16, i)
	}
}

// epochAt is the epoch of the lineage entry that covers offset (-1 if none).
func epochAt(lineage []commitlog.EpochEntry, offset int64) int32 {
	e := int32(-1)
	for _, x := range lineage {
		if x.StartOffset <= offset {
			e = x.Epoch
		}
	}
	return e
}

func getAll(ctx context.Context, b tier.Bucket, key string) ([]byte, error) {
	rc, err := b.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}

// ActiveSegmentBase is the base offset of the newest local segment of
// partition p on broker id (the one being appended to), -1 if none.
func (c *Cluster) ActiveSegmentBase(id int32, topic string, p int32) int64 {
	ents, err := os.ReadDir(filepath.Join(c.Broker(id).DataDir, fmt.Sprintf("%s-%d", topic, p)))
	if err != nil {
		return -1
	}
	best := int64(-1)
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || len(base) != 20 {
			continue
		}
		var v int64
		if _, err := fmt.Sscanf(base, "%d", &v); err == nil && v > best {
			best = v
		}
	}
	return best
}

// waitFired waits for a RequestCut to fire and returns when it did; the
// test fails if it has not within timeout.
func waitFired(c *Cluster, rc *tcpproxy.RequestCut, timeout time.Duration, what string) time.Time {
	c.T.Helper()
	select {
	case <-rc.Fired:
		return time.Now()
	case <-time.After(timeout):
		c.T.Fatalf("timed out after %v waiting for %s (an armed request cut)", timeout, what)
		return time.Time{}
	}
}

// objectOf returns the object key an S3 request line names ("PUT
// /bucket/prefix/key?query HTTP/1.1" → "key"), "" if it names none under
// prefix.
func objectOf(requestLine, prefix string) string {
	_, path, ok := strings.Cut(requestLine, " ")
	if !ok {
		return ""
	}
	path, _, _ = strings.Cut(path, " ")
	path, _, _ = strings.Cut(path, "?")
	_, rest, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/") // drop the bucket
	if !ok {
		return ""
	}
	key, ok := strings.CutPrefix(rest, prefix+"/")
	if !ok {
		return ""
	}
	return key
}

// ackedRecords counts the records of a history's acknowledged requests.
func ackedRecords(h *History) int {
	n := 0
	for _, op := range h.Ops() {
		if op.Outcome == OK {
			n += len(op.Values)
		}
	}
	return n
}

// LocalClosedBytes sums the sizes of the closed local segments (every
// %020d.log but the newest) of partition p on broker id.
func (c *Cluster) LocalClosedBytes(id int32, topic string, p int32) int64 {
	dir := filepath.Join(c.Broker(id).DataDir, fmt.Sprintf("%s-%d", topic, p))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	var sizes []int64
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".log"); ok && len(n) == 20 {
			info, err := e.Info()
			if err != nil {
				return -1
			}
			sizes = append(sizes, info.Size()) // ReadDir sorts by name: by base offset
		}
	}
	var total int64
	for _, s := range sizes[:max(len(sizes)-1, 0)] {
		total += s
	}
	return total
}
