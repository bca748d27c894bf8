package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkServedTable checks an answer's API list against the served table.
func checkServedTable(t *testing.T, keys []kmsg.ApiVersionsResponseApiKey) {
	t.Helper()
	if len(keys) != len(served) {
		t.Fatalf("%d APIs listed, %d served", len(keys), len(served))
	}
	for i, k := range keys {
		a := served[i]
		if k.ApiKey != a.key.Int16() || k.MinVersion != a.min || k.MaxVersion != a.max {
			t.Fatalf("listed %s v%d-v%d, served %s v%d-v%d", kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion, a.key.Name(), a.min, a.max)
		}
	}
}

func TestApiVersions(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for _, v := range []int16{0, 1, 2, 3, 4} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
		resp := c.roundTrip(req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: %v", v, kerr.ErrorForCode(resp.ErrorCode))
		}
		checkServedTable(t, resp.ApiKeys)
		var produce kmsg.ApiVersionsResponseApiKey
		for _, k := range resp.ApiKeys {
			if k.ApiKey == kmsg.Produce.Int16() {
				produce = k
			}
		}
		// librdkafka 2.0.2 compresses only when Produce v0 is listed;
		// franz-go 1.22.3 sends v13.
		if produce.MinVersion != 0 || produce.MaxVersion != 13 {
			t.Fatalf("Produce listed v%d-v%d", produce.MinVersion, produce.MaxVersion)
		}
	}
}

// A version newer than served is answered with a v0 answer (header v0, the
// v0 body) carrying UNSUPPORTED_VERSION and the served table, so the client
// can retry at a version it lists; the connection stays usable.
func TestApiVersionsUnsupportedVersion(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for _, v := range []int16{5, 9, 300} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
		corr := c.send(req)
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 0
		c.read(corr, resp)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("v%d: error %d, want UNSUPPORTED_VERSION", v, resp.ErrorCode)
		}
		checkServedTable(t, resp.ApiKeys)
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
	if resp := c.roundTrip(req).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) != len(served) {
		t.Fatalf("retry at v3: error %d, %d APIs", resp.ErrorCode, len(resp.ApiKeys))
	}
}

// v3 names the client's software; Kafka refuses names outside its pattern
// with INVALID_REQUEST.
func TestApiVersionsSoftwareName(t *testing.T) {
	_, addr := startServer(t, &fakeBackend{}, Options{})
	c := dial(t, addr)
	for _, tt := range []struct {
		name, version string
		ok            bool
	}{
		{"librdkafka", "2.0.2", true},
		{"kgo", "v1.22.3", true},
		{"", "1", false},
		{"-kcat", "1", false},
		{"kcat", "1.7.", false},
		{"k cat", "1", false},
	} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		req.ClientSoftwareName, req.ClientSoftwareVersion = tt.name, tt.version
		resp := c.roundTrip(req).(*kmsg.ApiVersionsResponse)
		if ok := resp.ErrorCode == 0; ok != tt.ok {
			t.Errorf("%q %q: error %d", tt.name, tt.version, resp.ErrorCode)
		}
	}
}

// The served table is in key order, within what kmsg can encode, and
// serves what the oldest and newest clients need.
func TestServedTable(t *testing.T) {
	for i, a := range served {
		if i > 0 && served[i-1].key >= a.key {
			t.Fatalf("%s listed after %s", a.key.Name(), served[i-1].key.Name())
		}
		if a.min < 0 || a.min > a.max || a.max > a.key.Request().MaxVersion() {
			t.Fatalf("%s v%d-v%d: kmsg knows up to v%d", a.key.Name(), a.min, a.max, a.key.Request().MaxVersion())
		}
		if (a.handle == nil) != (a.key == kmsg.ApiVersions) {
			t.Fatalf("%s: handler %v", a.key.Name(), a.handle != nil)
		}
	}
	need := map[kmsg.Key][2]int16{ // what kcat 1.7.1 and franz-go 1.22.3 send
		kmsg.ApiVersions: {3, 3}, kmsg.Metadata: {4, 13}, kmsg.Produce: {7, 13}, kmsg.InitProducerID: {4, 4}, kmsg.ListOffsets: {2, 2},
		kmsg.Fetch: {4, 18}, kmsg.OffsetForLeaderEpoch: {4, 4},
	}
	for key, v := range need {
		a, ok := lookupAPI(key.Int16())
		if !ok || a.min > v[0] || a.max < v[1] {
			t.Errorf("%s: served %v v%d-v%d, need v%d and v%d", key.Name(), ok, a.min, a.max, v[0], v[1])
		}
	}
}
