package push

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestAddressAllowed(t *testing.T) {
	refused := []string{
		"127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::",
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1", "192.168.255.255",
		"169.254.0.1", "169.254.169.254", // link-local, and the cloud metadata address
		"fc00::1", "fd00:ec2::254", "fdff::1", // unique local, and a metadata address
		"fe80::1", "100.64.0.1", "224.0.0.1", "255.255.255.255", "ff02::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", // IPv4-mapped
		"64:ff9b::a00:1", "2002:a00:1::", // NAT64 and 6to4 embedding 10.0.0.1
	}
	for _, s := range refused {
		if AddressAllowed(netip.MustParseAddr(s)) {
			t.Errorf("%s is allowed, want refused", s)
		}
	}
	allowed := []string{"8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.0", "192.167.255.255", "169.253.255.255", "2606:4700::1111", "100.128.0.1"}
	for _, s := range allowed {
		if !AddressAllowed(netip.MustParseAddr(s)) {
			t.Errorf("%s is refused, want allowed", s)
		}
	}
	if AddressAllowed(netip.Addr{}) {
		t.Error("the zero address is allowed")
	}
}

// The dialer's Control hook sees the literal address a connection is
// about to be made to; it refuses blocked ones and anything it cannot
// read (fail closed). Called directly: no connection is made.
func TestControlHook(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:80": false, "[::1]:443": false, "10.1.2.3:80": false, "172.20.0.1:80": false,
		"192.168.1.1:8080": false, "169.254.169.254:80": false, "[fc00::1]:80": false, "[fe80::1%eth0]:80": false,
		"not-an-address": false, "8.8.8.8:53": true, "[2606:4700::1111]:443": true,
	} {
		err := control("tcp4", addr, nil)
		if (err == nil) != ok {
			t.Errorf("control(%s) = %v, want allowed=%v", addr, err, ok)
		}
	}
}

// stubResolver answers every name from a table; the test never reaches a
// real resolver.
type stubResolver map[string][]string

func (r stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ss, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

// failClosed is the test's dial: it records the address and never
// connects, so a broken guard cannot send a packet anywhere.
type failClosed struct {
	mu    sync.Mutex
	dials []string
}

var errNoDial = errors.New("test dialer: never connects")

func (f *failClosed) dial(_ context.Context, _, address string) (net.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, address)
	f.mu.Unlock()
	return nil, errNoDial
}

func TestCheckEndpoint(t *testing.T) {
	r := stubResolver{
		"internal.example": {"10.0.0.7"},
		"mixed.example":    {"93.184.216.34", "192.168.1.5"},
		"meta.example":     {"169.254.169.254"},
		"v6.example":       {"fd00::5"},
		"local.example":    {"127.0.0.1"},
		"public.example":   {"93.184.216.34", "2606:2800:220:1::"},
	}
	for endpoint, want := range map[string]api.Code{
		"http://127.0.0.1:9000/hook":   api.CodeEndpointNotAllowed,
		"http://[::1]:9000/hook":       api.CodeEndpointNotAllowed,
		"https://internal.example/":    api.CodeEndpointNotAllowed,
		"https://mixed.example/":       api.CodeEndpointNotAllowed,
		"https://meta.example/latest":  api.CodeEndpointNotAllowed,
		"https://v6.example/":          api.CodeEndpointNotAllowed,
		"https://local.example/":       api.CodeEndpointNotAllowed,
		"http://172.16.5.4/":           api.CodeEndpointNotAllowed,
		"http://[fe80::1]/":            api.CodeEndpointNotAllowed,
		"https://nowhere.example/":     api.CodeInvalidRequest,
		"https://public.example/hook":  "",
		"https://93.184.216.34:8443/x": "",
	} {
		err := CheckEndpoint(context.Background(), endpoint, r)
		if (err == nil) != (want == "") || (err != nil && api.Classify(err).Code != want) {
			t.Errorf("CheckEndpoint(%s) = %v, want %q", endpoint, err, want)
		}
	}
}

// At connect time the dialer resolves again and dials only allowed
// addresses, so a name that resolved to a public address at creation and
// to a private one now (DNS rebinding) is refused before any dial.
func TestGuardedDialerChecksBeforeDialing(t *testing.T) {
	fc := &failClosed{}
	r := stubResolver{"rebound.example": {"10.0.0.9", "127.0.0.1"}, "public.example": {"192.168.0.2", "93.184.216.34"}}
	c := newHTTPClient(&guardedDialer{resolver: r, dial: fc.dial})
	for _, u := range []string{"http://rebound.example/", "http://127.0.0.1:1/", "http://[::1]:1/", "http://169.254.169.254/latest/meta-data"} {
		req, _ := http.NewRequest(http.MethodPost, u, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: the request went through", u)
		}
	}
	if len(fc.dials) != 0 {
		t.Fatalf("blocked addresses reached the dialer: %v", fc.dials)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://public.example/hook", nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, errNoDial) {
		t.Fatalf("public.example: %v, want the test dialer's refusal", err)
	}
	if len(fc.dials) != 1 || fc.dials[0] != "93.184.216.34:80" {
		t.Fatalf("dials %v, want only the public address", fc.dials)
	}
	// Redirects are not followed: that is the endpoint's answer.
	if c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Fatal("redirects are followed")
	}
}
