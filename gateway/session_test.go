package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// TestBrowserSession signs a browser-like client (a cookie jar) in with a
// token: the cookie is HttpOnly and SameSite=Strict, authenticates the
// requests that follow, a bad token gets no cookie, and signing out clears
// it.
func TestBrowserSession(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}})
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	do := func(method, path, body string) (readResponse, string) {
		t.Helper()
		req, _ := http.NewRequest(method, c.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return readResponse{resp}, string(b)
	}

	resp, body := do("GET", "/v1/session", "")
	var s api.Session
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &s) != nil || s.Principal != "User:ANONYMOUS" || !s.AuthRequired {
		t.Fatalf("anonymous session: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/v1/topics", ""); resp.StatusCode != 401 {
		t.Fatalf("topics before signing in: %d", resp.StatusCode)
	}
	if resp, _ := do("POST", "/v1/session", `{"token":"slc_0123456789abcdef_`+strings.Repeat("0", 64)+`"}`); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("a bad token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	resp, body = do("POST", "/v1/session", `{"token":"`+bootstrapToken+`"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"principal":"User:admin"`) {
		t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
	set := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"sluice_session=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Fatalf("Set-Cookie %q lacks %s", set, want)
		}
	}
	if resp, body := do("POST", "/v1/topics", `{"name":"from-the-browser"}`); resp.StatusCode != 201 {
		t.Fatalf("create a topic signed in: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("GET", "/v1/session", ""); resp.StatusCode != 200 || !strings.Contains(body, "User:admin") {
		t.Fatalf("session signed in: %d %s", resp.StatusCode, body)
	}

	if resp, _ := do("DELETE", "/v1/session", ""); resp.StatusCode != 204 {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := do("GET", "/v1/topics", ""); resp.StatusCode != 401 {
		t.Fatalf("topics after signing out: %d", resp.StatusCode)
	}
}
