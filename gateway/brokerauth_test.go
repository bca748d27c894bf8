package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// TestGatewayWorkWithBrokersThatCheck runs the gateway's calls that do not
// come straight from a request against brokers that check the ACLs again,
// for a principal allowed to read and write one topic and read one group
// and nothing else: acks=0 sends finished in the background, a WebSocket
// stream at the partition's end (whose long poll the gateway shares between
// streams), the offsets topic made at a group's first join, the lag of a
// group description, and the leave of a group WebSocket member that closes.
// Each must act for the caller, or for the gateway itself, not anonymously.
func TestGatewayWorkWithBrokersThatCheck(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 2, ClusterSecret: []byte("0123456789abcdef0123456789abcdef"),
		GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: bootstrapToken},
		BrokerAuth:  broker.AuthOptions{Required: true}})
	base, admin := tc.URL, bootstrapToken
	must := func(token, method, path string, body any, want int) []byte {
		t.Helper()
		status, _, b := call(t, base, token, method, path, body)
		if status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
		}
		return b
	}
	must(admin, "POST", "/v1/topics", api.CreateTopicRequest{Name: "flow", Partitions: 1, ReplicationFactor: 2}, 201)
	var tok api.Token
	if err := json.Unmarshal(must(admin, "POST", "/v1/tokens", api.CreateTokenRequest{Principal: "User:bob"}, 201), &tok); err != nil {
		t.Fatal(err)
	}
	bob := tok.Token
	for _, a := range []api.ACL{
		{Principal: "User:bob", ResourceType: "topic", ResourceName: "flow", Operation: "READ", Permission: "allow"},
		{Principal: "User:bob", ResourceType: "topic", ResourceName: "flow", Operation: "WRITE", Permission: "allow"},
		{Principal: "User:bob", ResourceType: "group", ResourceName: "g-flow", Operation: "READ", Permission: "allow"},
	} {
		must(admin, "POST", "/v1/acls", a, 201)
	}
	records := func(n int) map[string]any {
		rs := make([]map[string]any, n)
		for i := range rs {
			rs[i] = map[string]any{"value": i}
		}
		return map[string]any{"records": rs}
	}
	// The ACLs reach the gateway and the brokers through their watches.
	testwait.For(t, 10*time.Second, "bob's ACLs to apply", func() bool {
		status, _, _ := call(t, base, bob, "POST", "/v1/topics/flow/records", records(1))
		return status == 200
	})
	// Until their copies had the ACLs, the brokers may have refused some.
	refusedBefore := map[int32]int{}
	for _, b := range tc.Brokers {
		refusedBefore[b.ID()] = authRefused(t, b.Addr())
	}

	// acks=0: the sends may finish after the answer; they must still land.
	must(bob, "POST", "/v1/topics/flow/records?acks=0", records(3), 200)
	testwait.For(t, 10*time.Second, "the acks=0 records", func() bool {
		var res brokerapi.OffsetsResult
		b := must(bob, "GET", "/v1/topics/flow/partitions/0/offsets?at=latest", nil, 200)
		return json.Unmarshal(b, &res) == nil && res.Offset == 4
	})

	// A stream at the end waits in the shared long poll.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bearer := http.Header{"Authorization": {"Bearer " + bob}}
	ws, _, err := websocket.Dial(ctx, wsURL(base, "/v1/topics/flow/partitions/0/ws?offset=latest&credit=10"), &websocket.DialOptions{HTTPHeader: bearer})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	testwait.For(t, 10*time.Second, "the stream to wait on the shared poll", func() bool {
		return metricSum(t, base+"/metrics", "sluice_gateway_ws_tail_waiters") == 1
	})
	must(bob, "POST", "/v1/topics/flow/records", records(1), 200)
	_, frame, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("the stream at the end: %v", err)
	}
	var fr api.FetchResponse
	if err := json.Unmarshal(frame, &fr); err != nil || len(fr.Records) != 1 || fr.Records[0].Offset != 4 {
		t.Fatalf("the stream's frame %s (%v)", frame, err)
	}

	// Bob's join is the first: the gateway makes __consumer_offsets, which
	// bob may not create.
	var joined api.JoinGroupResponse
	if err := json.Unmarshal(must(bob, "POST", "/v1/groups/g-flow/members", api.JoinGroupRequest{Topics: []string{"flow"}}, 201), &joined); err != nil {
		t.Fatal(err)
	}
	var polled api.GroupPollResponse
	if err := json.Unmarshal(must(bob, "GET", "/v1/groups/g-flow/members/"+joined.MemberID+"/records?max_records=2", nil, 200), &polled); err != nil {
		t.Fatal(err)
	}
	if len(polled.Records) != 2 {
		t.Fatalf("polled %d records, want 2", len(polled.Records))
	}
	must(bob, "POST", "/v1/groups/g-flow/offsets", api.CommitRequest{MemberID: joined.MemberID, Cursor: polled.Cursor}, 200)
	must(bob, "DELETE", "/v1/groups/g-flow/members/"+joined.MemberID, nil, 204)
	var d api.GroupDescription
	if err := json.Unmarshal(must(bob, "GET", "/v1/groups/g-flow", nil, 200), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 1 || d.Partitions[0].HighWatermark != 5 || d.Partitions[0].Lag != 3 {
		t.Fatalf("the group's lag: %+v", d.Partitions)
	}

	// A group WebSocket member leaves when it closes, long before its
	// session would expire.
	gws, _, err := websocket.Dial(ctx, wsURL(base, "/v1/groups/g-flow/ws?topics=flow&credit=1&session_timeout_ms=120000"), &websocket.DialOptions{HTTPHeader: bearer})
	if err != nil {
		t.Fatal(err)
	}
	if _, b, err := gws.Read(ctx); err != nil {
		t.Fatalf("the member's first frame: %v", err)
	} else if f := (groupFrame{}); json.Unmarshal(b, &f) != nil || len(f.Assignment) != 1 {
		t.Fatalf("the member's first frame %s", b)
	}
	gws.Close(websocket.StatusNormalClosure, "")
	testwait.For(t, 10*time.Second, "the closed member to leave", func() bool {
		var d api.GroupDescription
		return json.Unmarshal(must(bob, "GET", "/v1/groups/g-flow", nil, 200), &d) == nil && len(d.Members) == 0
	})

	// No broker refused any of the gateway's calls (a failed shared poll,
	// say, would be covered by the streams' own fetches, so only the
	// brokers' count shows it).
	for _, b := range tc.Brokers {
		if n := authRefused(t, b.Addr()) - refusedBefore[b.ID()]; n != 0 {
			t.Errorf("broker %d refused %d of the gateway's calls", b.ID(), n)
		}
	}
}

// authRefused reads sluice_broker_auth_refused_total from a broker's metrics.
func authRefused(t *testing.T, addr string) int {
	t.Helper()
	return metricSum(t, "http://"+addr+"/metrics", "sluice_broker_auth_refused_total")
}

// metricSum adds up the samples of one metric (all its label sets) at url.
func metricSum(t *testing.T, url, name string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, seen := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != '{' && rest[0] != ' ')) {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q", line)
		}
		n, seen = n+int(f), true
	}
	if !seen {
		t.Fatalf("no %s at %s", name, url)
	}
	return n
}
