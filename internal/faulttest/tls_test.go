package faulttest

import (
	"context"
	"crypto/tls"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/tlsfiles"
)

// TestBrokerTLS runs a cluster whose brokers serve their internal API over
// TLS only and require client certificates of the cluster CA: brokers
// register https:// addresses; under an acks=all load on RF=3 partitions
// with a broker killed and restarted (replication, leader changes and
// follower catch-up all over TLS), nothing acknowledged is lost, consumers
// read it all back through the gateway and the replicas agree; and a broker's
// port refuses plain HTTP, a client that does not trust the cluster CA, a
// client without a certificate and one whose certificate another CA signed.
// The certificates name the nodes, and the brokers go by them
// (checkNodeCertificates).
func TestBrokerTLS(t *testing.T) {
	c := Start(t, Options{TLS: true})
	for _, id := range c.BrokerIDs() {
		reg, ok := zkRegistration(c, id)
		if !ok || reg.Address != c.Broker(id).URL {
			t.Fatalf("b%d registered %+v (present %v), want address %s", id, reg, ok, c.Broker(id).URL)
		}
	}
	parts := []int32{0, 1, 2}
	c.CreateTopic(topic, len(parts), 3, 2)
	c.WaitFullISR(topic, 45*time.Second, false)
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: 3 * time.Second})
	consumer := c.StartConsumer(topic, parts)
	loaded := func(n int) {
		c.WaitFor("produce requests", 30*time.Second, func() (bool, string) {
			return len(h.Ops()) >= n, ""
		})
	}
	loaded(50)
	x := zkState(c, 0).Leader
	c.Kill(x)
	c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool { return pi.Leader != x })
	loaded(len(h.Ops()) + 50)
	c.Restart(x)
	loaded(len(h.Ops()) + 50)
	load.Stop()
	r := settle(t, c, h, parts, consumer)
	if r.Acked == 0 {
		t.Fatalf("nothing was acknowledged: %s", r)
	}

	b := c.Broker(1)
	health := func(t *testing.T, hc *http.Client, url string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+brokerapi.PathHealth, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := health(t, c.HTTP(), b.URL); err != nil || code != 200 {
		t.Fatalf("health of b1 with the cluster's certificate: %d %v", code, err)
	}
	if code, err := health(t, &http.Client{}, "http://"+b.Addr); err == nil && code/100 == 2 {
		t.Errorf("plain HTTP to a TLS broker: %d, want a refusal", code)
	}
	with := func(o tlsfiles.ClientOptions) *http.Client {
		cfg, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	other := testcerts.NewCA(t, "another CA")
	otherCert, otherKey := other.Issue(t, "gateway", testcerts.Client)
	for _, tc := range []struct {
		name string
		hc   *http.Client
		want string
	}{
		{"a client that does not trust the cluster CA", &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}, "certificate"},
		{"a client without a certificate", with(tlsfiles.ClientOptions{CAFile: c.CA.File}), "certificate"},
		{"a client certificate of another CA", with(tlsfiles.ClientOptions{CAFile: c.CA.File, CertFile: otherCert, KeyFile: otherKey}), "certificate"},
	} {
		code, err := health(t, tc.hc, b.URL)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %d %v, want a handshake error about the %s", tc.name, code, err, tc.want)
		}
	}

	checkNodeCertificates(t, c)

	// sluice drain calls a broker over TLS with the cluster's flags, and
	// fails without a client certificate.
	if out, err := exec.Command(Binary(t), "drain", "--broker", b.URL, "--timeout", "20s", "--cluster-ca", c.CA.File).CombinedOutput(); err == nil {
		t.Errorf("sluice drain without a client certificate succeeded: %s", out)
	}
	out, err := exec.Command(Binary(t), "drain", "--broker", b.Addr, "--timeout", "20s",
		"--cluster-ca", c.CA.File, "--cluster-cert", c.gwCert, "--cluster-key", c.gwKey).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice drain over TLS: %v\n%s", err, out)
	}
	if reg, ok := zkRegistration(c, 1); !ok || !reg.ShuttingDown {
		t.Errorf("after sluice drain over TLS, b1's registration is %+v (present %v); want shutting down", reg, ok)
	}
}

// checkNodeCertificates calls the leader of partition 0 straight on its
// internal port with certificates of the cluster CA that name other things
// than the caller is allowed to be: with no cluster secret, the verified
// certificate's common name is the only proof of which node calls. A
// replication fetch for a follower from any certificate but that
// follower's is refused (a forged position would move the HW), and only a
// node may name the principal a request acts for.
func checkNodeCertificates(t *testing.T, c *Cluster) {
	t.Helper()
	st := zkState(c, 0)
	var follower int32
	for _, id := range st.ISR {
		if id != st.Leader {
			follower = id
		}
	}
	if follower == 0 {
		t.Fatalf("partition 0 has no follower in its ISR: %+v", st)
	}
	leader := c.Broker(st.Leader)
	as := func(cn string) *brokerapi.Client {
		cert, key := c.CA.Issue(t, cn, testcerts.Client)
		cfg, err := tlsfiles.ClientOptions{CAFile: c.CA.File, CertFile: cert, KeyFile: key}.Config()
		if err != nil {
			t.Fatal(err)
		}
		bc := brokerapi.NewClient()
		bc.UseTLS(cfg)
		t.Cleanup(bc.Close)
		return bc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var other string // another broker's node name
	for _, id := range c.BrokerIDs() {
		if id != follower {
			other = brokerapi.BrokerNode(id)
			break
		}
	}
	for _, cn := range []string{other, brokerapi.NodeGateway, "alice"} {
		fr, err := as(cn).Fetch(ctx, leader.URL, topic, 0, brokerapi.FetchParams{Offset: 0, ReplicaID: follower, LeaderEpoch: -1})
		if err == nil {
			fr.Body.Close()
		}
		if e := api.Classify(err); err == nil || e.Code != api.CodeNotAuthorized {
			t.Errorf("a replication fetch for broker %d with a certificate for %q: %v, want NOT_AUTHORIZED", follower, cn, err)
		}
	}
	// Naming a principal: a node may, anyone else may not.
	status := func(cn string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, leader.URL+strings.Replace(brokerapi.PathTopicStatus, "{topic}", topic, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(brokerapi.HeaderPrincipal, "User:admin")
		cert, key := c.CA.Issue(t, cn, testcerts.Client)
		cfg, err := tlsfiles.ClientOptions{CAFile: c.CA.File, CertFile: cert, KeyFile: key}.Config()
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("alice"); got != http.StatusUnauthorized {
		t.Errorf("a principal named by a certificate for alice: %d, want 401", got)
	}
	if got := status(brokerapi.NodeGateway); got != http.StatusOK {
		t.Errorf("a principal named by the gateway's certificate: %d, want 200", got)
	}
}
