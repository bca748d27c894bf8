package brokerapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
)

// PathReplicaFetch is the replication stream's route: one follower fetches
// every partition it follows on this leader in one long poll, within a fetch
// session (KIP-227) so that a partition nothing happened to costs no bytes
// in either direction.
const PathReplicaFetch = "/internal/v1/fetch"

// PathReplicaFetchWake ends the long poll a follower's fetch session has
// in flight (query replica_id and session_id), so that a partition that
// just joined its stream is named in the next request at once instead of
// after the poll's max wait. A session with no request in flight answers
// its next one without waiting.
const PathReplicaFetchWake = "/internal/v1/fetch/wake"

// ContentTypeReplicaFetch is the binary encoding of a replica fetch request
// and of its answer (EncodeReplicaFetchRequest, AppendReplicaFetchHeader).
const ContentTypeReplicaFetch = "application/vnd.sluice.replica-fetch"

// Bounds of a replica fetch, checked on both sides before anything is
// allocated for what a message claims.
const (
	// MaxReplicaFetchRequestBytes bounds a request body.
	MaxReplicaFetchRequestBytes = 4 << 20
	// MaxReplicaFetchPartitions bounds the partitions a request adds,
	// changes or removes, an answer carries, and a session holds.
	MaxReplicaFetchPartitions = 10_000
	// MaxReplicaFetchAnswerBytes bounds the data of one answer: its
	// MaxBytes, or the one whole batch that may pass it (a produce of at
	// most 64 MiB is one batch per partition).
	MaxReplicaFetchAnswerBytes = 128 << 20
	// maxTopicBytes is Kafka's topic name bound.
	maxTopicBytes = 249
	// maxErrorBytes bounds an error message in an answer.
	maxErrorBytes = 1 << 10
)

// replicaFetchVersion opens every request and answer body.
const replicaFetchVersion = 1

