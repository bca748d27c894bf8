package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/cluster"
)

// Fetch bounds. A request's own values apply below them.
const (
	// maxFetchWait caps max_wait_ms: clients send 500 ms (librdkafka) or
	// 5 s (franz-go), and add it to their request timeout.
	maxFetchWait = 30 * time.Second
	// maxFetchBytes caps max_bytes and partition_max_bytes. The first
	// partition with data is given one whole batch even when it is larger
	// (Kafka's rule, so that a consumer never stalls on a large batch); a
	// batch is at most the topic's max.message.bytes.
	maxFetchBytes = 64 << 20
)

// FetchRequest is a consumer's fetch over any number of partitions, as
// Backend.Fetch takes it.
type FetchRequest struct {
	// ClientID is the request's client id, which client quotas are
	// resolved with.
	ClientID string
	// MaxWait bounds the long poll: the answer comes once MinBytes are
	// there, a partition has an error, or MaxWait passed.
	MaxWait  time.Duration
	MinBytes int64
	// MaxBytes bounds the data over all partitions; the first partition
	// with data gets at least one whole batch.
	MaxBytes   int64
	Partitions []FetchPartitionRequest
}

// FetchPartitionRequest is one partition of a FetchRequest.
type FetchPartitionRequest struct {
	Topic     string
	Partition int32
	Offset    int64
	// CurrentLeaderEpoch fences a client with stale metadata (-1: not
	// checked).
	CurrentLeaderEpoch int32
	MaxBytes           int64
}

// FetchResult answers Backend.Fetch.
type FetchResult struct {
	// Throttle is how long the client should wait before its next fetch:
	// its consumer byte-rate quota is in debt (Kafka's throttle_time_ms).
	Throttle time.Duration
	// Partitions are in the request's order. The caller closes them.
	Partitions []FetchedPartition
}

// Close gives back what every partition's records hold.
func (r *FetchResult) Close() {
	for i := range r.Partitions {
		if rec := r.Partitions[i].Records; rec != nil {
			rec.Close()
		}
	}
}

// FetchedPartition is one partition of a FetchResult.
type FetchedPartition struct {
	Err           error
	HighWatermark int64
	// LogStartOffset is the partition's log start, the remote tier
	// included.
	LogStartOffset int64
	// Records are the stored batches read, as they are; nil when none.
	Records Records
}

// Records are one partition's fetched batches, written to the client
// without being decoded.
type Records interface {
	// Len is the bytes WriteTo writes.
	Len() int64
	// WriteTo writes the bytes to w. Bytes in a segment file are copied
	// from its *os.File with io.Copy, so that a *net.TCPConn sends them
	// with sendfile.
	WriteTo(w io.Writer) (int64, error)
	// FromFile reports whether WriteTo copies from a file (and so, to a
	// plaintext TCP connection, with sendfile).
	FromFile() bool
	// Close gives back what the records hold (a file descriptor's lease).
	// It may be called more than once.
	Close()
}

