package push

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/api"
)

// The server-side request forgery guard: a gateway pushes to public
// addresses only, unless started with --push-allow-private. The address
// is checked twice: when a subscription is created or changed (every
// address its host resolves to), and by the dialer's Control hook on the
// address each connection is about to be made to, after resolution, so a
// name that resolves elsewhere later (DNS rebinding) is caught before any
// packet leaves.

// blocked are the ranges a guarded gateway never connects to.
var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"10.0.0.0/8",      // private
		"100.64.0.0/10",   // carrier-grade NAT
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local, and the cloud metadata address 169.254.169.254
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments
		"192.168.0.0/16",  // private
		"198.18.0.0/15",   // benchmarking
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, and broadcast
		"::/128",          // unspecified
		"::1/128",         // loopback
		"64:ff9b:1::/48",  // local-use NAT64
		"fc00::/7",        // unique local, and the metadata address fd00:ec2::254
		"fe80::/10",       // link-local
		"ff00::/8",        // multicast
		"2001:db8::/32",   // documentation
		"100::/64",        // discard
		"2002::/16",       // 6to4 (embeds any IPv4 address)
		"::ffff:0:0/96",   // IPv4-mapped (unmapped before the check; kept as a backstop)
		"64:ff9b::/96",    // NAT64 (embeds any IPv4 address)
		"2001::/32",       // Teredo (embeds any IPv4 address)
		"fec0::/10",       // site-local (deprecated)
		"192.88.99.0/24",  // 6to4 relay anycast
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"192.0.2.0/24",    // documentation
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// AddressAllowed reports whether a guarded gateway may connect to ip.
func AddressAllowed(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	// A zone (fe80::1%eth0) would make every prefix miss it.
	ip = ip.Unmap().WithZone("")
	for _, p := range blocked {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// errNotAllowed is what the dialer's hook returns for a blocked address.
var errNotAllowed = errors.New("push: the address is loopback, private, link-local or reserved")

// control is the dialer's Control hook: it runs after resolution, before
// the connection is made, with the address it is made to.
func control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errNotAllowed // fail closed: only literal addresses come here
	}
	if !AddressAllowed(ap.Addr()) {
		return &net.AddrError{Err: errNotAllowed.Error(), Addr: address}
	}
	return nil
}

// Resolver is what CheckEndpoint resolves names with (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckEndpoint refuses (ENDPOINT_NOT_ALLOWED) an endpoint whose host is,
// or resolves to, an address AddressAllowed refuses. A name that does not
// resolve is refused too (INVALID_REQUEST): a subscription to nowhere.
func CheckEndpoint(ctx context.Context, endpoint string, r Resolver) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return api.Errorf(api.CodeInvalidRequest, "endpoint: %v", err)
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		addrs, err = r.LookupNetIP(lctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return api.Errorf(api.CodeInvalidRequest, "endpoint host %q does not resolve: %v", host, err)
		}
	}
	for _, ip := range addrs {
		if !AddressAllowed(ip) {
			return api.Errorf(api.CodeEndpointNotAllowed, "endpoint %q resolves to %s, which this gateway does not push to (start it with --push-allow-private to allow it)", endpoint, ip)
		}
	}
	return nil
}

// guardedDialer resolves the host itself, drops every address the guard
// refuses, and dials the first one left by its literal address (whose
// Control hook checks it once more). With allowPrivate it checks nothing.
type guardedDialer struct {
	resolver     Resolver
	dial         func(ctx context.Context, network, address string) (net.Conn, error)
	allowPrivate bool
}

func (d *guardedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.allowPrivate {
		return d.dial(ctx, network, address)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = d.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var lastErr error = &net.AddrError{Err: "no address", Addr: host}
	for _, ip := range addrs {
		if !AddressAllowed(ip) {
			lastErr = &net.AddrError{Err: errNotAllowed.Error(), Addr: ip.String()}
			continue
		}
		c, err := d.dial(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// NewHTTPClient is the client pushes are sent with: no proxy from the
// environment, redirects not followed, and, unless allowPrivate, the
// guard on every connection. Timeouts come from each request's context.
func NewHTTPClient(allowPrivate bool) *http.Client {
	nd := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		nd.Control = control
	}
	return newHTTPClient(&guardedDialer{resolver: net.DefaultResolver, dial: nd.DialContext, allowPrivate: allowPrivate})
}

func newHTTPClient(d *guardedDialer) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // the request's timeout_ms bounds it
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
