package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/coordtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

func startStore(t *testing.T, c coord.Coordinator) *Store {
	s := NewStore(c, nil)
	s.Start()
	t.Cleanup(s.Close)
	select {
	case <-s.Loaded():
	case <-time.After(20 * time.Second):
		t.Fatal("the store did not load")
	}
	return s
}

func TestStore(t *testing.T) {
	coordtest.ForEach(t, func(t *testing.T, open coordtest.Tree) {
		ca, cb := open(), open()
		a, b := startStore(t, ca), startStore(t, cb)
		ctx := context.Background()
		now := time.Now()

		// A token made through one gateway works at once through the other
		// (looked up on a miss), and both list it without its secret.
		tok, rec, err := a.CreateToken(ctx, "User:alice", 0, now)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := b.Authenticate(ctx, tok, now); err != nil || p != "User:alice" {
			t.Fatalf("Authenticate through the other store = %q, %v", p, err)
		}
		testwait.For(t, 10*time.Second, "both stores to list the token", func() bool {
			return len(a.Tokens()) == 1 && len(b.Tokens()) == 1 && b.Tokens()[0].ID == rec.ID
		})
		_, secret, _ := ParseToken(tok)
		last := "0"
		if secret[63] == '0' {
			last = "1"
		}
		wrong := "slc_" + rec.ID + "_" + secret[:63] + last
		if _, err := b.Authenticate(ctx, wrong, now); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("a wrong secret: %v", err)
		}

		// Expiry is checked at use.
		short, _, err := a.CreateToken(ctx, "User:bob", time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Authenticate(ctx, short, now.Add(time.Minute)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("an expired token: %v", err)
		}

		// Revocation reaches the other store through its watch.
		if err := a.DeleteToken(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the revoked token to be refused", func() bool {
			_, err := b.Authenticate(ctx, tok, now)
			return errors.Is(err, ErrUnauthenticated)
		})
		if err := a.DeleteToken(ctx, rec.ID); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("deleting it again: %v", err)
		}

		// ACLs: equal ones are stored once; a filter deletes some.
		rules := []ACL{
			acl("User:alice", ResourceTopic, PatternLiteral, "orders", OpWrite, Allow),
			acl("User:alice", ResourceTopic, PatternLiteral, "orders", OpWrite, Allow),
			acl("User:alice", ResourceTopic, PatternPrefixed, "logs.", OpRead, Allow),
			acl("User:bob", ResourceGroup, PatternLiteral, "g", OpRead, Allow),
		}
		for _, r := range rules {
			if err := a.CreateACL(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.CreateACL(ctx, acl("User:x", ResourceTopic, PatternLiteral, "", OpRead, Allow)); err == nil {
			t.Fatal("an invalid ACL was stored")
		}
		testwait.For(t, 10*time.Second, "the other store to hold 3 ACLs", func() bool { return len(b.ListACLs(Filter{})) == 3 })
		if !b.ACLs().Allowed("User:alice", OpRead, ResourceTopic, "logs.app") {
			t.Fatal("the prefixed ACL does not apply through the other store")
		}
		gone, err := b.DeleteACLs(ctx, Filter{Principal: "User:alice"})
		if err != nil || len(gone) != 2 {
			t.Fatalf("DeleteACLs = %v, %v", gone, err)
		}
		testwait.For(t, 10*time.Second, "the first store to see the deletion", func() bool {
			l := a.ListACLs(Filter{})
			return len(l) == 1 && l[0].Principal == "User:bob"
		})
	})
}
