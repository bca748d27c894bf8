package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answerApiVersions answers ApiVersions, the first request of most
// clients, sent before they know what the broker serves. A version newer
// than served is answered as Kafka does (KIP-511): a v0 answer with
// UNSUPPORTED_VERSION and the served table, without reading the body,
// which the client reads and retries at a version listed there. The
// answer goes out with response header v0 at any version (appendResponse).
func answerApiVersions(h requestHeader, body []byte) (kmsg.Response, error) {
	a, _ := lookupAPI(kmsg.ApiVersions.Int16())
	resp := kmsg.NewPtrApiVersionsResponse()
	if h.version > a.max || h.version < a.min {
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ApiKeys = apiVersionKeys()
		return resp, nil
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(h.version)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("malformed request: %w", err)
	}
	resp.Version = h.version
	// v3 names the client's software; Kafka refuses a name or version
	// outside [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?.
	if h.version >= 3 && (!validSoftwareName(req.ClientSoftwareName) || !validSoftwareName(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	resp.ApiKeys = apiVersionKeys()
	return resp, nil
}

// validSoftwareName applies Kafka's pattern for client software names and
// versions: alphanumerics, with dots and dashes inside.
func validSoftwareName(s string) bool {
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
