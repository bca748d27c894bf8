package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/testcerts"
)

const aliceToken = "slc_00000000000000aa_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// fakeAuth knows one token and SCRAM credentials, and allows what allow says.
type fakeAuth struct {
	creds map[string]auth.ScramCredential // by mechanism + principal
	allow func(principal string, op auth.Operation, rt auth.ResourceType, name string) bool
}

func (f *fakeAuth) Token(_ context.Context, tok string) (string, error) {
	if tok == aliceToken {
		return "User:alice", nil
	}
	return "", errors.New("invalid token")
}

func (f *fakeAuth) ScramCredential(m, p string) (auth.ScramCredential, bool) {
	c, ok := f.creds[m+p]
	return c, ok
}

func (f *fakeAuth) Allowed(p string, op auth.Operation, rt auth.ResourceType, name string) bool {
	return f.allow == nil || f.allow(p, op, rt, name)
}

func newFakeAuth(t *testing.T) *fakeAuth {
	f := &fakeAuth{creds: map[string]auth.ScramCredential{}}
	for _, m := range auth.ScramMechanisms {
		c, err := auth.NewScramCredential("User:bob", m, "bob-secret", 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		f.creds[m+"User:bob"] = c
	}
	return f
}

func saslOptions(f *fakeAuth) Options {
	return Options{RequireAuth: true, Mechanisms: Mechanisms, Authenticator: f}
}

// kgoPing asks the listener for metadata through franz-go with opts.
func kgoPing(t *testing.T, addr string, opts ...kgo.Opt) error {
	t.Helper()
	kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	_, err = req.RequestWith(ctx, kc)
	return err
}

// franz-go authenticates with PLAIN (a token as the password) and with
// SCRAM-SHA-256 and -512 (a stored credential), and is refused with a
// wrong token, a wrong password, an unknown user, or a user name that is
// not the token's.
func TestSASLMechanisms(t *testing.T) {
	f := newFakeAuth(t)
	s, addr := startServer(t, &fakeBackend{}, saslOptions(f))
	refused := 0
	t.Cleanup(func() {
		if got := s.Stats().SASLFailed; got < int64(refused) {
			t.Errorf("SASL failures counted %d, want at least %d", got, refused)
		}
	})
	for _, tc := range []struct {
		name string
		mech sasl.Mechanism
		ok   bool
	}{
		{"PLAIN", plain.Auth{User: "alice", Pass: aliceToken}.AsMechanism(), true},
		{"PLAIN with the principal as user name", plain.Auth{User: "User:alice", Pass: aliceToken}.AsMechanism(), true},
		{"PLAIN with a wrong token", plain.Auth{User: "alice", Pass: strings.Replace(aliceToken, "aa_", "ab_", 1)}.AsMechanism(), false},
		{"PLAIN with another user name", plain.Auth{User: "mallory", Pass: aliceToken}.AsMechanism(), false},
		{"SCRAM-SHA-256", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(), true},
		{"SCRAM-SHA-512", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism(), true},
		{"SCRAM-SHA-256 with a wrong password", scram.Auth{User: "bob", Pass: "guess"}.AsSha256Mechanism(), false},
		{"SCRAM-SHA-512 for an unknown user", scram.Auth{User: "carol", Pass: "bob-secret"}.AsSha512Mechanism(), false},
	} {
		if !tc.ok {
			refused++
		}
		t.Run(tc.name, func(t *testing.T) {
			err := kgoPing(t, addr, kgo.SASL(tc.mech))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.Is(err, kerr.SaslAuthenticationFailed):
				t.Fatalf("got %v, want SASL_AUTHENTICATION_FAILED", err)
			}
		})
	}
}

