package kafka

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// fakeFetch is the fake backend's fetch side: fixed data per partition.
type fakeFetch struct {
	mu       sync.Mutex
	parts    map[fakeTP]fakePart
	last     FetchRequest // the last request Fetch got
	throttle time.Duration
	// epochs answers EpochEnd by epoch asked.
	epochs map[int32]EpochEndResult
}

type fakeTP struct {
	topic     string
	partition int32
}

type fakePart struct {
	data         []byte // answered for any offset below hw
	hw, logStart int64
	err          error
	file         *os.File // when set, data is read from it
}

func (f *fakeBackend) Fetch(_ context.Context, req FetchRequest) (FetchResult, error) {
	ff := &f.fetch
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.last = req
	out := FetchResult{Throttle: ff.throttle}
	for _, p := range req.Partitions {
		part, ok := ff.parts[fakeTP{p.Topic, p.Partition}]
		var fp FetchedPartition
		switch {
		case !ok:
			fp.Err = api.Errorf(api.CodeUnknownTopic, "no partition %s/%d", p.Topic, p.Partition)
		case part.err != nil:
			fp.Err = part.err
		case p.Offset > part.hw || p.Offset < part.logStart:
			fp.Err = api.Errorf(api.CodeOffsetOutOfRange, "offset %d", p.Offset)
		default:
			fp.HighWatermark, fp.LogStartOffset = part.hw, part.logStart
			if p.Offset < part.hw && part.file != nil {
				fp.Records = &fileRecords{f: part.file, n: int64(len(part.data))}
			} else if p.Offset < part.hw {
				fp.Records = memRecords(part.data)
			}
		}
		out.Partitions = append(out.Partitions, fp)
	}
	return out, nil
}

func (f *fakeBackend) EpochEnd(_ context.Context, topic string, partition int32, current, epoch int32) (EpochEndResult, error) {
	if _, ok := f.md.Topics[topic]; !ok {
		return EpochEndResult{}, api.Errorf(api.CodeUnknownTopic, "no topic %q", topic)
	}
	if current >= 0 && current < 5 {
		return EpochEndResult{}, api.Errorf(api.CodeFencedLeaderEpoch, "epoch %d", current)
	}
	f.fetch.mu.Lock()
	defer f.fetch.mu.Unlock()
	if r, ok := f.fetch.epochs[epoch]; ok {
		return r, nil
	}
	return EpochEndResult{LeaderEpoch: -1, EndOffset: -1}, nil
}

// memRecords are records in memory.
type memRecords []byte

func (m memRecords) Len() int64 { return int64(len(m)) }
func (m memRecords) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(m)
	return int64(n), err
}
func (memRecords) FromFile() bool { return false }
func (memRecords) Close()         {}

// fileRecords are the first n bytes of a file, copied as the broker's are.
type fileRecords struct {
	f      *os.File
	n      int64
	closed bool
}

func (r *fileRecords) Len() int64 { return r.n }
func (r *fileRecords) WriteTo(w io.Writer) (int64, error) {
	if _, err := r.f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return io.Copy(w, io.LimitReader(r.f, r.n))
}
func (*fileRecords) FromFile() bool { return true }
func (r *fileRecords) Close()       { r.closed = true }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}

// fileWith writes data to a file of the test and opens it.
func fileWith(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "records")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

