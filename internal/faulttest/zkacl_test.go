package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// TestZooKeeperDigestACL runs a cluster whose processes have ZooKeeper
// credentials: under an acks=all load with a broker killed (a controller
// election, leader changes and ISR writes on the way), nothing acknowledged
// is lost and the replicas agree; meanwhile a ZooKeeper session without the
// credentials, or with a wrong password, can neither read nor change any
// node of the cluster.
func TestZooKeeperDigestACL(t *testing.T) {
	c := Start(t, Options{ZKUser: "sluice", ZKPassword: "zk-digest-password"})
	parts := []int32{0, 1, 2}
	c.CreateTopic(topic, len(parts), 3, 2)
	c.WaitFullISR(topic, 45*time.Second, false)
	h := NewHistory(c, topic)
	load := h.StartLoad(LoadOptions{Partitions: parts, Timeout: 3 * time.Second})

	loaded := func(n int) {
		c.WaitFor(fmt.Sprintf("%d produce requests", n), 30*time.Second, func() (bool, string) {
			return len(h.Ops()) >= n, fmt.Sprint(len(h.Ops()))
		})
	}
	loaded(50)
	x := zkState(c, 0).Leader
	c.Kill(x)
	c.WaitLeader(topic, 0, 30*time.Second, func(pi api.PartitionInfo) bool { return pi.Leader != x })
	loaded(len(h.Ops()) + 50)
	c.Restart(x)
	load.Stop()
	r := settle(t, c, h, parts)
	if r.Acked == 0 {
		t.Fatalf("nothing was acknowledged: %s", r)
	}

	servers, chroot, err := coord.ParseZKConnect(c.ZK)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	nodes := []string{"", cluster.BrokersIDsPath, cluster.BrokerPath(1), cluster.TopicsPath, cluster.TopicPath(topic),
		cluster.PartitionStatePath(topic, 0), "/controller", "/controller_epoch"}
	for _, who := range []struct{ name, user, pass string }{
		{"no credentials", "", ""},
		{"a wrong password", "sluice", "guess"},
	} {
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		z, err := coord.DialZK(dctx, coord.ZKOptions{Servers: servers, DigestUser: who.user, DigestPassword: who.pass})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		for _, n := range nodes {
			full := chroot + n
			if _, _, err := z.Get(ctx, full); !errors.Is(err, coord.ErrNoAuth) {
				t.Errorf("%s: Get %s: %v, want ErrNoAuth", who.name, full, err)
			}
			if _, err := z.Set(ctx, full, []byte(`{}`), coord.AnyVersion); !errors.Is(err, coord.ErrNoAuth) {
				t.Errorf("%s: Set %s: %v, want ErrNoAuth", who.name, full, err)
			}
			if !strings.HasPrefix(n, "/controller") {
				if _, _, err := z.Children(ctx, full); !errors.Is(err, coord.ErrNoAuth) {
					t.Errorf("%s: Children %s: %v, want ErrNoAuth", who.name, full, err)
				}
			}
		}
		if _, err := z.Create(ctx, chroot+cluster.BrokerPath(9), []byte(`{"id":9,"address":"127.0.0.1:1"}`), coord.Ephemeral); !errors.Is(err, coord.ErrNoAuth) {
			t.Errorf("%s: register a broker: %v, want ErrNoAuth", who.name, err)
		}
		if err := z.Delete(ctx, chroot+"/controller", coord.AnyVersion); !errors.Is(err, coord.ErrNoAuth) {
			t.Errorf("%s: delete /controller: %v, want ErrNoAuth", who.name, err)
		}
	}
}
