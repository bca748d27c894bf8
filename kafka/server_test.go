package kafka

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
)

func apiVersionsV3() *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
	return req
}

func metadataReq(version int16) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = version
	return req
}

// A frame over the limit closes the connection after its size alone.
func TestRequestTooLargeClosesTheConnection(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{Limits: Limits{MaxRequestBytes: 4096}})
	c := dial(t, addr)
	c.roundTrip(apiVersionsV3())
	if _, err := c.nc.Write(sizePrefix(4097)); err != nil {
		t.Fatal(err)
	}
	c.closed()
}

// Requests the listener does not serve close the connection: an unknown
// API key, a served API at a version it does not serve, a body that does
// not decode.
func TestUnservedRequestsCloseTheConnection(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	for _, tt := range []struct {
		name  string
		frame func(c *client) []byte
	}{
		{"unknown key", func(c *client) []byte {
			b := append(sizePrefix(0), header(9999, 0, 1, nil)...)
			binary.BigEndian.PutUint32(b, uint32(len(b)-4))
			return b
		}},
		{"unserved API", func(c *client) []byte {
			req := kmsg.NewPtrEndTxnRequest() // transactions are not served
			req.Version = 3
			b, _ := c.frame(req)
			return b
		}},
		{"version too new", func(c *client) []byte {
			b, _ := c.frame(metadataReq(13))
			binary.BigEndian.PutUint16(b[6:], 14)
			return b
		}},
		{"version too old", func(c *client) []byte {
			req := kmsg.NewPtrMetadataRequest()
			b, _ := c.frame(req)
			binary.BigEndian.PutUint16(b[6:], 0xffff)
			return b
		}},
		{"truncated body", func(c *client) []byte {
			b, _ := c.frame(metadataReq(4))
			b = b[:len(b)-3]
			binary.BigEndian.PutUint32(b, uint32(len(b)-4))
			return b
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := c.nc.Write(tt.frame(c)); err != nil {
				t.Fatal(err)
			}
			c.closed()
		})
	}
}

// Pipelined requests are answered one at a time, in order; an acks=0
// produce between them gets no answer.
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	be := &fakeBackend{}
	_, addr := startServer(t, be, Options{})
	c := dial(t, addr)
	var frames []byte
	b1, corr1 := c.frame(metadataReq(4))
	b2, _ := c.frame(produceReq(7, 0, "orders", 0, fakeBatch(30)))
	b3, corr3 := c.frame(apiVersionsV3())
	frames = append(append(append(frames, b1...), b2...), b3...)
	if _, err := c.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	md := kmsg.NewPtrMetadataResponse()
	md.Version = 4
	c.read(corr1, md)
	av := kmsg.NewPtrApiVersionsResponse()
	av.Version = 3
	c.read(corr3, av) // the acks=0 produce's correlation id is skipped
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.produced) != 1 || be.produced[0].acks != 0 {
		t.Fatalf("produced %+v", be.produced)
	}
}

// Before authentication only ApiVersions is served, and frames are held to
// the smaller limit.
func TestRequireAuth(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{RequireAuth: true, Mechanisms: Mechanisms, Authenticator: &fakeAuth{},
		Limits: Limits{MaxRequestBytesBeforeAuth: 1024}})
	c := dial(t, addr)
	if resp := c.roundTrip(apiVersionsV3()).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatal(resp.ErrorCode)
	}
	c.send(metadataReq(4))
	c.closed()

	c = dial(t, addr)
	if _, err := c.nc.Write(sizePrefix(1025)); err != nil {
		t.Fatal(err)
	}
	c.closed()
}