// ReplicaFetchRequest is one request of a replication stream.
//
// A session starts with SessionEpoch 0 (a full fetch: Changed lists every
// partition; SessionID, when not 0, names an older session of the same
// follower for the leader to drop). The answer names the session; each
// later request carries it with the next epoch (1, 2, …) and lists only the
// partitions whose fetch offset or leader epoch changed since the request
// before, and those that left. The partitions left out are fetched at the
// offsets the session holds.
type ReplicaFetchRequest struct {
	ReplicaID    int32
	SessionID    int32
	SessionEpoch int32
	MaxWait      time.Duration
	MinBytes     int32
	// MaxBytes bounds the answer's data; PartitionMaxBytes each
	// partition's. The first partition with data gets one whole batch
	// even when it is larger.
	MaxBytes          int32
	PartitionMaxBytes int32
	Changed           []ReplicaFetchPartition
	Removed           []TopicPartition
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// ReplicaFetchPartition is a partition a request adds to its session or
// changes in it.
type ReplicaFetchPartition struct {
	TopicPartition
	FetchOffset int64
	LeaderEpoch int32
}

// ReplicaFetchAnswer answers a replica fetch: the session and, for each
// partition that has data, an error, or positions that moved since the
// session's previous answer, one entry (all of them in a session's first
// answer). The data of the entries follows their headers in the same order.
type ReplicaFetchAnswer struct {
	SessionID  int32
	Partitions []ReplicaFetchedPartition
}

// ReplicaFetchedPartition is one partition of an answer.
type ReplicaFetchedPartition struct {
	TopicPartition
	Err           *api.Error // nil: none
	HighWatermark int64
	LogStart      int64
	LogEnd        int64
	Size          int64
	// Data is the partition's batches, a view of the answer buffer the
	// client read it into (valid until that buffer's next use).
	Data []byte
}

// EncodeReplicaFetchRequest is the body of a request.
func EncodeReplicaFetchRequest(r ReplicaFetchRequest) []byte {
	b := make([]byte, 0, 64+len(r.Changed)*32+len(r.Removed)*24)
	b = append(b, replicaFetchVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(r.ReplicaID))
	b = binary.BigEndian.AppendUint32(b, uint32(r.SessionID))
	b = binary.BigEndian.AppendUint32(b, uint32(r.SessionEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(r.MaxWait.Milliseconds()))
	b = binary.BigEndian.AppendUint32(b, uint32(r.MinBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(r.MaxBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(r.PartitionMaxBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Changed)))
	for _, p := range r.Changed {
		b = appendString(b, p.Topic)
		b = binary.BigEndian.AppendUint32(b, uint32(p.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(p.FetchOffset))
		b = binary.BigEndian.AppendUint32(b, uint32(p.LeaderEpoch))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Removed)))
	for _, p := range r.Removed {
		b = appendString(b, p.Topic)
		b = binary.BigEndian.AppendUint32(b, uint32(p.Partition))
	}
	return b
}

// DecodeReplicaFetchRequest reads a request body, refusing (INVALID_REQUEST)
// one that is cut short, has trailing bytes, negative bounds, an empty or
// overlong topic, or more than MaxReplicaFetchPartitions partitions.
func DecodeReplicaFetchRequest(body []byte) (ReplicaFetchRequest, error) {
	d := decoder{b: body}
	var r ReplicaFetchRequest
	if v := d.u8(); d.err == nil && v != replicaFetchVersion {
		return r, api.Errorf(api.CodeInvalidRequest, "replica fetch: version %d, want %d", v, replicaFetchVersion)
	}
	r.ReplicaID = d.i32()
	r.SessionID = d.i32()
	r.SessionEpoch = d.i32()
	waitMs := d.i32()
	r.MinBytes = d.i32()
	r.MaxBytes = d.i32()
	r.PartitionMaxBytes = d.i32()
	n := d.count()
	if d.err == nil {
		r.Changed = make([]ReplicaFetchPartition, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		p := ReplicaFetchPartition{TopicPartition: TopicPartition{Topic: d.topic(), Partition: d.i32()}, FetchOffset: d.i64(), LeaderEpoch: d.i32()}
		r.Changed = append(r.Changed, p)
	}
	m := d.count()
	if d.err == nil && n+m > MaxReplicaFetchPartitions {
		d.fail("%d partitions, at most %d", n+m, MaxReplicaFetchPartitions)
	}
	if d.err == nil {
		r.Removed = make([]TopicPartition, 0, m)
	}
	for i := 0; i < m && d.err == nil; i++ {
		r.Removed = append(r.Removed, TopicPartition{Topic: d.topic(), Partition: d.i32()})
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the request", len(d.b))
	}
	if d.err == nil && (waitMs < 0 || r.MinBytes < 0 || r.MaxBytes < 0 || r.PartitionMaxBytes < 0 || r.SessionEpoch < 0 || r.ReplicaID <= 0) {
		d.fail("negative bound, epoch or replica id")
	}
	if d.err == nil {
		for _, p := range r.Changed {
			if p.Partition < 0 || p.FetchOffset < 0 {
				d.fail("%s-%d: negative partition or fetch offset", p.Topic, p.Partition)
				break
			}
		}
	}
	r.MaxWait = time.Duration(waitMs) * time.Millisecond
	return r, d.err
}

// AppendReplicaFetchHeader appends an answer's header (everything but the
// partitions' data, which follows it in the same order) to dst.
func AppendReplicaFetchHeader(dst []byte, sessionID int32, parts []ReplicaFetchedPartition) []byte {
	dst = append(dst, replicaFetchVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(sessionID))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(parts)))
	for _, p := range parts {
		dst = appendString(dst, p.Topic)
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Partition))
		var code, msg string
		if p.Err != nil {
			code, msg = string(p.Err.Code), p.Err.Message
			if len(msg) > maxErrorBytes {
				msg = msg[:maxErrorBytes]
			}
		}
		dst = appendString(dst, code)
		dst = appendString(dst, msg)
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.HighWatermark))
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.LogStart))
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.LogEnd))
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Size))
	}
	return dst
}

// DecodeReplicaFetchAnswer reads an answer of size bytes from r: the header,
// then every partition's data into *buf (grown as needed, and reused by the
// caller across answers), which the partitions' Data then view.
func DecodeReplicaFetchAnswer(r io.Reader, size int64, buf *[]byte) (ReplicaFetchAnswer, error) {
	var a ReplicaFetchAnswer
	hr := &headerReader{r: r, left: size}
	a.SessionID, a.Partitions = 0, nil
	if v := hr.u8(); hr.err == nil && v != replicaFetchVersion {
		return a, fmt.Errorf("replica fetch answer: version %d, want %d", v, replicaFetchVersion)
	}
	a.SessionID = hr.i32()
	n := hr.i32()
	if hr.err == nil && (n < 0 || n > MaxReplicaFetchPartitions) {
		return a, fmt.Errorf("replica fetch answer: %d partitions, at most %d", n, MaxReplicaFetchPartitions)
	}
	var total int64
	if hr.err == nil {
		a.Partitions = make([]ReplicaFetchedPartition, 0, n)
	}
	for i := int32(0); i < n && hr.err == nil; i++ {
		p := ReplicaFetchedPartition{TopicPartition: TopicPartition{Topic: hr.str(maxTopicBytes), Partition: hr.i32()}}
		code, msg := hr.str(64), hr.str(maxErrorBytes)
		if code != "" {
			p.Err = &api.Error{Code: api.Code(code), Message: msg}
		}
		p.HighWatermark, p.LogStart, p.LogEnd, p.Size = hr.i64(), hr.i64(), hr.i64(), hr.i64()
		if hr.err == nil && (p.Size < 0 || total+p.Size > MaxReplicaFetchAnswerBytes) {
			return a, fmt.Errorf("replica fetch answer: data of %d bytes after %d, at most %d", p.Size, total, MaxReplicaFetchAnswerBytes)
		}
		total += p.Size
		a.Partitions = append(a.Partitions, p)
	}
	if hr.err != nil {
		return a, fmt.Errorf("replica fetch answer: %w", hr.err)
	}
	if total != hr.left {
		return a, fmt.Errorf("replica fetch answer: %d bytes of data, %d left in the body", total, hr.left)
	}
	if int64(cap(*buf)) < total {
		*buf = make([]byte, total)
	}
	data := (*buf)[:total]
	if _, err := io.ReadFull(r, data); err != nil {
		return a, fmt.Errorf("replica fetch answer: data cut short: %w", err)
	}
	var at int64
	for i := range a.Partitions {
		p := &a.Partitions[i]
		p.Data = data[at : at+p.Size : at+p.Size]
		at += p.Size
	}
	return a, nil
}

