package coord

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestZKDigestConformance: the whole conformance suite, expiries included,
// passes on a handle with digest credentials (each new session
// authenticates again before its first request).
func TestZKDigestConformance(t *testing.T) {
	h := newZKHarness(t)
	h.user, h.pass = "sluice", "conformance-secret"
	runConformance(t, func(t *testing.T) (Coordinator, sessionControl) {
		z, p := h.dial(t, 10*time.Second)
		return z, zkControl{p}
	})
}

// TestZKDigestACL: with credentials, every node the handle creates (by
// Create, CreateAll, Multi, ephemeral and sequential, and the chroot) can
// be read and changed by another session with the same credentials, and by
// no session without them or with a wrong password: those get ErrNoAuth.
// Without credentials, nodes stay open to everyone.
func TestZKDigestACL(t *testing.T) {
	ctx := t.Context()
	h := newZKHarness(t)
	h.user, h.pass = "sluice", "s3cret-password"
	owner, _ := h.dial(t, 10*time.Second)
	mustCreate(t, owner, "/brokers", []byte("b"), 0)
	mustCreate(t, owner, "/brokers/ids", nil, 0)
	mustCreate(t, owner, "/brokers/ids/1", []byte(`{"id":1}`), Ephemeral)
	seq, err := owner.Create(ctx, "/brokers/seq-", []byte("s"), Sequential)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateAll(ctx, owner, "/auth/tokens/abc", []byte("hash"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Multi(ctx, CreateOp("/brokers/topics", nil, 0), CreateOp("/brokers/topics/orders", []byte("t"), 0)); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"", "/brokers", "/brokers/ids", "/brokers/ids/1", seq, "/auth", "/auth/tokens", "/auth/tokens/abc", "/brokers/topics", "/brokers/topics/orders"}

	// A second process of the cluster, with the same credentials.
	peer, _ := h.dial(t, 10*time.Second)
	for _, n := range nodes[1:] {
		if _, _, err := peer.Get(ctx, n); err != nil {
			t.Errorf("Get %s with the credentials: %v", n, err)
		}
	}
	if _, err := peer.Set(ctx, "/brokers/topics/orders", []byte("t2"), AnyVersion); err != nil {
		t.Errorf("Set with the credentials: %v", err)
	}

	dialAs := func(user, pass string) *ZK {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		z, err := DialZK(dctx, ZKOptions{Servers: []string{h.addr}, DigestUser: user, DigestPassword: pass})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = z.Close() })
		return z
	}
	for _, who := range []struct {
		name string
		z    *ZK
	}{
		{"no credentials", dialAs("", "")},
		{"a wrong password", dialAs("sluice", "guess")},
		{"another user", dialAs("mallory", "s3cret-password")},
	} {
		// Without the chroot: these sessions name the cluster's nodes in full.
		for _, n := range nodes {
			full := h.chroot + n
			if _, _, err := who.z.Get(ctx, full); !errors.Is(err, ErrNoAuth) {
				t.Errorf("%s: Get %s: %v, want ErrNoAuth", who.name, full, err)
			}
			if _, _, err := who.z.Children(ctx, full); !errors.Is(err, ErrNoAuth) {
				t.Errorf("%s: Children %s: %v, want ErrNoAuth", who.name, full, err)
			}
			if _, err := who.z.Set(ctx, full, []byte("x"), AnyVersion); !errors.Is(err, ErrNoAuth) {
				t.Errorf("%s: Set %s: %v, want ErrNoAuth", who.name, full, err)
			}
			if _, err := who.z.Create(ctx, full+"/intruder", nil, 0); !errors.Is(err, ErrNoAuth) {
				t.Errorf("%s: Create under %s: %v, want ErrNoAuth", who.name, full, err)
			}
		}
		// Deleting a node needs DELETE on its parent.
		for _, n := range []string{"/brokers/ids/1", "/auth/tokens/abc", "/brokers/topics/orders"} {
			if err := who.z.Delete(ctx, h.chroot+n, AnyVersion); !errors.Is(err, ErrNoAuth) {
				t.Errorf("%s: Delete %s: %v, want ErrNoAuth", who.name, n, err)
			}
		}
		if _, err := who.z.Multi(ctx, SetOp(h.chroot+"/brokers/topics/orders", []byte("x"), AnyVersion)); !errors.Is(err, ErrNoAuth) {
			t.Errorf("%s: Multi Set: %v, want ErrNoAuth", who.name, err)
		}
	}
	if d, _, err := owner.Get(ctx, "/brokers/topics/orders"); err != nil || string(d) != "t2" {
		t.Fatalf("the node after the refused writes: %q %v", d, err)
	}

	// Without credentials nothing changes: anyone may read and write.
	open := newZKHarness(t)
	o, _ := open.dial(t, 10*time.Second)
	mustCreate(t, o, "/brokers", []byte("b"), 0)
	anon := dialAs("", "")
	if d, _, err := anon.Get(ctx, open.chroot+"/brokers"); err != nil || string(d) != "b" {
		t.Errorf("Get of an open node: %q %v", d, err)
	}
	if _, err := anon.Set(ctx, open.chroot+"/brokers", []byte("c"), AnyVersion); err != nil {
		t.Errorf("Set of an open node: %v", err)
	}
}

func TestZKDigestOptions(t *testing.T) {
	for _, o := range []ZKOptions{
		{Servers: []string{"127.0.0.1:1"}, DigestUser: "sluice"},
		{Servers: []string{"127.0.0.1:1"}, DigestPassword: "p"},
		{Servers: []string{"127.0.0.1:1"}, DigestUser: "a:b", DigestPassword: "p"},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("validate accepted user %q password set %t", o.DigestUser, o.DigestPassword != "")
		}
	}
}
