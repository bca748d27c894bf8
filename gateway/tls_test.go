package gateway_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/testcluster"
	"github.com/sluice-io/sluice/internal/testwait"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for cn; server certificates name
// 127.0.0.1.
func (ca *testCA) issue(t *testing.T, cn string, serial int64, server bool) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSAndClientCertificates serves the API over TLS with client
// certificates required: a client without one fails the handshake, a
// certificate's CN is the principal the ACLs judge, TLS 1.1 is refused, and
// a renewed server certificate is served without a restart.
func TestTLSAndClientCertificates(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}})
	call(t, c.URL, bootstrapToken, "POST", "/v1/topics", api.CreateTopicRequest{Name: "orders"})
	if status, _, b := call(t, c.URL, bootstrapToken, "POST", "/v1/acls", api.ACL{Principal: "User:alice", ResourceType: "topic",
		ResourceName: "orders", Operation: "WRITE", Permission: "allow"}); status != 201 {
		t.Fatalf("ACL: %d %s", status, b)
	}

	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	certPEM, keyPEM := ca.issue(t, "gateway", 2, true)
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	writeFile(t, caFile, ca.pem)
	gw, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: c.Store.Session(),
		TLS:  &gateway.TLSOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, RequireClientCert: true},
		Auth: gateway.AuthOptions{Required: true}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	defer gw.Close()
	base := "https://" + gw.Addr()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	clientFor := func(cn string, maxVersion uint16) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MaxVersion: maxVersion}
		if cn != "" {
			cp, kp := ca.issue(t, cn, time.Now().UnixNano(), false)
			pair, err := tls.X509KeyPair(cp, kp)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}
	post := func(hc *http.Client, path string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		return hc.Do(req)
	}
	produce := map[string]any{"records": []map[string]any{{"value": "v"}}}

	if _, err := post(clientFor("", 0), "/v1/topics/orders/records", produce); err == nil {
		t.Fatal("a client without a certificate got an answer")
	}
	if _, err := post(clientFor("alice", tls.VersionTLS11), "/v1/topics/orders/records", produce); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}
	for cn, want := range map[string]int{"alice": 200, "mallory": 403} {
		resp, err := post(clientFor(cn, 0), "/v1/topics/orders/records", produce)
		if err != nil {
			t.Fatalf("%s: %v", cn, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("User:%s produces: %d, want %d", cn, resp.StatusCode, want)
		}
	}

	// A renewed certificate (serial 3) is served to new connections.
	certPEM, keyPEM = ca.issue(t, "gateway", 3, true)
	writeFile(t, keyFile, keyPEM)
	writeFile(t, certFile, certPEM)
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(certFile, later, later)
	_ = os.Chtimes(keyFile, later, later)
	testwait.For(t, 10*time.Second, "the renewed certificate", func() bool {
		conn, err := tls.Dial("tcp", gw.Addr(), &tls.Config{RootCAs: roots, Certificates: clientFor("alice", 0).Transport.(*http.Transport).TLSClientConfig.Certificates})
		if err != nil {
			return false
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64() == 3
	})
}
