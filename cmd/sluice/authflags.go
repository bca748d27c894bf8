package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/gateway"
)

// authFlags are the authentication flags of `sluice gateway`, `sluice dev`
// and (without --bootstrap-token-file) `sluice broker`.
type authFlags struct {
	mode, superUsers, bootstrapFile *string
}

func addAuthFlags(fs *flag.FlagSet) *authFlags {
	a := addBrokerAuthFlags(fs)
	a.bootstrapFile = fs.String("bootstrap-token-file", "", "file holding a token (slc_<id>_<secret>) that authenticates as User:admin, a super user; default: the environment variable SLUICE_BOOTSTRAP_TOKEN")
	return a
}

func addBrokerAuthFlags(fs *flag.FlagSet) *authFlags {
	return &authFlags{
		mode:       fs.String("auth", envOr("SLUICE_AUTH", "off"), "off (everyone may do everything) or required (tokens and ACLs; a broker checks the ACLs for the principal a gateway names, and needs the cluster secret) (env SLUICE_AUTH)"),
		superUsers: fs.String("super-users", envOr("SLUICE_SUPER_USERS", ""), "comma-separated principals that may do everything, e.g. User:ops; brokers count User:admin, the bootstrap token's principal, too (env SLUICE_SUPER_USERS)"),
	}
}

// required parses --auth.
func (a *authFlags) required() (bool, error) {
	switch *a.mode {
	case "off":
		return false, nil
	case "required":
		return true, nil
	default:
		return false, fmt.Errorf("--auth is off or required, not %q", *a.mode)
	}
}

func (a *authFlags) superUserList() []string {
	var out []string
	for _, p := range strings.Split(*a.superUsers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// brokerOptions turns the flags into a broker's.
func (a *authFlags) brokerOptions() (broker.AuthOptions, error) {
	req, err := a.required()
	return broker.AuthOptions{Required: req, SuperUsers: a.superUserList()}, err
}

// options turns the flags into the gateway's. With devDataDir set (sluice
// dev) and auth required but no bootstrap token given, one is made and kept
// in the data directory, so the developer has a way in; it is returned to be
// printed.
func (a *authFlags) options(devDataDir string) (opts gateway.AuthOptions, made string, err error) {
	if opts.Required, err = a.required(); err != nil {
		return opts, "", err
	}
	opts.SuperUsers = a.superUserList()
	opts.BootstrapToken = os.Getenv("SLUICE_BOOTSTRAP_TOKEN")
	if *a.bootstrapFile != "" {
		b, err := os.ReadFile(*a.bootstrapFile)
		if err != nil {
			return opts, "", fmt.Errorf("--bootstrap-token-file: %w", err)
		}
		opts.BootstrapToken = strings.TrimSpace(string(b))
	}
	if opts.BootstrapToken == "" && opts.Required && devDataDir != "" {
		path := filepath.Join(devDataDir, "bootstrap-token")
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			opts.BootstrapToken = strings.TrimSpace(string(b))
		case errors.Is(err, os.ErrNotExist):
			tok, _, err := auth.NewToken("User:admin", 0, time.Now())
			if err != nil {
				return opts, "", err
			}
			if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
				return opts, "", err
			}
			opts.BootstrapToken = tok
		default:
			return opts, "", err
		}
		made = opts.BootstrapToken
	}
	return opts, made, nil
}

// clusterSecretFlag is --cluster-secret-file of `sluice broker`, `sluice
// gateway` and `sluice drain`; its value() reads it, or SLUICE_CLUSTER_SECRET.
type clusterSecretFlag struct{ file *string }

func addClusterSecretFlag(fs *flag.FlagSet) clusterSecretFlag {
	return clusterSecretFlag{fs.String("cluster-secret-file", "", "file holding the secret every broker and gateway of the cluster shares (at least 16 bytes; trailing newline ignored); internal calls are signed with it and unsigned ones refused. Default: the environment variable SLUICE_CLUSTER_SECRET; neither: the internal API is open")}
}

func (f clusterSecretFlag) value() ([]byte, error) {
	s := os.Getenv("SLUICE_CLUSTER_SECRET")
	if *f.file != "" {
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		s = strings.TrimRight(string(b), "\r\n")
	}
	if s != "" && len(s) < 16 {
		return nil, errors.New("the cluster secret must be at least 16 bytes")
	}
	if s == "" {
		return nil, nil
	}
	return []byte(s), nil
}

// tlsFlags are the public listener's TLS flags (`sluice gateway`).
type tlsFlags struct {
	cert, key, clientCA *string
	requireClient       *bool
}

func addTLSFlags(fs *flag.FlagSet) *tlsFlags {
	return &tlsFlags{
		cert:          fs.String("tls-cert", envOr("SLUICE_TLS_CERT", ""), "PEM certificate (chain) for HTTPS; reloaded when it changes (env SLUICE_TLS_CERT)"),
		key:           fs.String("tls-key", envOr("SLUICE_TLS_KEY", ""), "PEM key of --tls-cert (env SLUICE_TLS_KEY)"),
		clientCA:      fs.String("tls-client-ca", envOr("SLUICE_TLS_CLIENT_CA", ""), "PEM CAs of client certificates; a verified certificate's CN is the principal User:CN (env SLUICE_TLS_CLIENT_CA)"),
		requireClient: fs.Bool("tls-require-client-cert", envOr("SLUICE_TLS_REQUIRE_CLIENT_CERT", "") == "true", "refuse TLS handshakes without a client certificate (env SLUICE_TLS_REQUIRE_CLIENT_CERT=true)"),
	}
}

// options is nil without --tls-cert.
func (f *tlsFlags) options() (*gateway.TLSOptions, error) {
	if *f.cert == "" && *f.key == "" {
		if *f.clientCA != "" || *f.requireClient {
			return nil, errors.New("--tls-client-ca and --tls-require-client-cert need --tls-cert and --tls-key")
		}
		return nil, nil
	}
	return &gateway.TLSOptions{CertFile: *f.cert, KeyFile: *f.key, ClientCAFile: *f.clientCA, RequireClientCert: *f.requireClient}, nil
}
