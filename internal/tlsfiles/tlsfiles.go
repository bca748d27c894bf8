// Package tlsfiles serves TLS certificates from PEM files and reads them
// again when the files change, so a renewed certificate needs no restart:
// the server side of every listener (gateways' public API, brokers'
// internal API) and the client side of calls inside the cluster.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Options turn on TLS on a listener.
type Options struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and key.
	// Both files are read again when either changes (checked at most once
	// a second, at a handshake), so a renewed certificate needs no restart.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM bundle of CAs whose client
	// certificates are accepted (a gateway makes a verified certificate's
	// subject common name CN the principal User:CN). Reloaded like the
	// certificate.
	ClientCAFile string
	// RequireClientCert refuses handshakes without a verified client
	// certificate (with ClientCAFile). Default false: a certificate is
	// asked for and checked when sent.
	RequireClientCert bool
}

// Files serves the certificate, key and client CAs, reloading them when
// their files change.
type Files struct {
	opts Options

	mu      sync.Mutex // guards the fields below
	checked time.Time
	mtimes  [3]time.Time
	cert    *tls.Certificate
	cas     *x509.CertPool
}

// New reads the files of opts once; they must hold a certificate and its key.
func New(opts Options) (*Files, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tls: a certificate and a key file are both needed")
	}
	if opts.RequireClientCert && opts.ClientCAFile == "" {
		return nil, errors.New("tls: requiring client certificates needs a client CA file")
	}
	c := &Files{opts: opts}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Files) stat() ([3]time.Time, error) {
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
func (c *Files) load() error {
	mtimes, err := c.stat()
	if err != nil {
		return fmt.Errorf("tls: files: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.opts.CertFile, c.opts.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: certificate: %w", err)
	}
	var cas *x509.CertPool
	if c.opts.ClientCAFile != "" {
		if cas, err = readCAs(c.opts.ClientCAFile); err != nil {
			return err
		}
	}
	c.cert, c.cas, c.mtimes, c.checked = &cert, cas, mtimes, time.Now()
	return nil
}

// readCAs reads a PEM bundle of CA certificates.
func readCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: the CA file %s holds no PEM certificate", path)
	}
	return cas, nil
}

// current returns the certificate and CAs, reloading them first if a file
// changed since the last look (at most one look a second). A reload that
// fails (a file half-written) keeps the previous ones.
func (c *Files) current() (*tls.Certificate, *x509.CertPool) {
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

// ServerConfig is a listener's TLS config: TLS 1.2 at least, the
// certificate and client CAs of the moment at each handshake, HTTP/1.1
// only (WebSocket upgrades want it).
func (c *Files) ServerConfig() *tls.Config {
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
				NextProtos:   []string{"http/1.1"},
			}, nil
		},
	}
}

// KafkaServerConfig is the Kafka listener's TLS config: the listener's
// certificate of the moment, TLS 1.2 at least, and no client certificate
// asked for (Kafka clients authenticate with SASL; the client CAs are for
// the cluster's nodes).
func (c *Files) KafkaServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, _ := c.current()
			return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}, nil
		},
	}
}

// ClientOptions configure calls to the cluster's TLS listeners.
type ClientOptions struct {
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates (the cluster CA). Required. Read once.
	CAFile string
	// CertFile and KeyFile, when set, are the certificate presented to a
	// server that asks for one (mutual TLS); reloaded when they change.
	CertFile, KeyFile string
}

// Config is the client side: TLS 1.2 at least, servers verified against
// the CAs of CAFile, and the certificate of the moment presented when one
// is asked for.
func (o ClientOptions) Config() (*tls.Config, error) {
	if o.CAFile == "" {
		return nil, errors.New("tls: calls over TLS need a CA file")
	}
	cas, err := readCAs(o.CAFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cas, NextProtos: []string{"http/1.1"}}
	if o.CertFile != "" || o.KeyFile != "" {
		files, err := New(Options{CertFile: o.CertFile, KeyFile: o.KeyFile})
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := files.current()
			return cert, nil
		}
	}
	return cfg, nil
}
