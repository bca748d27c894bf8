package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// originRequest sends method path with the given Host and Origin (each
// left as Go sets it when empty) and returns the status and error code.
func originRequest(t *testing.T, base, method, path, host, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(api.HeaderErrorCode)
}

// dialOrigin opens the partition WebSocket of topic with an Origin header
// and returns the handshake's status (101 when it succeeded).
func dialOrigin(t *testing.T, base, topic, origin string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Origin", origin)
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/topics/"+topic+"/partitions/0/ws", &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		c.CloseNow()
		return resp.StatusCode
	}
	if resp == nil {
		t.Fatalf("dial with Origin %s: %v", origin, err)
	}
	return resp.StatusCode
}

// TestOriginAllowList runs a gateway with --allowed-origins and
// --allowed-hosts: a cross-origin POST and WebSocket are refused, an allowed
// origin, the gateway's own and a client without Origin pass, and a Host
// that is not one of the gateway's names (DNS rebinding) is refused.
func TestOriginAllowList(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{TuneGateway: func(o *gateway.Options) {
		o.AllowedOrigins = []string{"https://dash.example.com", "http://Tools.Example.com:8000/"}
		o.AllowedHosts = []string{"gw.example.com"}
	}})
	self := c.URL // http://127.0.0.1:PORT, the gateway's own origin
	port := c.URL[strings.LastIndex(c.URL, ":")+1:]
	topic := func(name string) string { return `{"name":"` + name + `","partitions":1,"replication_factor":1}` }

	posts := []struct {
		name, host, origin string
		status             int
		code               string
	}{
		{"another site's page", "", "https://evil.example", 403, "ORIGIN_NOT_ALLOWED"},
		{"an allowed origin's scheme differs", "", "http://dash.example.com", 403, "ORIGIN_NOT_ALLOWED"},
		{"an allowed origin's port differs", "", "https://dash.example.com:8443", 403, "ORIGIN_NOT_ALLOWED"},
		{"a sandboxed frame", "", "null", 403, "ORIGIN_NOT_ALLOWED"},
		{"DNS rebinding: evil's name, gateway's address", "evil.example:" + port, "http://evil.example:" + port, 403, "HOST_NOT_ALLOWED"},
		{"an unknown name without Origin", "evil.example:" + port, "", 403, "HOST_NOT_ALLOWED"},
		{"an allowed origin", "", "https://dash.example.com", 201, ""},
		{"an allowed origin, default port and case", "", "https://DASH.example.com:443", 201, ""},
		{"an allowed origin with a port", "", "http://tools.example.com:8000", 201, ""},
		{"the gateway's own origin", "", self, 201, ""},
		{"the gateway's own origin by an allowed name", "gw.example.com:" + port, "http://gw.example.com:" + port, 201, ""},
		{"no Origin (curl)", "", "", 201, ""},
		{"localhost", "localhost:" + port, "", 201, ""},
		{"an allowed origin's host as Host", "dash.example.com", "", 201, ""},
	}
	for i, tc := range posts {
		name := "t" + string(rune('a'+i))
		status, code := originRequest(t, c.URL, "POST", "/v1/topics", tc.host, tc.origin, topic(name))
		if status != tc.status || code != tc.code {
			t.Errorf("%s: POST /v1/topics = %d %s, want %d %s", tc.name, status, code, tc.status, tc.code)
		}
		want := 200
		if tc.status != 201 {
			want = 404 // refused before anything was done
		}
		if status, _ := originRequest(t, c.URL, "GET", "/v1/topics/"+name, "", "", ""); status != want {
			t.Errorf("%s: GET the topic after = %d, want %d", tc.name, status, want)
		}
	}

	// Reads carry no Origin check (another origin is granted no CORS, so
	// its page cannot read the answer), but the Host check applies to them.
	if status, code := originRequest(t, c.URL, "GET", "/v1/topics", "", "https://evil.example", ""); status != 200 {
		t.Errorf("a cross-origin GET: %d %s", status, code)
	}
	if status, code := originRequest(t, c.URL, "GET", "/v1/topics/ta/partitions/0/records?offset=0", "rebound.example:"+port, "", ""); status != 403 || code != "HOST_NOT_ALLOWED" {
		t.Errorf("a read by an unknown name: %d %s", status, code)
	}
	// Probes answer whatever the Host.
	for _, p := range []string{"/healthz", "/readyz"} {
		if status, code := originRequest(t, c.URL, "GET", p, "pod-name:"+port, "", ""); status != 200 {
			t.Errorf("%s by an unknown name: %d %s", p, status, code)
		}
	}

	if status, _ := originRequest(t, c.URL, "POST", "/v1/topics", "", "", topic("ws")); status != 201 {
		t.Fatalf("create ws: %d", status)
	}
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"https://evil.example", 403},
		{"https://dash.example.com", 101},
		{self, 101},
	} {
		if got := dialOrigin(t, c.URL, "ws", tc.origin); got != tc.want {
			t.Errorf("WebSocket from %s: handshake %d, want %d", tc.origin, got, tc.want)
		}
	}
}