// ReplicaFetch sends one request of a replication stream to the leader at
// addr and reads the answer, its data into *buf (see
// DecodeReplicaFetchAnswer). Session errors (FETCH_SESSION_ID_NOT_FOUND,
// INVALID_FETCH_SESSION_EPOCH) and refusals come back as *api.Error.
func (c *Client) ReplicaFetch(ctx context.Context, addr string, r ReplicaFetchRequest, buf *[]byte) (ReplicaFetchAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base(addr)+PathReplicaFetch, bytes.NewReader(EncodeReplicaFetchRequest(r)))
	if err != nil {
		return ReplicaFetchAnswer{}, err
	}
	req.Header.Set("Content-Type", ContentTypeReplicaFetch)
	resp, err := c.do(req)
	if err != nil {
		return ReplicaFetchAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.ContentLength < 0 {
		return ReplicaFetchAnswer{}, api.Errorf(api.CodeBrokerUnavailable, "%s: replica fetch answer without a length", addr)
	}
	a, err := DecodeReplicaFetchAnswer(resp.Body, resp.ContentLength, buf)
	if err != nil {
		return a, api.Errorf(api.CodeBrokerUnavailable, "%s: %v", addr, err)
	}
	return a, nil
}

// WakeReplicaFetch asks the leader at addr to end the long poll of the
// follower replica's fetch session id (PathReplicaFetchWake).
// FETCH_SESSION_ID_NOT_FOUND: the leader holds no such session.
func (c *Client) WakeReplicaFetch(ctx context.Context, addr string, replica, session int32) error {
	u := c.base(addr) + PathReplicaFetchWake + "?replica_id=" + strconv.Itoa(int(replica)) + "&session_id=" + strconv.Itoa(int(session))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// decoder reads a request body; the first problem sticks in err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = api.Errorf(api.CodeInvalidRequest, "replica fetch: "+format, args...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("cut short")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) i32() int32 {
	if v := d.take(4); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (d *decoder) i64() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// count reads a partition count, refusing one past the bound or past what
// the rest of the body could hold (so no allocation follows a lie).
func (d *decoder) count() int {
	n := d.i32()
	if d.err == nil && (n < 0 || n > MaxReplicaFetchPartitions || int(n)*6 > len(d.b)) {
		d.fail("partition count %d", n)
		return 0
	}
	return int(n)
}

func (d *decoder) topic() string {
	v := d.take(2)
	if v == nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(v))
	if n == 0 || n > maxTopicBytes {
		d.fail("topic name of %d bytes", n)
		return ""
	}
	return string(d.take(n))
}

// headerReader reads an answer's header from a stream, counting down the
// bytes left in the body; the first problem sticks in err.
type headerReader struct {
	r       io.Reader
	left    int64
	scratch [8]byte
	err     error
}

func (h *headerReader) take(n int) []byte {
	if h.err != nil {
		return nil
	}
	if int64(n) > h.left {
		h.err = io.ErrUnexpectedEOF
		return nil
	}
	var b []byte
	if n <= len(h.scratch) {
		b = h.scratch[:n]
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(h.r, b); err != nil {
		h.err = err
		return nil
	}
	h.left -= int64(n)
	return b
}

func (h *headerReader) u8() uint8 {
	if v := h.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (h *headerReader) i32() int32 {
	if v := h.take(4); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (h *headerReader) i64() int64 {
	if v := h.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (h *headerReader) str(limit int) string {
	v := h.take(2)
	if v == nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(v))
	if n > limit {
		h.err = fmt.Errorf("string of %d bytes, at most %d", n, limit)
		return ""
	}
	return string(h.take(n))
}