// handleFetch answers Fetch through Backend.Fetch: a consumer's
// multi-partition long poll, reading up to the high watermark (so
// read_committed and read_uncommitted read the same: no transaction is
// ever open), the remote tier included. Fetch sessions are not kept: the
// answer's session id is 0, so clients send full fetches. Topics are named
// by ID from v13 and answered with their ID. The stored batches go out as
// they are, after the rest of the answer is encoded by kmsg (fetchAnswer).
// Every fetch is a consumer's, whatever replica id it names: replication
// runs over the internal API, so nothing past the high watermark is read.
func (s *Server) handleFetch(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	md := s.opts.Backend.Metadata()
	fr := FetchRequest{
		ClientID: c.clientID,
		MaxWait:  min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, maxFetchWait),
		MinBytes: int64(max(req.MinBytes, 0)),
		MaxBytes: maxFetchBytes,
	}
	if req.Version >= 3 && req.MaxBytes > 0 {
		fr.MaxBytes = min(int64(req.MaxBytes), maxFetchBytes)
	}
	// Answers are filled in place; asked maps each partition read to its
	// slot.
	var asked []*kmsg.FetchResponseTopicPartition
	var askedTopic []string
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewFetchResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		name, topicErr := rt.Topic, int16(0)
		if req.Version >= 13 {
			if n, ok := s.ids.name(md, rt.TopicID); ok {
				name = n
			} else {
				topicErr = kerr.UnknownTopicID.Code
			}
		}
		t.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			out := &t.Partitions[j]
			*out = kmsg.NewFetchResponseTopicPartition()
			out.Partition = rp.Partition
			out.HighWatermark, out.LastStableOffset, out.LogStartOffset = -1, -1, -1
			out.RecordBatches = []byte{} // empty, not null, as Kafka answers
			if topicErr != 0 {
				out.ErrorCode = topicErr
				continue
			}
			epoch := int32(-1)
			if req.Version >= 9 {
				epoch = rp.CurrentLeaderEpoch
			}
			fr.Partitions = append(fr.Partitions, FetchPartitionRequest{
				Topic: name, Partition: rp.Partition, Offset: rp.FetchOffset, CurrentLeaderEpoch: epoch,
				MaxBytes: min(int64(max(rp.PartitionMaxBytes, 0)), maxFetchBytes),
			})
			asked = append(asked, out)
			askedTopic = append(askedTopic, name)
		}
	}
	ans := &fetchAnswer{FetchResponse: resp}
	if len(fr.Partitions) == 0 {
		return ans, nil
	}
	res, err := s.opts.Backend.Fetch(ctx, fr)
	if err != nil {
		return nil, err
	}
	if len(res.Partitions) != len(asked) {
		res.Close()
		return nil, fmt.Errorf("the broker answered %d partitions of %d", len(res.Partitions), len(asked))
	}
	resp.ThrottleMillis = int32(min((res.Throttle+time.Millisecond-1)/time.Millisecond, 1<<31-1))
	for i, f := range res.Partitions {
		out := asked[i]
		if f.Err != nil {
			out.ErrorCode = errorCode(f.Err)
			if out.ErrorCode == kerr.NotLeaderForPartition.Code || out.ErrorCode == kerr.FencedLeaderEpoch.Code {
				fetchLeader(md, resp, askedTopic[i], out)
			}
			if f.Records != nil {
				f.Records.Close()
			}
			continue
		}
		out.HighWatermark, out.LastStableOffset, out.LogStartOffset = f.HighWatermark, f.HighWatermark, f.LogStartOffset
		if f.Records != nil && f.Records.Len() > 0 {
			ans.records = append(ans.records, fetchRecords{out, f.Records})
		} else if f.Records != nil {
			f.Records.Close()
		}
	}
	return ans, nil
}

// fetchLeader adds, to a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
// answer, the partition's leader as this broker knows it (Fetch v12+'s
// current leader) and, from v16, that broker's address (KIP-951), so that
// a client can move before its next metadata refresh.
func fetchLeader(md *cluster.Metadata, resp *kmsg.FetchResponse, topic string, out *kmsg.FetchResponseTopicPartition) {
	tm, ok := md.Topics[topic]
	if !ok || out.Partition < 0 || int(out.Partition) >= len(tm.States) {
		return
	}
	st := tm.States[out.Partition]
	host, port, ok := splitHostPort(md.Brokers[st.Leader].KafkaAddress)
	if st.Leader < 0 || !ok {
		return
	}
	out.CurrentLeader.LeaderID, out.CurrentLeader.LeaderEpoch = st.Leader, st.LeaderEpoch
	for _, b := range resp.Brokers {
		if b.NodeID == st.Leader {
			return
		}
	}
	b := kmsg.NewFetchResponseBroker()
	b.NodeID, b.Host, b.Port = st.Leader, host, port
	resp.Brokers = append(resp.Brokers, b)
}

// fetchAnswer is a Fetch answer whose record bytes are written after the
// rest is encoded: the partitions with records are encoded with a marker
// in their place, and the frame goes out in pieces (the encoded bytes up
// to a marker's length field, the records' real length, the records
// themselves from their file or cache, and so on), so that bytes in a
// segment file go from the file to the socket without a copy in memory.
type fetchAnswer struct {
	*kmsg.FetchResponse
	records []fetchRecords
}

// fetchRecords is one partition's records and its slot in the answer.
type fetchRecords struct {
	out *kmsg.FetchResponseTopicPartition
	rec Records
}

// close gives back every partition's records.
func (a *fetchAnswer) close() {
	for _, r := range a.records {
		r.rec.Close()
	}
}

// markerSize is the length of a record marker: the server's random nonce
// and the partition's index in the answer.
const markerSize = 16

// marker is the placeholder of the i-th partition with records.
func (s *Server) marker(i int) []byte {
	m := make([]byte, markerSize)
	copy(m, s.nonce[:])
	binary.BigEndian.PutUint32(m[markerSize-4:], uint32(i))
	return m
}

