package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// TestClusterSecret runs a three-broker cluster whose nodes sign their
// internal calls: replication and the gateway work as before, while a caller
// without the secret is refused, and a replication fetch that names another
// broker's id (which would move the high watermark over records that broker
// does not have) is refused even with the secret.
func TestClusterSecret(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ClusterSecret: secret})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	// acks=all needs every follower's signed fetches to count.
	if _, err := cl.Produce(ctx, "t", []client.Record{{Value: []byte("v")}}, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	top, err := cl.GetTopic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	p := top.Partitions[0]
	if len(p.ISR) != 3 {
		t.Fatalf("ISR %v with signed replication", p.ISR)
	}
	leader := c.Brokers[p.Leader-1].Addr()
	var follower int32
	for _, id := range p.Replicas {
		if id != p.Leader {
			follower = id
			break
		}
	}

	fetch := func(auth *brokerapi.NodeAuth, replica int32) error {
		bc := brokerapi.NewClient()
		defer bc.Close()
		bc.Auth = auth
		_, err := bc.Fetch(ctx, leader, "t", 0, brokerapi.FetchParams{Offset: 0, ReplicaID: replica, LeaderEpoch: p.LeaderEpoch})
		return err
	}
	cases := []struct {
		name    string
		auth    *brokerapi.NodeAuth
		replica int32
		want    api.Code // "" for success
	}{
		{"no signature", nil, 0, api.CodeUnauthenticated},
		{"another secret", &brokerapi.NodeAuth{Secret: []byte("not the secret"), Node: brokerapi.NodeGateway}, 0, api.CodeUnauthenticated},
		{"a gateway reads", &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}, 0, ""},
		{"a gateway poses as a follower", &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}, follower, api.CodeNotAuthorized},
		{"a broker poses as another", &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.BrokerNode(p.Leader)}, follower, api.CodeNotAuthorized},
		{"the follower itself", &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.BrokerNode(follower)}, follower, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := fetch(tc.auth, tc.replica)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != tc.want {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}
