package gateway

import "github.com/sluice-io/sluice/internal/tlsfiles"

// TLSOptions turn on TLS on the public listener (package tlsfiles, shared
// with brokers): the certificate and key, reloaded when they change, and
// with ClientCAFile, client certificates whose subject CN authenticates
// the caller as User:CN; RequireClientCert refuses handshakes without one
// (otherwise a caller without a certificate needs a token).
type TLSOptions = tlsfiles.Options