// fetchPiece is the part of an answer before one partition's records:
// the encoded bytes, with the records' length field already replaced.
type fetchPiece struct {
	head []byte
	rec  Records
}

// pieces encodes the answer with markers for the records and splits it
// where they go. tail is what follows the last records.
func (s *Server) pieces(dst []byte, corr int32, a *fetchAnswer) (pieces []fetchPiece, tail []byte, err error) {
	for i, r := range a.records {
		r.out.RecordBatches = s.marker(i)
	}
	enc := appendResponse(dst, corr, a.FetchResponse)
	flexible := a.IsFlexible()
	// First the markers' places and the frame's size, then the pieces:
	// the size field is in the first one.
	at := make([]int, len(a.records))
	size := int64(len(enc) - 4)
	from := 0
	for i, r := range a.records {
		k := bytes.Index(enc[from:], s.marker(i))
		if k < 0 {
			return nil, nil, fmt.Errorf("a fetch answer lost its record marker %d", i)
		}
		k += from
		n := r.rec.Len()
		if flexible {
			// Compact bytes: an unsigned varint of the length plus one;
			// a marker's is one byte.
			if k < 1 || enc[k-1] != markerSize+1 {
				return nil, nil, fmt.Errorf("a fetch answer's record marker %d has no length before it", i)
			}
			size += int64(uvarintLen(uint64(n)+1) - 1)
		} else if k < 4 || binary.BigEndian.Uint32(enc[k-4:]) != markerSize {
			return nil, nil, fmt.Errorf("a fetch answer's record marker %d has no length before it", i)
		}
		size += n - markerSize
		at[i], from = k, k+markerSize
	}
	if size > 1<<31-1 {
		return nil, nil, fmt.Errorf("a fetch answer of %d bytes", size)
	}
	binary.BigEndian.PutUint32(enc, uint32(size))
	from = 0
	for i, r := range a.records {
		var head []byte
		if flexible {
			head = binary.AppendUvarint(slices.Clip(enc[from:at[i]-1]), uint64(r.rec.Len())+1)
		} else {
			binary.BigEndian.PutUint32(enc[at[i]-4:], uint32(r.rec.Len()))
			head = enc[from:at[i]]
		}
		pieces = append(pieces, fetchPiece{head, r.rec})
		from = at[i] + markerSize
	}
	return pieces, enc[from:], nil
}

// uvarintLen is the length of x as an unsigned varint.
func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// Records shorter than sendfileMin are copied into the answer's buffer
// with the encoded bytes around them, so that a fetch of many partitions
// with a few small batches each goes out in one write, not a write and a
// sendfile per partition; maxPending bounds what is gathered before a
// write.
const (
	sendfileMin = 16 << 10
	maxPending  = 256 << 10
)

// writeFetch writes a Fetch answer in pieces (see fetchAnswer) and closes
// its records. dst is a buffer to encode into; the one used is returned.
func (s *Server) writeFetch(w io.Writer, dst []byte, corr int32, a *fetchAnswer) ([]byte, error) {
	defer a.close()
	if len(a.records) == 0 {
		out := appendResponse(dst, corr, a.FetchResponse)
		_, err := w.Write(out)
		return out, err
	}
	pieces, tail, err := s.pieces(dst, corr, a)
	if err != nil {
		return dst, err
	}
	_, plain := w.(*net.TCPConn)
	var pending bytes.Buffer
	flush := func() error {
		if pending.Len() == 0 {
			return nil
		}
		_, err := w.Write(pending.Bytes())
		pending.Reset()
		return err
	}
	for _, p := range pieces {
		pending.Write(p.head)
		size := p.rec.Len()
		var n int64
		if size < sendfileMin {
			n, err = p.rec.WriteTo(&pending)
		} else {
			if err := flush(); err != nil {
				return dst, err
			}
			n, err = p.rec.WriteTo(w)
			if plain && p.rec.FromFile() {
				s.sendfileBytes.Add(n)
			}
		}
		s.fetchedBytes.Add(n)
		if err != nil {
			return dst, err
		}
		if n != size {
			return dst, fmt.Errorf("wrote %d bytes of records of %d", n, size)
		}
		if pending.Len() >= maxPending {
			if err := flush(); err != nil {
				return dst, err
			}
		}
	}
	pending.Write(tail)
	return dst, flush()
}
