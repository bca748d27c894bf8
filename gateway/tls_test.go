package gateway_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/testwait"
)

// TestTLSAndClientCertificates serves the API over TLS with client
// certificates required: a client without one fails the handshake, a
// certificate's CN is the principal the ACLs judge, TLS 1.1 is refused, and
// a renewed server certificate is served without a restart.
func TestTLSAndClientCertificates(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}})
	call(t, c.URL, bootstrapToken, "POST", "/v1/topics", api.CreateTopicRequest{Name: "orders"})
	if status, _, b := call(t, c.URL, bootstrapToken, "POST", "/v1/acls", api.ACL{Principal: "User:alice", ResourceType: "topic",
		ResourceName: "orders", Operation: "WRITE", Permission: "allow"}); status != 201 {
		t.Fatalf("ACL: %d %s", status, b)
	}

	ca := testcerts.NewCA(t, "test CA")
	served, servedKey := ca.Issue(t, "gateway", testcerts.Server)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), ca.File
	copyFile(t, certFile, served)
	copyFile(t, keyFile, servedKey)
	gw, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: c.Store.Session(),
		TLS:  &gateway.TLSOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, RequireClientCert: true},
		Auth: gateway.AuthOptions{Required: true}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	defer gw.Close()
	base := "https://" + gw.Addr()

	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	clientFor := func(cn string, maxVersion uint16) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MaxVersion: maxVersion}
		if cn != "" {
			cf, kf := ca.Issue(t, cn, testcerts.Client)
			pair, err := tls.LoadX509KeyPair(cf, kf)
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

	if resp, err := post(clientFor("", 0), "/v1/topics/orders/records", produce); err == nil {
		resp.Body.Close()
		t.Fatal("a client without a certificate got an answer")
	}
	if resp, err := post(clientFor("alice", tls.VersionTLS11), "/v1/topics/orders/records", produce); err == nil {
		resp.Body.Close()
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

	// A renewed certificate is served to new connections.
	renewed, renewedKey := ca.Issue(t, "gateway-renewed", testcerts.Server)
	copyFile(t, keyFile, renewedKey)
	copyFile(t, certFile, renewed)
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(certFile, later, later)
	_ = os.Chtimes(keyFile, later, later)
	testwait.For(t, 10*time.Second, "the renewed certificate", func() bool {
		conn, err := tls.Dial("tcp", gw.Addr(), &tls.Config{RootCAs: roots, Certificates: clientFor("alice", 0).Transport.(*http.Transport).TLSClientConfig.Certificates})
		if err != nil {
			return false
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName == "gateway-renewed"
	})
}

func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
