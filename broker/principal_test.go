package broker

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// TestCallerPrincipal sends internal requests through the broker's node
// authentication and checks the principal each one acts for: the signed
// header of a gateway's call, a broker's own identity, anonymous without the
// header; and that a signature does not pass for another principal.
func TestCallerPrincipal(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	b := &Broker{opts: Options{ClusterSecret: secret}}
	srv := httptest.NewServer(b.nodeAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, callerPrincipal(r.Context()))
	})))
	defer srv.Close()

	gateway := &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}
	broker2 := &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.BrokerNode(2)}
	call := func(t *testing.T, na *brokerapi.NodeAuth, principal string, tamper func(*http.Request)) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/internal/v1/topics/t/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		if principal != "" {
			req.Header.Set(brokerapi.HeaderPrincipal, principal)
		}
		if na != nil {
			na.Sign(req, time.Now())
		}
		if tamper != nil {
			tamper(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	setPrincipal := func(p string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set(brokerapi.HeaderPrincipal, p) }
	}
	cases := []struct {
		name      string
		auth      *brokerapi.NodeAuth
		principal string
		tamper    func(*http.Request)
		status    int
		want      string
	}{
		{"a gateway for a user", gateway, "User:alice", nil, 200, "User:alice"},
		{"a gateway for no user", gateway, "", nil, 200, auth.Anonymous},
		{"a gateway for several", gateway, brokerapi.PrincipalGateway, nil, 200, "Node:gateway"},
		{"a broker as itself", broker2, "", nil, 200, "Node:broker:2"},
		{"a broker for a user", broker2, "User:bob", nil, 200, "User:bob"},
		{"unsigned", nil, "User:admin", nil, 401, ""},
		{"the principal changed", gateway, "User:alice", setPrincipal("User:admin"), 401, ""},
		{"a principal added", gateway, "", setPrincipal("User:admin"), 401, ""},
		{"the principal removed", gateway, "User:alice", func(r *http.Request) { r.Header.Del(brokerapi.HeaderPrincipal) }, 401, ""},
		{"not a principal", gateway, "alice", nil, 401, ""},
		{"no such node", gateway, "Node:controller", nil, 401, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, tc.auth, tc.principal, tc.tamper)
			if status != tc.status || (status == 200 && body != tc.want) {
				t.Fatalf("got %d %q, want %d %q", status, body, tc.status, tc.want)
			}
		})
	}
}
