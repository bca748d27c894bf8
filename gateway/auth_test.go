package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const bootstrapToken = "slc_0123456789abcdef_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// call sends one request with an optional bearer token and returns the
// status and the error code of a non-2xx answer.
func call(t *testing.T, base, token, method, path string, body any) (int, string, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	if resp.StatusCode/100 != 2 {
		_ = json.Unmarshal(b, &e)
	}
	return resp.StatusCode, string(e.Error.Code), b
}

// TestAuthorizationMatrix runs every principal of an ACL fixture against
// every kind of route over HTTP: 401 without valid credentials, 403 where the
// ACLs do not allow, 2xx where they do, 429 where they do but the principal
// is over its quota.
func TestAuthorizationMatrix(t *testing.T) {
	authorizationMatrix(t, embedtest.Options{})
}

// TestAuthorizationMatrixBrokersCheck runs the matrix against brokers that
// check the ACLs again for the principal the gateway names: every answer
// stays the same (the gateway's internal calls carry the caller's principal,
// or the gateway's own for its own work, such as making the offsets topic).
func TestAuthorizationMatrixBrokersCheck(t *testing.T) {
	authorizationMatrix(t, embedtest.Options{Brokers: 2, ClusterSecret: []byte("0123456789abcdef0123456789abcdef"),
		BrokerAuth: broker.AuthOptions{Required: true}})
}

