package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// fakeBackend answers from a fixed snapshot and records produces.
type fakeBackend struct {
	md *cluster.Metadata

	mu       sync.Mutex
	produced []fakeProduce
	nextID   int64
	// produceErr, when set, fails every produce.
	produceErr error
	// block, when set, makes Produce wait until it is closed (or ctx ends).
	block chan struct{}
	// entered receives one value per Produce call that started.
	entered chan struct{}
	// fetch answers Fetch and EpochEnd (fetch_test.go).
	fetch fakeFetch
}

type fakeProduce struct {
	topic     string
	partition int32
	acks      int16
	batch     []byte
}

func (f *fakeBackend) Metadata() *cluster.Metadata { return f.md }

func (f *fakeBackend) Produce(ctx context.Context, topic string, partition int32, batch []byte, acks int16) (ProduceResult, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ProduceResult{}, api.Errorf(api.CodeRequestTimedOut, "%v", ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.produceErr != nil {
		return ProduceResult{}, f.produceErr
	}
	base := int64(0)
	for _, p := range f.produced {
		if p.topic == topic && p.partition == partition {
			base++
		}
	}
	f.produced = append(f.produced, fakeProduce{topic, partition, acks, append([]byte(nil), batch...)})
	return ProduceResult{BaseOffset: base, LogStartOffset: 0}, nil
}

func (f *fakeBackend) ListOffset(_ context.Context, topic string, partition int32, epoch int32, ts int64) (OffsetResult, error) {
	if _, ok := f.md.Topics[topic]; !ok {
		return OffsetResult{}, api.Errorf(api.CodeUnknownTopic, "no topic %q", topic)
	}
	switch ts {
	case offsetEarliest:
		return OffsetResult{Offset: 0, LeaderEpoch: 0}, nil
	case offsetLatest:
		return OffsetResult{Offset: 42, LeaderEpoch: 3}, nil
	}
	return OffsetResult{Offset: ts / 1000, LeaderEpoch: 3}, nil
}

func (f *fakeBackend) InitProducerID(context.Context) (int64, int16, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID, 0, nil
}

// testMetadata: brokers 1 and 2 serve Kafka, broker 3 does not; topic
// "orders" has two partitions (the second led by broker 3), and
// __consumer_offsets one.
func testMetadata() *cluster.Metadata {
	return &cluster.Metadata{
		Brokers: map[int32]api.BrokerRegistration{
			1: {ID: 1, Address: "127.0.0.1:9001", KafkaAddress: "127.0.0.1:9092"},
			2: {ID: 2, Address: "127.0.0.1:9002", KafkaAddress: "kafka-2.example:19092"},
			3: {ID: 3, Address: "127.0.0.1:9003"},
		},
		Controller: api.ControllerRegistration{BrokerID: 2, Epoch: 1},
		Topics: map[string]*cluster.TopicMeta{
			"orders": {Name: "orders",
				Record: api.TopicRecord{ID: "000102030405060708090a0b0c0d0e0f", Replicas: [][]int32{{1, 2, 4}, {3, 1}}},
				States: []api.PartitionState{{Leader: 1, LeaderEpoch: 5, ISR: []int32{1, 2}}, {Leader: 3, LeaderEpoch: 2, ISR: []int32{3, 1}}}},
			api.OffsetsTopic: {Name: api.OffsetsTopic,
				Record: api.TopicRecord{ID: "not-hex", Replicas: [][]int32{{2}}},
				States: []api.PartitionState{{Leader: 2, LeaderEpoch: 0, ISR: []int32{2}}}},
		},
	}
}

// startServer serves a fake backend on a loopback port and closes it when
// the test ends.
func startServer(t *testing.T, be *fakeBackend, opts Options) (*Server, string) {
	t.Helper()
	if be.md == nil {
		be.md = testMetadata()
	}
	opts.Backend = be
	opts.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return s, ln.Addr().String()
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// client speaks the protocol over one connection, with kmsg.
type client struct {
	t    *testing.T
	nc   net.Conn
	br   *bufio.Reader
	corr int32
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// frame encodes req with the next correlation id.
func (c *client) frame(req kmsg.Request) ([]byte, int32) {
	c.corr++
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(c.corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len("test")))
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b, c.corr
}

func (c *client) send(req kmsg.Request) int32 {
	c.t.Helper()
	b, corr := c.frame(req)
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
	return corr
}

// read reads one answer into resp (whose version is set) and checks its
// correlation id.
func (c *client) read(corr int32, resp kmsg.Response) {
	c.t.Helper()
	body, err := c.readFrame()
	if err != nil {
		c.t.Fatalf("reading the answer to %d: %v", corr, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		c.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	body = body[4:]
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		if body[0] != 0 {
			c.t.Fatalf("response header tags %d", body[0])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decoding %T: %v", resp, err)
	}
}

func (c *client) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.br, body)
	return body, err
}

// roundTrip sends req and reads its answer.
func (c *client) roundTrip(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	corr := c.send(req)
	resp := req.ResponseKind()
	c.read(corr, resp)
	return resp
}

// closed waits for the server to close the connection: a read returns
// EOF (or a reset) before the client's deadline.
func (c *client) closed() {
	c.t.Helper()
	_, err := c.readFrame()
	if err == nil {
		c.t.Fatal("an answer came; want the connection closed")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("the connection stayed open: %v", err)
	}
}
