package kafka

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/testcerts"
)

// authenticate runs SaslHandshake v1 and a PLAIN SaslAuthenticate as alice.
func (c *client) authenticate() {
	c.t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, MechanismPlain
	if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		c.t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 2, []byte("\x00alice\x00"+aliceToken)
	if resp := c.roundTrip(au).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != 0 {
		c.t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
}

// A Fetch of a topic the principal may not READ is answered
// TOPIC_AUTHORIZATION_FAILED per partition without reaching the backend, by
// name and by topic ID; a Produce to a topic it may not WRITE is refused
// per partition and not written, while the allowed topic of the same
// request is.
func TestAuthzFetchAndProduce(t *testing.T) {
	f := newFakeAuth(t)
	f.allow = func(_ string, op auth.Operation, rt auth.ResourceType, name string) bool {
		return rt == auth.ResourceTopic && name == "orders" && op == auth.OpWrite
	}
	be := &fakeBackend{}
	be.fetch.parts = map[fakeTP]fakePart{{"orders", 0}: {data: []byte("x"), hw: 1}}
	s, addr := startServer(t, be, saslOptions(f))
	c := dial(t, addr)
	c.authenticate()
	for _, v := range []int16{11, 13} {
		resp := c.roundTrip(fetchReq(v, 0)).(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("fetch v%d without READ: %+v", v, resp.Topics)
		}
	}
	be.fetch.mu.Lock()
	asked := len(be.fetch.last.Partitions)
	be.fetch.mu.Unlock()
	if asked != 0 {
		t.Fatalf("the backend was asked for %d partitions", asked)
	}

	prod := kmsg.NewPtrProduceRequest()
	prod.Version, prod.Acks, prod.TimeoutMillis = 7, 1, 5000
	for _, topic := range []string{"orders", api.OffsetsTopic} {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = fakeBatch(61)
		rt.Partitions = append(rt.Partitions, rp)
		prod.Topics = append(prod.Topics, rt)
	}
	resp := c.roundTrip(prod).(*kmsg.ProduceResponse)
	got := map[string]int16{}
	for _, rt := range resp.Topics {
		got[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	if len(got) != 2 || got[api.OffsetsTopic] != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("produce: %v", got)
	}
	if st := s.Stats(); st.AuthzRefused != 3 || st.SASLFailed != 0 {
		t.Fatalf("refused %d requests (want 3), SASL failures %d", st.AuthzRefused, st.SASLFailed)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	for _, p := range be.produced {
		if p.topic != "orders" {
			t.Fatalf("a batch for %s was written", p.topic)
		}
	}
}

// Over TLS the record bytes of a Fetch answer are copied, never sent with
// sendfile, and arrive intact.
func TestFetchOverTLSCopies(t *testing.T) {
	ca := testcerts.NewCA(t, "kafka test CA")
	certFile, keyFile := ca.Issue(t, "broker", testcerts.Server)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	data := randomBytes(64 << 10)
	be := &fakeBackend{}
	be.fetch.parts = map[fakeTP]fakePart{{"orders", 0}: {data: data, hw: 10, file: fileWith(t, data)}}
	s, addr := startServer(t, be, Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	nc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &client{t: t, nc: nc, br: bufio.NewReader(nc)}
	resp := c.roundTrip(fetchReq(11, 0)).(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || !bytes.Equal(resp.Topics[0].Partitions[0].RecordBatches, data) {
		t.Fatal("the records did not arrive intact")
	}
	if st := s.Stats(); st.FetchedBytes != int64(len(data)) || st.SendfileBytes != 0 {
		t.Fatalf("fetched %d, sendfile %d: want %d and 0", st.FetchedBytes, st.SendfileBytes, len(data))
	}
}

// Growing a topic needs ALTER on it and replacing its configs
// ALTER_CONFIGS: a principal with neither is refused per topic, the
// handler never sees the refused ones.
func TestAuthzCreatePartitionsAndAlterConfigs(t *testing.T) {
	f := newFakeAuth(t)
	f.allow = func(_ string, op auth.Operation, rt auth.ResourceType, name string) bool {
		return rt == auth.ResourceTopic && name == "orders" && op == auth.OpAlter
	}
	_, addr := startServer(t, &fakeBackend{}, saslOptions(f))
	c := dial(t, addr)
	c.authenticate()

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version, cp.TimeoutMillis = 1, 5000
	for _, name := range []string{"orders", "payments"} {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = name, 4
		cp.Topics = append(cp.Topics, rt)
	}
	got := map[string]int16{}
	for _, rt := range c.roundTrip(cp).(*kmsg.CreatePartitionsResponse).Topics {
		got[rt.Topic] = rt.ErrorCode
	}
	// orders reaches the handler, whose backend cannot add partitions.
	if len(got) != 2 || got["payments"] != kerr.TopicAuthorizationFailed.Code || got["orders"] != kerr.InvalidRequest.Code {
		t.Fatalf("create partitions: %v", got)
	}

	ac := kmsg.NewPtrAlterConfigsRequest()
	ac.Version = 1
	res := kmsg.NewAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "orders"
	ac.Resources = append(ac.Resources, res)
	resp := c.roundTrip(ac).(*kmsg.AlterConfigsResponse)
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alter configs without ALTER_CONFIGS: %+v", resp.Resources)
	}
}

// A KIP-848 heartbeat to a group the principal may not READ is refused
// before the coordinator sees it.
func TestAuthzConsumerGroupHeartbeat(t *testing.T) {
	f := newFakeAuth(t)
	f.allow = func(string, auth.Operation, auth.ResourceType, string) bool { return false }
	_, addr := startServer(t, &fakeBackend{}, saslOptions(f))
	c := dial(t, addr)
	c.authenticate()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberEpoch, req.RebalanceTimeoutMillis = 1, "billing", 0, 30000
	req.SubscribedTopicNames = []string{"orders"}
	resp := c.roundTrip(req).(*kmsg.ConsumerGroupHeartbeatResponse)
	if resp.ErrorCode != kerr.GroupAuthorizationFailed.Code || resp.MemberEpoch != -1 {
		t.Fatalf("heartbeat without READ: %v epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.MemberEpoch)
	}
}
