package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLSOptions turn on TLS on the public listener.
type TLSOptions struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and key.
	// Both files are read again when either changes (checked at most once
	// a second, at a handshake), so a renewed certificate needs no restart.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM bundle of CAs whose client
	// certificates authenticate callers: a verified certificate's subject
	// common name CN becomes the principal User:CN. Reloaded like the
	// certificate.
	ClientCAFile string
	// RequireClientCert refuses handshakes without a verified client
	// certificate (with ClientCAFile). Default false: a certificate is
	// asked for and checked when sent, and a caller without one needs a
	// token.
	RequireClientCert bool
}

// certFiles serves the certificate, key and client CAs, reloading them when
// their files change.
type certFiles struct {
	opts TLSOptions

	mu      sync.Mutex // guards the fields below
	checked time.Time
	mtimes  [3]time.Time
	cert    *tls.Certificate
	cas     *x509.CertPool
}

func newCertFiles(opts TLSOptions) (*certFiles, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("gateway: TLS needs a certificate and a key file")
	}
	if opts.RequireClientCert && opts.ClientCAFile == "" {
		return nil, errors.New("gateway: requiring client certificates needs a client CA file")
	}
	c := &certFiles{opts: opts}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certFiles) stat() ([3]time.Time, error) {
	var out [3]time.Time
	for i, f := range []string{c.opts.CertFile, c.opts.KeyFile, c.opts.ClientCAFile} {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = st.ModTime()
	}
	return out, nil
}

// load reads the files; c.mu is held or c is not shared yet.
func (c *certFiles) load() error {
	mtimes, err := c.stat()
	if err != nil {
		return fmt.Errorf("gateway: TLS files: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.opts.CertFile, c.opts.KeyFile)
	if err != nil {
		return fmt.Errorf("gateway: TLS certificate: %w", err)
	}
	var cas *x509.CertPool
	if c.opts.ClientCAFile != "" {
		pem, err := os.ReadFile(c.opts.ClientCAFile)
		if err != nil {
			return fmt.Errorf("gateway: client CA file: %w", err)
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(pem) {
			return errors.New("gateway: the client CA file holds no PEM certificate")
		}
	}
	c.cert, c.cas, c.mtimes, c.checked = &cert, cas, mtimes, time.Now()
	return nil
}

// current returns the certificate and CAs, reloading them first if a file
// changed since the last look (at most one look a second). A reload that
// fails (a file half-written) keeps the previous ones.
func (c *certFiles) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) >= time.Second {
		c.checked = time.Now()
		if m, err := c.stat(); err == nil && m != c.mtimes {
			_ = c.load()
		}
	}
	return c.cert, c.cas
}

// config is the listener's TLS config: TLS 1.2 at least, the certificate
// and client CAs of the moment at each handshake.
func (c *certFiles) config() *tls.Config {
	clientAuth := tls.NoClientCert
	switch {
	case c.opts.RequireClientCert:
		clientAuth = tls.RequireAndVerifyClientCert
	case c.opts.ClientCAFile != "":
		clientAuth = tls.VerifyClientCertIfGiven
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, cas := c.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    cas,
				ClientAuth:   clientAuth,
				NextProtos:   []string{"http/1.1"}, // WebSockets and sendfile want HTTP/1.1
			}, nil
		},
	}
}
