package broker_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/internal/tlsfiles"
	"github.com/sluice-io/sluice/recordbatch"
)

const adminToken = "slc_0123456789abcdef_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// TestBrokerAuthorization calls a broker that checks ACLs straight on its
// internal port, as someone who got past (or around) the gateway would:
// unsigned with a forged principal header (401), signed by a gateway
// identity for no principal (401) or for a principal without ACLs (403),
// for the admin and for a broker (2xx), and for a principal whose ACLs
// allow some routes and not others, as the gateway's own checks would.
func TestBrokerAuthorization(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	c := embedtest.Start(t, embedtest.Options{ClusterSecret: secret,
		GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: adminToken},
		BrokerAuth:  broker.AuthOptions{Required: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	gw, err := client.New(c.URL, client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	callers := []string{"unsigned", "anonymous", "nobody", "alice", "admin", "broker"}
	topics := []string{"orders", "logs"}
	for _, who := range callers {
		topics = append(topics, "doomed-"+who)
	}
	for _, name := range topics {
		if _, err := gw.CreateTopic(ctx, api.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []api.ACL{
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "orders", Operation: "WRITE", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "logs", Operation: "READ", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "group", ResourceName: "g-alice", Operation: "READ", Permission: "allow"},
	} {
		if _, err := gw.CreateACL(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// A join through the gateway makes __consumer_offsets.
	if _, err := gw.JoinGroup(ctx, "g-admin", api.JoinGroupRequest{Topics: []string{"logs"}}); err != nil {
		t.Fatal(err)
	}
	top, err := gw.GetTopic(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Brokers[0].Addr()
	batch, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`"v"`)}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}

	signed := func(node string) *brokerapi.Client {
		bc := brokerapi.NewClient()
		t.Cleanup(bc.Close)
		bc.Auth = &brokerapi.NodeAuth{Secret: secret, Node: node}
		return bc
	}
	unsigned := brokerapi.NewClient()
	t.Cleanup(unsigned.Close)
	asGateway, asBroker := signed(brokerapi.NodeGateway), signed(brokerapi.BrokerNode(7))
	// caller returns the client and context of one caller.
	caller := func(who string) (*brokerapi.Client, context.Context) {
		switch who {
		case "unsigned":
			return unsigned, auth.WithPrincipal(ctx, "User:admin") // a forged header
		case "anonymous":
			return asGateway, ctx
		case "broker":
			return asBroker, ctx
		default:
			return asGateway, auth.WithPrincipal(ctx, "User:"+who)
		}
	}
	// The broker's copy of the ACLs follows the coordinator through a watch.
	testwait.For(t, 10*time.Second, "alice's ACLs to reach the broker", func() bool {
		cl, cctx := caller("alice")
		_, err := cl.Produce(cctx, addr, "orders", 0, "1", 5*time.Second, -1, batch)
		return err == nil
	})

	unauth := map[string]api.Code{"unsigned": api.CodeUnauthenticated, "anonymous": api.CodeUnauthenticated}
	with := func(m map[string]api.Code) map[string]api.Code {
		out := map[string]api.Code{"admin": "", "broker": ""}
		for k, v := range unauth {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	type row struct {
		name string
		call func(cl *brokerapi.Client, ctx context.Context, who string) error
		want map[string]api.Code // "" success; callers not named: NOT_AUTHORIZED
	}
	rows := []row{
		{"produce needs topic WRITE", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.Produce(ctx, addr, "orders", 0, "1", 5*time.Second, -1, batch)
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"fetch needs topic READ", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			fr, err := cl.Fetch(ctx, addr, "orders", 0, brokerapi.FetchParams{LeaderEpoch: -1})
			if err == nil {
				fr.Body.Close()
			}
			return err
		}, with(nil)},
		{"fetch where READ is allowed", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			fr, err := cl.Fetch(ctx, addr, "logs", 0, brokerapi.FetchParams{LeaderEpoch: -1})
			if err == nil {
				fr.Body.Close()
			}
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"offsets need DESCRIBE, which WRITE implies", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.ListOffsets(ctx, addr, "orders", 0, "latest")
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"topic status needs DESCRIBE", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.TopicStatus(ctx, addr, "logs")
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"create needs CREATE", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			return cl.CreateTopic(ctx, addr, api.CreateTopicRequest{Name: "made-" + who, Partitions: 1, ReplicationFactor: 1})
		}, with(nil)},
		{"configs need ALTER_CONFIGS", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			return cl.AlterTopicConfig(ctx, addr, "orders", api.AlterTopicConfigRequest{Set: map[string]string{api.ConfigRetentionMs: "3600000"}})
		}, with(nil)},
		{"delete needs DELETE", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			return cl.DeleteTopic(ctx, addr, "doomed-"+who)
		}, with(nil)},
		{"join needs group and topic READ", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.JoinGroup(ctx, addr, "g-alice", brokerapi.GroupJoin{JoinGroupRequest: api.JoinGroupRequest{Topics: []string{"logs"}}})
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"join needs READ on every topic", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.JoinGroup(ctx, addr, "g-alice", brokerapi.GroupJoin{JoinGroupRequest: api.JoinGroupRequest{Topics: []string{"orders"}}})
			return err
		}, with(nil)},
		{"commits need READ on the topic", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.SetGroupOffsets(ctx, addr, "g-empty-"+who, []api.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 0}})
			return err
		}, with(nil)},
		{"describe group needs DESCRIBE, which READ implies", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.DescribeGroup(ctx, addr, "g-alice")
			return err
		}, with(map[string]api.Code{"alice": ""})},
		{"stats need cluster DESCRIBE", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.Stats(ctx, addr)
			return err
		}, with(nil)},
		{"epoch ends are for brokers only", func(cl *brokerapi.Client, ctx context.Context, who string) error {
			_, err := cl.EpochEnd(ctx, addr, "logs", 0, 0, top.Partitions[0].LeaderEpoch)
			return err
		}, with(map[string]api.Code{"admin": api.CodeNotAuthorized})},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			for _, who := range callers {
				want, ok := r.want[who]
				if !ok {
					want = api.CodeNotAuthorized
				}
				cl, cctx := caller(who)
				err := r.call(cl, cctx, who)
				var ae *api.Error
				switch {
				case want == "" && err != nil:
					t.Errorf("%s: refused: %v", who, err)
				case want != "" && (!errors.As(err, &ae) || ae.Code != want):
					t.Errorf("%s: got %v, want %s", who, err, want)
				}
			}
		})
	}

	// A listing shows only the groups the caller may DESCRIBE.
	groups := func(who string) []string {
		cl, cctx := caller(who)
		l, err := cl.ListGroups(cctx, addr)
		if err != nil {
			t.Fatalf("%s lists groups: %v", who, err)
		}
		var out []string
		for _, g := range l.Groups {
			out = append(out, g.Group)
		}
		slices.Sort(out)
		return out
	}
	if got := groups("alice"); !slices.Equal(got, []string{"g-alice"}) {
		t.Errorf("alice lists groups %v", got)
	}
	if got := groups("nobody"); len(got) != 0 {
		t.Errorf("nobody lists groups %v", got)
	}
	if got := groups("admin"); !slices.Contains(got, "g-admin") || !slices.Contains(got, "g-alice") {
		t.Errorf("admin lists groups %v", got)
	}
}