// Past the per-IP limit a new connection is closed at once; the ones
// already open are served, and a freed place is taken again.
func TestConnectionLimits(t *testing.T) {
	s, addr := startServer(t, &fakeBackend{}, Options{Limits: Limits{MaxConnectionsPerIP: 2}})
	a, b := dial(t, addr), dial(t, addr)
	a.roundTrip(apiVersionsV3())
	b.roundTrip(apiVersionsV3())
	over := dial(t, addr)
	over.closed()
	if st := s.Stats(); st.Refused != 1 || st.Connections != 2 {
		t.Fatalf("%+v", st)
	}
	a.roundTrip(apiVersionsV3())
	a.nc.Close()
	testwait.For(t, 5*time.Second, "the closed connection to be forgotten", func() bool { return s.Stats().Connections == 1 })
	dial(t, addr).roundTrip(apiVersionsV3())
}

// A connection that sends nothing for the idle timeout is closed.
func TestIdleTimeout(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{Limits: Limits{IdleTimeout: 200 * time.Millisecond}})
	c := dial(t, addr)
	c.roundTrip(apiVersionsV3())
	c.closed()
}

// A request whose body stops arriving is cut at the read timeout.
func TestReadTimeout(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{Limits: Limits{ReadTimeout: 200 * time.Millisecond}})
	c := dial(t, addr)
	b, _ := c.frame(metadataReq(4))
	if _, err := c.nc.Write(b[:len(b)-2]); err != nil {
		t.Fatal(err)
	}
	c.closed()
}

// Close closes idle connections at once, lets a request under way be
// answered, then closes its connection too.
func TestCloseLetsRequestsFinish(t *testing.T) {
	be := &fakeBackend{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, addr := startServer(t, be, Options{})
	idle := dial(t, addr)
	idle.roundTrip(apiVersionsV3())
	busy := dial(t, addr)
	corr := busy.send(produceReq(9, -1, "orders", 0, fakeBatch(40)))
	<-be.entered
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	idle.closed()
	select {
	case <-closed:
		t.Fatal("Close returned with a request under way")
	default:
	}
	close(be.block)
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 9
	busy.read(corr, resp)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("produce during Close: %v", kerr.ErrorForCode(code))
	}
	busy.closed()
	<-closed
	if st := s.Stats(); st.Connections != 0 {
		t.Fatalf("%+v", st)
	}
}

// Close cuts a request that does not finish in ShutdownTimeout: its
// context ends and the connection closes.
func TestCloseCutsSlowRequests(t *testing.T) {
	be := &fakeBackend{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, addr := startServer(t, be, Options{ShutdownTimeout: 50 * time.Millisecond})
	c := dial(t, addr)
	c.send(produceReq(9, -1, "orders", 0, fakeBatch(40)))
	<-be.entered
	s.Close()
	c.closed()
}

func TestLimitsDefaults(t *testing.T) {
	l, err := Limits{}.withDefaults()
	if err != nil || l.MaxRequestBytes != DefaultMaxRequestBytes || l.MaxRequestBytesBeforeAuth != DefaultMaxRequestBytesBeforeAuth ||
		l.MaxConnections != DefaultMaxConnections || l.MaxConnectionsPerIP != DefaultMaxConnectionsPerIP || l.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("%+v %v", l, err)
	}
	if l, _ := (Limits{MaxRequestBytes: 100}).withDefaults(); l.MaxRequestBytesBeforeAuth != 100 {
		t.Fatalf("before-auth limit %d above the limit 100", l.MaxRequestBytesBeforeAuth)
	}
	if _, err := (Limits{IdleTimeout: -1}).withDefaults(); err == nil {
		t.Fatal("a negative limit was taken")
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a Backend")
	}
}

// Every code of the error table has a Kafka code.
func TestErrorTableComplete(t *testing.T) {
	for _, c := range api.Codes() {
		if _, ok := codes[c]; !ok {
			t.Errorf("%s has no Kafka code", c)
		}
	}
	if got := errorCode(api.Errorf(api.CodeNotLeader, "x")); got != kerr.NotLeaderForPartition.Code {
		t.Fatal(got)
	}
	if got := errorCode(errTest); got != kerr.UnknownServerError.Code {
		t.Fatal(got)
	}
	if errorCode(nil) != 0 || errorMessage(nil) != nil {
		t.Fatal("nil error has a code")
	}
}

var errTest = errString("not an api error")

type errString string

func (e errString) Error() string { return string(e) }