func authorizationMatrix(t *testing.T, opts embedtest.Options) {
	logs := &lockedBuffer{}
	opts.LogTo, opts.GatewayAuth = logs, gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken}
	c := embedtest.Start(t, opts)
	base := c.URL
	admin := bootstrapToken
	mustOK := func(token, method, path string, body any, out any) {
		t.Helper()
		status, _, b := call(t, base, token, method, path, body)
		if status/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, status, b)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"orders", "logs.app", "logs.secret", "public"} {
		mustOK(admin, "POST", "/v1/topics", api.CreateTopicRequest{Name: name}, nil)
	}
	tokens := map[string]string{"admin": admin}
	for _, who := range []string{"alice", "carol", "dave", "revoked", "expired"} {
		req := api.CreateTokenRequest{Principal: "User:" + who}
		if who == "expired" {
			req.ExpiresInMs = 1
		}
		var tok api.Token
		mustOK(admin, "POST", "/v1/tokens", req, &tok)
		if tok.Token == "" || tok.ID == "" || !strings.Contains(tok.Token, tok.ID) {
			t.Fatalf("token answer %+v", tok)
		}
		tokens[who] = tok.Token
		if who == "revoked" {
			mustOK(admin, "DELETE", "/v1/tokens/"+tok.ID, nil, nil)
		}
	}
	for _, a := range []api.ACL{
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "orders", Operation: "WRITE", Permission: "allow"},
		{Principal: "User:dave", ResourceType: "topic", ResourceName: "orders", Operation: "WRITE", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "topic", PatternType: "prefixed", ResourceName: "logs.", Operation: "READ", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "logs.secret", Operation: "READ", Permission: "deny"},
		{Principal: "User:alice", ResourceType: "group", ResourceName: "g-alice", Operation: "READ", Permission: "allow"},
		{Principal: "User:*", ResourceType: "topic", ResourceName: "public", Operation: "READ", Permission: "allow"},
		{Principal: "User:carol", ResourceType: "topic", ResourceName: "public", Operation: "ALL", Permission: "deny"},
	} {
		mustOK(admin, "POST", "/v1/acls", a, nil)
	}
	// Revocation reaches the gateway's copy through its watch.
	testwait.For(t, 10*time.Second, "the revoked token to be refused", func() bool {
		status, _, _ := call(t, base, tokens["revoked"], "GET", "/v1/topics", nil)
		return status == http.StatusUnauthorized
	})

	// dave may write orders, at one byte a second: his first produce to
	// partition 0 puts him in debt for a minute or more, and then every
	// produce there is 429 THROTTLED until it is paid off.
	produce0 := map[string]any{"records": []map[string]any{{"value": "v", "partition": 0}}}
	mustOK(admin, "PUT", "/v1/quotas", api.Quota{Principal: "User:dave", ProducerByteRate: 1}, nil)
	testwait.For(t, 10*time.Second, "dave's quota to throttle him", func() bool {
		status, _, _ := call(t, base, tokens["dave"], "POST", "/v1/topics/orders/records", produce0)
		return status == http.StatusTooManyRequests
	})
	var adminProducer api.ProducerIdentity
	mustOK(admin, "POST", "/v1/producers", map[string]any{}, &adminProducer)
	type row struct {
		name   string
		method string
		path   string
		body   any
		want   map[string]int // principal → status; principals not named get 403
	}
	unauth := map[string]int{"anonymous": 401, "revoked": 401, "expired": 401, "garbage": 401}
	with := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for k, v := range unauth {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	rows := []row{
		{"produce where WRITE is allowed", "POST", "/v1/topics/orders/records", produce0, with(map[string]int{"admin": 200, "alice": 200, "dave": 429})},
		{"WRITE does not give READ", "GET", "/v1/topics/orders/partitions/0/records?offset=0", nil, with(map[string]int{"admin": 200})},
		{"WRITE implies DESCRIBE", "GET", "/v1/topics/orders", nil, with(map[string]int{"admin": 200, "alice": 200, "dave": 200})},
		{"prefixed READ", "GET", "/v1/topics/logs.app/partitions/0/records?offset=0", nil, with(map[string]int{"admin": 200, "alice": 200})},
		{"deny beats the prefixed allow", "GET", "/v1/topics/logs.secret/partitions/0/records?offset=0", nil, with(map[string]int{"admin": 200})},
		{"READ for every principal but a denied one", "GET", "/v1/topics/public/partitions/0/offsets?timestamp=latest", nil, with(map[string]int{"admin": 200, "alice": 200, "dave": 200})},
		{"delete needs DELETE", "DELETE", "/v1/topics/nonexistent", nil, with(map[string]int{"admin": 404})},
		{"create needs CREATE", "POST", "/v1/topics", api.CreateTopicRequest{Name: "alice-new"}, with(map[string]int{"admin": 201})},
		{"join with group and topic READ", "POST", "/v1/groups/g-alice/members", api.JoinGroupRequest{Topics: []string{"logs.app"}}, with(map[string]int{"admin": 201, "alice": 201})},
		{"join needs READ on every topic", "POST", "/v1/groups/g-alice/members", api.JoinGroupRequest{Topics: []string{"orders"}}, with(map[string]int{"admin": 201})},
		{"an offsets reset needs READ on its topics", "POST", "/v1/groups/g-alice/offsets/reset", api.ResetOffsetsRequest{Topics: []string{"orders"}, To: "earliest"}, with(map[string]int{"admin": 409})},
		{"join needs group READ", "POST", "/v1/groups/g-other/members", api.JoinGroupRequest{Topics: []string{"logs.app"}}, with(map[string]int{"admin": 201})},
		{"tokens need cluster ALTER", "POST", "/v1/tokens", api.CreateTokenRequest{Principal: "User:mallory"}, with(map[string]int{"admin": 201})},
		{"ACLs need cluster ALTER", "GET", "/v1/acls", nil, with(map[string]int{"admin": 200})},
		{"producer ids need WRITE somewhere", "POST", "/v1/producers", map[string]any{}, with(map[string]int{"admin": 201, "alice": 201, "dave": 201})},
		{"another principal's producer id is not bumped", "POST", "/v1/producers", map[string]any{"producer_id": adminProducer.ProducerID}, with(map[string]int{"admin": 201})},
		{"cluster needs DESCRIBE", "GET", "/v1/cluster", nil, with(map[string]int{"admin": 200})},
		{"health is open", "GET", "/healthz", nil, map[string]int{"anonymous": 200, "admin": 200, "alice": 200, "carol": 200, "dave": 200, "revoked": 200, "expired": 200, "garbage": 200}},
	}
	callers := map[string]string{"anonymous": "", "garbage": "slc_nothex_zz", "admin": tokens["admin"], "alice": tokens["alice"],
		"carol": tokens["carol"], "dave": tokens["dave"], "revoked": tokens["revoked"], "expired": tokens["expired"]}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			for who, tok := range callers {
				want, ok := r.want[who]
				if !ok {
					want = 403
				}
				status, code, b := call(t, base, tok, r.method, r.path, r.body)
				if status != want {
					t.Errorf("%s: %s %s = %d %s, want %d", who, r.method, r.path, status, b, want)
					continue
				}
				switch want {
				case 401:
					if code != string(api.CodeUnauthenticated) {
						t.Errorf("%s: code %q, want UNAUTHENTICATED", who, code)
					}
				case 403:
					if code != string(api.CodeNotAuthorized) {
						t.Errorf("%s: code %q, want NOT_AUTHORIZED", who, code)
					}
				case 429:
					if code != string(api.CodeThrottled) {
						t.Errorf("%s: code %q, want THROTTLED", who, code)
					}
				}
			}
		})
	}

	// Listings show only what the caller may DESCRIBE.
	var list api.TopicList
	status, _, b := call(t, base, tokens["alice"], "GET", "/v1/topics", nil)
	if status != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("alice lists topics: %d %s", status, b)
	}
	var names []string
	for _, tp := range list.Topics {
		names = append(names, tp.Name)
	}
	if got := strings.Join(names, ","); got != "logs.app,logs.secret,orders,public" {
		t.Fatalf("alice sees topics %s", got)
	}
	status, _, b = call(t, base, tokens["carol"], "GET", "/v1/topics", nil)
	if status != 200 || json.Unmarshal(b, &list) != nil || len(list.Topics) != 0 {
		t.Fatalf("carol lists topics: %d %s", status, b)
	}

	// No secret ever reaches a log line.
	out := logs.String()
	for who, tok := range tokens {
		if _, secret, ok := strings.Cut(strings.TrimPrefix(tok, "slc_"), "_"); ok && strings.Contains(out, secret) {
			t.Errorf("the secret of %s's token is in the log", who)
		}
	}
	if !strings.Contains(out, "token created") {
		t.Fatal("the log holds no token creation at all: the check above looked at nothing")
	}
}