// Before authenticating, a connection is served ApiVersions and the SASL
// requests only: Metadata closes it. SaslAuthenticate before a handshake
// is ILLEGAL_SASL_STATE and a mechanism not served
// UNSUPPORTED_SASL_MECHANISM, each answered and then the connection
// closes; a frame larger than the pre-authentication limit closes it.
func TestSASLStateMachine(t *testing.T) {
	f := newFakeAuth(t)
	opts := saslOptions(f)
	opts.Mechanisms = []string{MechanismPlain}
	opts.Limits.MaxRequestBytesBeforeAuth = 1024
	_, addr := startServer(t, &fakeBackend{}, opts)

	c := dial(t, addr)
	if resp := c.roundTrip(apiVersionsV3()).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatal(resp.ErrorCode)
	}
	c.send(metadataReq(4))
	c.closed()

	c = dial(t, addr)
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00alice\x00"+aliceToken)
	if resp := c.roundTrip(au).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("SaslAuthenticate before SaslHandshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	c.closed()

	c = dial(t, addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, MechanismScramSHA256
	resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse)
	if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(resp.SupportedMechanisms) != 1 || resp.SupportedMechanisms[0] != MechanismPlain {
		t.Fatalf("a mechanism not served: %v %v", kerr.ErrorForCode(resp.ErrorCode), resp.SupportedMechanisms)
	}
	c.closed()

	c = dial(t, addr)
	if _, err := c.nc.Write(sizePrefix(1025)); err != nil {
		t.Fatal(err)
	}
	c.closed()

	// PLAIN over SaslHandshake v1 and SaslAuthenticate, then Metadata is
	// served; a second handshake is ILLEGAL_SASL_STATE.
	c = dial(t, addr)
	hs.Mechanism = MechanismPlain
	if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := c.roundTrip(au).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	if md := c.roundTrip(metadataReq(4)).(*kmsg.MetadataResponse); len(md.Topics) == 0 {
		t.Fatal("no topics after authenticating")
	}
	if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("a second handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	c.closed()
}

// After SaslHandshake v0 the PLAIN token comes as a bare frame (Kafka's
// oldest SASL framing): a right token is answered with an empty frame and
// the connection is served; a wrong one closes it.
func TestSASLHandshakeV0(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, saslOptions(newFakeAuth(t)))
	for _, tok := range []string{aliceToken, "slc_wrong"} {
		c := dial(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Mechanism = MechanismPlain
		if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
			t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
		}
		msg := "\x00alice\x00" + tok
		if _, err := c.nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
			t.Fatal(err)
		}
		if tok != aliceToken {
			c.closed()
			continue
		}
		if b, err := c.readFrame(); err != nil || len(b) != 0 {
			t.Fatalf("answer to the bare token: %q %v", b, err)
		}
		if md := c.roundTrip(metadataReq(4)).(*kmsg.MetadataResponse); len(md.Topics) == 0 {
			t.Fatal("no topics after authenticating")
		}
	}
}

// A principal allowed to DESCRIBE one topic sees only it in an "all
// topics" Metadata answer, and is refused the other by name.
func TestSASLMetadataListsAllowedTopics(t *testing.T) {
	f := newFakeAuth(t)
	f.allow = func(_ string, op auth.Operation, rt auth.ResourceType, name string) bool {
		return rt == auth.ResourceTopic && name == "orders"
	}
	_, addr := startServer(t, &fakeBackend{}, saslOptions(f))
	kc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "alice", Pass: aliceToken}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || *md.Topics[0].Topic != "orders" {
		t.Fatalf("all topics: %d topics, want orders only", len(md.Topics))
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"orders", "__consumer_offsets"} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	md, err = req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int16{}
	for _, t := range md.Topics {
		got[*t.Topic] = t.ErrorCode
	}
	if got["orders"] != 0 || got["__consumer_offsets"] != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("by name: %v", got)
	}
}

// The listener serves TLS with the certificate it is given: franz-go
// trusting the CA is served, over SASL too; a plaintext client is not.
func TestTLSListener(t *testing.T) {
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
	client := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	server := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}

	_, addr := startServer(t, &fakeBackend{}, Options{TLS: server})
	if err := kgoPing(t, addr, kgo.DialTLSConfig(client)); err != nil {
		t.Fatalf("SSL: %v", err)
	}
	if err := kgoPing(t, addr); err == nil {
		t.Fatal("a plaintext client was served by a TLS listener")
	}
	opts := saslOptions(newFakeAuth(t))
	opts.TLS = server
	_, addr = startServer(t, &fakeBackend{}, opts)
	if err := kgoPing(t, addr, kgo.DialTLSConfig(client), kgo.SASL(scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism())); err != nil {
		t.Fatalf("SASL_SSL: %v", err)
	}
}