// TestOriginDefault: without the lists nothing changes: any Host is
// served, and a WebSocket is refused only when Origin's host is not Host
// (the WebSocket library's own check).
func TestOriginDefault(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{})
	if status, code := originRequest(t, c.URL, "POST", "/v1/topics", "any.example", "https://evil.example", `{"name":"ws","partitions":1,"replication_factor":1}`); status != 201 {
		t.Fatalf("POST without allow-lists: %d %s", status, code)
	}
	if got := dialOrigin(t, c.URL, "ws", "https://evil.example"); got != 403 {
		t.Errorf("cross-origin WebSocket without allow-lists: %d, want 403", got)
	}
	if got := dialOrigin(t, c.URL, "ws", c.URL); got != 101 {
		t.Errorf("same-origin WebSocket without allow-lists: %d, want 101", got)
	}
}

// TestOriginOptionsValidated: a list entry that is not an origin or a
// host name stops the gateway from starting.
func TestOriginOptionsValidated(t *testing.T) {
	store, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range []struct {
		name           string
		origins, hosts []string
	}{
		{"no scheme", []string{"dash.example.com"}, nil},
		{"a path", []string{"https://dash.example.com/app"}, nil},
		{"another scheme", []string{"ftp://dash.example.com"}, nil},
		{"a wildcard", []string{"*"}, nil},
		{"a host with a port", nil, []string{"gw.example.com:8080"}},
		{"a host with a scheme", nil, []string{"https://gw.example.com"}},
	} {
		_, err := gateway.New(gateway.Options{Addr: "127.0.0.1:0", Coord: store.Session(), AllowedOrigins: tc.origins, AllowedHosts: tc.hosts})
		if err == nil {
			t.Errorf("%s: gateway.New accepted origins %q hosts %q", tc.name, tc.origins, tc.hosts)
		}
	}
}

// readResponse is a response whose body a test helper has read and closed:
// its status, headers and cookies are what is left to check.
type readResponse struct{ *http.Response }

// TestCORSForAllowedOrigins: a page of an allowed origin may call the HTTP
// routes with a token. Its preflight is answered before authentication
// with the methods and headers the API takes; its requests' answers, errors
// included, name it in Access-Control-Allow-Origin and expose the
// X-Sluice-* headers. Another origin's preflight is refused, and its reads
// carry no grant, so its page cannot read them. Credentials are never
// granted.
func TestCORSForAllowedOrigins(t *testing.T) {
	const token = "slc_00000000000000cc_3333333333333333333333333333333333333333333333333333333333333333"
	const page = "https://app.example.com"
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: token},
		TuneGateway: func(o *gateway.Options) { o.AllowedOrigins = []string{page} }})
	do := func(method, path, origin string, hdr map[string]string, body string) readResponse {
		t.Helper()
		req, err := http.NewRequest(method, c.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s %s from %q granted credentials", method, path, origin)
		}
		return readResponse{resp}
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,x-client-id"}
	authed := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}

	resp := do("OPTIONS", "/v1/topics/cors/records", page, preflight, "")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != page {
		t.Fatalf("preflight from %s: %d, Allow-Origin %q", page, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, want := range []string{"Authorization", "Content-Type", "X-Client-Id"} {
		if !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), want) {
			t.Errorf("preflight Allow-Headers %q lacks %s", resp.Header.Get("Access-Control-Allow-Headers"), want)
		}
	}
	if m := resp.Header.Get("Access-Control-Allow-Methods"); !strings.Contains(m, "POST") || !strings.Contains(m, "DELETE") {
		t.Errorf("preflight Allow-Methods %q", m)
	}
	resp = do("OPTIONS", "/v1/topics/cors/records", "https://evil.example", preflight, "")
	if resp.StatusCode != 403 || resp.Header.Get(api.HeaderErrorCode) != "ORIGIN_NOT_ALLOWED" || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %d %s, Allow-Origin %q", resp.StatusCode, resp.Header.Get(api.HeaderErrorCode), resp.Header.Get("Access-Control-Allow-Origin"))
	}

	resp = do("POST", "/v1/topics", page, authed, `{"name":"cors","partitions":1,"replication_factor":1}`)
	if resp.StatusCode != 201 || resp.Header.Get("Access-Control-Allow-Origin") != page {
		t.Fatalf("create from %s: %d, Allow-Origin %q", page, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	resp = do("POST", "/v1/topics/cors/records", page, authed, `{"records":[{"value":"v"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("produce from %s: %d", page, resp.StatusCode)
	}
	resp = do("GET", "/v1/topics/cors/partitions/0/batches?offset=0", page, map[string]string{"Authorization": "Bearer " + token}, "")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != page || resp.Header.Get(api.HeaderNextOffset) != "1" {
		t.Fatalf("raw fetch from %s: %d, Allow-Origin %q, next offset %q", page, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get(api.HeaderNextOffset))
	}
	for _, h := range []string{api.HeaderNextOffset, api.HeaderHighWatermark, api.HeaderErrorCode, api.HeaderThrottleMs, "Retry-After"} {
		if !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), h) {
			t.Errorf("Expose-Headers %q lacks %s", resp.Header.Get("Access-Control-Expose-Headers"), h)
		}
	}
	// An error is readable too: the page learns it must sign in.
	resp = do("GET", "/v1/topics", page, nil, "")
	if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != page {
		t.Errorf("GET without a token from %s: %d, Allow-Origin %q", page, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	// Another origin's read is answered (it needs no Origin check) but
	// without a grant; the gateway's own origin needs none.
	for _, o := range []string{"https://evil.example", c.URL} {
		resp = do("GET", "/v1/topics", o, map[string]string{"Authorization": "Bearer " + token}, "")
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET from %s: %d, Allow-Origin %q", o, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
}
