package brokerapi

import (
	"crypto/tls"
	"testing"
)

// TestBaseURL: an address carries its scheme or takes the client's, http
// unless the client calls over TLS.
func TestBaseURL(t *testing.T) {
	plain, secure := NewClient(), NewClient()
	secure.UseTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	for _, tc := range []struct {
		c          *Client
		addr, want string
	}{
		{plain, "10.0.0.1:9001", "http://10.0.0.1:9001"},
		{plain, "https://b1:9001", "https://b1:9001"},
		{secure, "10.0.0.1:9001", "https://10.0.0.1:9001"},
		{secure, "https://b1:9001", "https://b1:9001"},
		{secure, "http://b1:9001", "http://b1:9001"},
	} {
		if got := tc.c.base(tc.addr); got != tc.want {
			t.Errorf("base(%q) with scheme %q = %q, want %q", tc.addr, tc.c.scheme, got, tc.want)
		}
	}
}