// TestPrincipalReplay takes a request the gateway signed for one principal
// and sends it to the broker with another principal in the header: the
// signature covers the principal, so the broker refuses it.
func TestPrincipalReplay(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	c := embedtest.Start(t, embedtest.Options{ClusterSecret: secret,
		GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: adminToken},
		BrokerAuth:  broker.AuthOptions{Required: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gw, err := client.New(c.URL, client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	na := &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}
	send := func(signedFor, sentAs string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Brokers[0].Addr()+
			strings.Replace(brokerapi.PathTopicStatus, "{topic}", "orders", 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(brokerapi.HeaderPrincipal, signedFor)
		na.Sign(req, time.Now())
		req.Header.Set(brokerapi.HeaderPrincipal, sentAs)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("User:admin", "User:admin"); got != http.StatusOK {
		t.Fatalf("the admin's own signed request: %d", got)
	}
	if got := send("User:nobody", "User:nobody"); got != http.StatusForbidden {
		t.Fatalf("a principal without ACLs: %d", got)
	}
	if got := send("User:nobody", "User:admin"); got != http.StatusUnauthorized {
		t.Fatalf("a signature for User:nobody sent as User:admin: %d, want 401", got)
	}
}

// TestBrokerAuthNeedsSecret: a broker that would check ACLs without a
// cluster secret or node certificates, where anyone could name any
// principal, does not start; with client certificates of a cluster CA,
// which name the nodes, it does.
func TestBrokerAuthNeedsSecret(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{})
	_, err := broker.New(broker.Options{ID: 9, DataDir: t.TempDir(), Coord: c.Store.Session(), Auth: broker.AuthOptions{Required: true}})
	if err == nil || !strings.Contains(err.Error(), "ClusterSecret") {
		t.Fatalf("New without a secret: %v", err)
	}
	ca := testcerts.NewCA(t, "cluster CA")
	cert, key := ca.Issue(t, brokerapi.BrokerNode(9), testcerts.Server|testcerts.Client)
	tlsOpts := &tlsfiles.Options{CertFile: cert, KeyFile: key}
	if _, err := broker.New(broker.Options{ID: 9, DataDir: t.TempDir(), Coord: c.Store.Session(), TLS: tlsOpts, Auth: broker.AuthOptions{Required: true}}); err == nil {
		t.Fatal("New with TLS but no client CA: started")
	}
	tlsOpts.ClientCAFile = ca.File
	b, err := broker.New(broker.Options{ID: 9, DataDir: t.TempDir(), Coord: c.Store.Session(), TLS: tlsOpts, Auth: broker.AuthOptions{Required: true}})
	if err != nil {
		t.Fatalf("New with node certificates: %v", err)
	}
	_ = b.Close()
}
