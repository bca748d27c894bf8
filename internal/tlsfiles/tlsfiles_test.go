package tlsfiles_test

import (
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/internal/tlsfiles"
)

// serve accepts TLS connections on a loopback port until the test ends and
// reports the common name of each verified client certificate.
func serve(t *testing.T, cfg *tls.Config) (addr string, clients <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tl := tls.NewListener(ln, cfg)
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				if chains := tc.ConnectionState().VerifiedChains; len(chains) > 0 {
					out <- chains[0][0].Subject.CommonName
				}
			}
			tc.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), out
}

// replace writes src's bytes over dst with a later modification time.
func replace(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(dst, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestClientCertificateReloaded: a client of ClientOptions shows the
// certificate its files hold at each handshake, so a renewed one is used
// without a restart; a server of Options that requires a client
// certificate refuses a client without one and TLS 1.1.
func TestClientCertificateReloaded(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	srvCert, srvKey := ca.Issue(t, "broker-1", testcerts.Server)
	files, err := tlsfiles.New(tlsfiles.Options{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: ca.File, RequireClientCert: true})
	if err != nil {
		t.Fatal(err)
	}
	addr, clients := serve(t, files.ServerConfig())

	first, firstKey := ca.Issue(t, "gateway-a", testcerts.Client)
	dir := t.TempDir()
	certFile, keyFile := dir+"/client.pem", dir+"/client-key.pem"
	replace(t, certFile, first)
	replace(t, keyFile, firstKey)
	cfg, err := tlsfiles.ClientOptions{CAFile: ca.File, CertFile: certFile, KeyFile: keyFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3 reports a refused client certificate at the first read.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if err != nil && !strings.Contains(err.Error(), "EOF") {
			return err
		}
		return nil
	}
	if err := dial(cfg); err != nil {
		t.Fatalf("with a certificate of the CA: %v", err)
	}
	if cn := <-clients; cn != "gateway-a" {
		t.Fatalf("the server saw %q, want gateway-a", cn)
	}

	second, secondKey := ca.Issue(t, "gateway-b", testcerts.Client)
	replace(t, keyFile, secondKey)
	replace(t, certFile, second)
	testwait.For(t, 10*time.Second, "the renewed client certificate", func() bool {
		if err := dial(cfg); err != nil {
			return false
		}
		return <-clients == "gateway-b"
	})

	noCert, err := tlsfiles.ClientOptions{CAFile: ca.File}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(noCert); err == nil {
		t.Error("a client without a certificate was let in")
	}
	old := cfg.Clone()
	old.MaxVersion = tls.VersionTLS11
	if err := dial(old); err == nil {
		t.Error("TLS 1.1 was accepted")
	}
}

// TestOptionsRefused: incomplete or unreadable options are errors.
func TestOptionsRefused(t *testing.T) {
	ca := testcerts.NewCA(t, "CA")
	cert, key := ca.Issue(t, "x", testcerts.Server)
	notPEM := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]tlsfiles.Options{
		"no key":                          {CertFile: cert},
		"a client certificate without CA": {CertFile: cert, KeyFile: key, RequireClientCert: true},
		"a missing file":                  {CertFile: cert, KeyFile: key + ".missing"},
		"a client CA file without PEM":    {CertFile: cert, KeyFile: key, ClientCAFile: notPEM},
		"a key of another certificate":    {CertFile: cert, KeyFile: ca.File},
	} {
		if _, err := tlsfiles.New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	for name, o := range map[string]tlsfiles.ClientOptions{
		"no CA":                 {},
		"a CA file without PEM": {CAFile: notPEM},
		"a certificate, no key": {CAFile: ca.File, CertFile: cert},
	} {
		if _, err := o.Config(); err == nil {
			t.Errorf("%s: Config accepted %+v", name, o)
		}
	}
}