var ordersID = [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

func fetchReq(version int16, offsets ...int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "orders", ordersID
	for i, off := range offsets {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = int32(i), off, 1<<20, 5
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// Each version from v4 to v18 answers the stored bytes as they are, with
// the positions, in the request's order, whether the records come from
// memory or from a file (written to the socket in pieces), and whatever
// their length's encoding takes (one to three varint bytes at v12+).
func TestFetch(t *testing.T) {
	for _, size := range []int{100, 200, 20000} {
		small, fromFile := randomBytes(size), randomBytes(size+7)
		be := &fakeBackend{}
		be.fetch.parts = map[fakeTP]fakePart{
			{"orders", 0}: {data: small, hw: 10, logStart: 2},
			{"orders", 1}: {data: fromFile, hw: 20, logStart: 0, file: fileWith(t, fromFile)},
		}
		s, addr := startServer(t, be, Options{})
		c := dial(t, addr)
		for v := int16(4); v <= 18; v++ {
			resp := c.roundTrip(fetchReq(v, 3, 5)).(*kmsg.FetchResponse)
			if resp.ErrorCode != 0 || resp.SessionID != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
				t.Fatalf("v%d: %+v", v, resp)
			}
			rt := resp.Topics[0]
			if v >= 13 && rt.TopicID != ordersID || v < 13 && rt.Topic != "orders" {
				t.Fatalf("v%d: topic %q %x", v, rt.Topic, rt.TopicID)
			}
			for i, want := range []struct {
				data         []byte
				hw, logStart int64
			}{{small, 10, 2}, {fromFile, 20, 0}} {
				p := rt.Partitions[i]
				if p.Partition != int32(i) || p.ErrorCode != 0 || p.HighWatermark != want.hw || p.LastStableOffset != want.hw ||
					v >= 5 && p.LogStartOffset != want.logStart || !bytes.Equal(p.RecordBatches, want.data) {
					t.Fatalf("v%d size %d partition %d: error %d hw %d lso %d log start %d, %d bytes", v, size, i, p.ErrorCode, p.HighWatermark, p.LastStableOffset, p.LogStartOffset, len(p.RecordBatches))
				}
			}
		}
		// The request as the backend took it, at v18.
		be.fetch.mu.Lock()
		last := be.fetch.last
		be.fetch.mu.Unlock()
		if last.ClientID != "test" || last.MaxWait != 500*time.Millisecond || last.MinBytes != 1 || last.MaxBytes != 1<<20 || len(last.Partitions) != 2 ||
			last.Partitions[1] != (FetchPartitionRequest{Topic: "orders", Partition: 1, Offset: 5, CurrentLeaderEpoch: 5, MaxBytes: 1 << 20}) {
			t.Fatalf("backend asked %+v", last)
		}
		// The file's bytes count as sent from a file to a plaintext TCP
		// connection (sendfile) when they are not copied with the rest.
		st := s.Stats()
		wantSendfile := int64(0)
		if len(fromFile) >= sendfileMin {
			wantSendfile = int64(15 * len(fromFile))
		}
		if want := int64(15 * (len(small) + len(fromFile))); st.FetchedBytes != want || st.SendfileBytes != wantSendfile {
			t.Fatalf("fetched %d (want %d), sendfile %d (want %d)", st.FetchedBytes, want, st.SendfileBytes, wantSendfile)
		}
	}
}

// A request's bounds are capped before the backend sees them, and old
// versions name no leader epoch.
func TestFetchBounds(t *testing.T) {
	be := &fakeBackend{}
	be.fetch.parts = map[fakeTP]fakePart{{"orders", 0}: {hw: 0}}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	req := fetchReq(8, 0)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 1<<31-1, -1, 1<<31-1
	req.Topics[0].Partitions[0].PartitionMaxBytes = -5
	resp := c.roundTrip(req).(*kmsg.FetchResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || len(p.RecordBatches) != 0 {
		t.Fatalf("%+v", p)
	}
	be.fetch.mu.Lock()
	last := be.fetch.last
	be.fetch.mu.Unlock()
	if last.MaxWait != maxFetchWait || last.MinBytes != 0 || last.MaxBytes != maxFetchBytes || last.Partitions[0].MaxBytes != 0 || last.Partitions[0].CurrentLeaderEpoch != -1 {
		t.Fatalf("backend asked %+v", last)
	}
}

// Errors are per partition; the others are still answered. A partition
// led elsewhere names its leader (v12+) and that broker's address (v16+);
// an unknown topic ID is UNKNOWN_TOPIC_ID; a quota debt is the answer's
// throttle time.
func TestFetchErrors(t *testing.T) {
	be := &fakeBackend{}
	data := randomBytes(300)
	be.fetch.parts = map[fakeTP]fakePart{
		{"orders", 0}: {err: api.Errorf(api.CodeNotLeader, "not the leader")},
		{"orders", 1}: {data: data, hw: 9},
		{"orders", 2}: {hw: 4},
		{"orders", 3}: {err: api.Errorf(api.CodeFencedLeaderEpoch, "old epoch")},
	}
	be.fetch.throttle = 1500 * time.Microsecond
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	resp := c.roundTrip(fetchReq(18, 0, 1, 5, 0)).(*kmsg.FetchResponse)
	ps := resp.Topics[0].Partitions
	if ps[0].ErrorCode != kerr.NotLeaderForPartition.Code || ps[0].CurrentLeader.LeaderID != 1 || ps[0].CurrentLeader.LeaderEpoch != 5 {
		t.Fatalf("partition 0: %+v", ps[0])
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 1 || resp.Brokers[0].Host != "127.0.0.1" || resp.Brokers[0].Port != 9092 {
		t.Fatalf("brokers %+v", resp.Brokers)
	}
	if ps[1].ErrorCode != 0 || !bytes.Equal(ps[1].RecordBatches, data) {
		t.Fatalf("partition 1: error %d, %d bytes", ps[1].ErrorCode, len(ps[1].RecordBatches))
	}
	if ps[2].ErrorCode != kerr.OffsetOutOfRange.Code || ps[3].ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Fatalf("partitions 2, 3: %d %d", ps[2].ErrorCode, ps[3].ErrorCode)
	}
	if resp.ThrottleMillis != 2 {
		t.Fatalf("throttle %d ms", resp.ThrottleMillis)
	}

	req := fetchReq(13, 0)
	req.Topics[0].TopicID = [16]byte{9}
	resp = c.roundTrip(req).(*kmsg.FetchResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicID.Code || resp.Topics[0].TopicID != [16]byte{9} {
		t.Fatalf("%+v", resp.Topics[0])
	}
	// Fetch v3 and older carry old message formats: not served.
	old := fetchReq(3, 0)
	c.send(old)
	c.closed()
}

// OffsetForLeaderEpoch answers the backend's end of each epoch asked for,
// the leader epoch fenced from v2, at every version.
func TestOffsetForLeaderEpoch(t *testing.T) {
	be := &fakeBackend{}
	be.fetch.epochs = map[int32]EpochEndResult{3: {LeaderEpoch: 3, EndOffset: 40}, 5: {LeaderEpoch: 5, EndOffset: 77}}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	for v := int16(0); v <= 4; v++ {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.SetVersion(v)
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "orders"
		for _, e := range [][2]int32{{5, 3}, {5, 5}, {4, 3}, {5, 1}} {
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.CurrentLeaderEpoch, rp.LeaderEpoch = e[0], e[1]
			rt.Partitions = append(rt.Partitions, rp)
		}
		missing := kmsg.NewOffsetForLeaderEpochRequestTopic()
		missing.Topic = "nope"
		missing.Partitions = []kmsg.OffsetForLeaderEpochRequestTopicPartition{kmsg.NewOffsetForLeaderEpochRequestTopicPartition()}
		req.Topics = append(req.Topics, rt, missing)
		resp := c.roundTrip(req).(*kmsg.OffsetForLeaderEpochResponse)
		ps := resp.Topics[0].Partitions
		if ps[0].ErrorCode != 0 || ps[0].EndOffset != 40 || v >= 1 && ps[0].LeaderEpoch != 3 ||
			ps[1].EndOffset != 77 || ps[3].EndOffset != -1 {
			t.Fatalf("v%d: %+v", v, ps)
		}
		// Current leader epoch 4 is fenced from v2; before, it is not sent.
		if fenced := ps[2].ErrorCode == kerr.FencedLeaderEpoch.Code; fenced != (v >= 2) || !fenced && ps[2].EndOffset != 40 {
			t.Fatalf("v%d: %+v", v, ps[2])
		}
		if p := resp.Topics[1].Partitions[0]; p.ErrorCode != kerr.UnknownTopicOrPartition.Code || p.EndOffset != -1 {
			t.Fatalf("v%d: %+v", v, p)
		}
	}
}

// An answer written in pieces, records from memory and from a file over a
// TCP connection, is byte for byte what kmsg encodes with the records in
// place, at a non-flexible and a flexible version, for record lengths
// whose varint takes one, two and three bytes, records copied with the
// rest or written alone (sendfile), and more small records than one write
// gathers.
func TestFetchPiecesAreKmsgEncoding(t *testing.T) {
	s, err := New(Options{Backend: &fakeBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	many := make([]int, 60) // 60 partitions: a record of 10,000 bytes every other one
	for i := range many {
		if i%2 == 0 {
			many[i] = 10_000
		}
	}
	for _, v := range []int16{4, 11, 12, 18} {
		for _, sizes := range [][]int{{50, 0, 51}, {300, 0, 301}, {20000, 0, 20001}, {300_000, 0, 300_001}, many} {
			resp := kmsg.NewPtrFetchResponse()
			resp.Version = v
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = "orders", ordersID
			for i := range sizes {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark = int32(i), int64(i)
				p.RecordBatches = []byte{}
				rt.Partitions = append(rt.Partitions, p)
			}
			resp.Topics = append(resp.Topics, rt)
			ps := resp.Topics[0].Partitions
			a := &fetchAnswer{FetchResponse: resp}
			data := make([][]byte, len(sizes))
			for i, n := range sizes {
				if n == 0 {
					continue
				}
				data[i] = randomBytes(n)
				var rec Records = memRecords(data[i])
				if i%4 == 2 {
					rec = &fileRecords{f: fileWith(t, data[i]), n: int64(n)}
				}
				a.records = append(a.records, fetchRecords{&ps[i], rec})
			}
			got := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				b, _ := io.ReadAll(c)
				c.Close()
				got <- b
			}()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.writeFetch(nc, nil, 7, a); err != nil {
				t.Fatal(err)
			}
			nc.Close()
			b := <-got
			for i := range sizes {
				if data[i] != nil {
					ps[i].RecordBatches = data[i]
				}
			}
			if want := appendResponse(nil, 7, resp); !bytes.Equal(b, want) {
				t.Fatalf("v%d, sizes %v: wrote %d bytes, kmsg encodes %d", v, sizes, len(b), len(want))
			}
		}
	}
}
