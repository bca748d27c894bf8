package auth

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/coordtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A SCRAM credential set through one store is seen by another once its
// watch fires; a new password replaces it (one credential in force, the
// old node gone); deleting it removes it everywhere. The keys are RFC
// 5802's for the password, and the password is stored nowhere.
func TestScramStore(t *testing.T) {
	coordtest.ForEach(t, func(t *testing.T, open coordtest.Tree) {
		ca, cb := open(), open()
		a, b := startStore(t, ca), startStore(t, cb)
		ctx := context.Background()
		c1, err := NewScramCredential("User:alice", ScramSHA256, "first-pw", 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SetScramCredential(ctx, c1); err != nil {
			t.Fatal(err)
		}
		h, _ := ScramHash(ScramSHA256)
		salted, _ := pbkdf2.Key(h, "first-pw", c1.Salt, c1.Iterations, h().Size())
		if stored, server := ScramKeys(h, salted); !bytes.Equal(stored, c1.StoredKey) || !bytes.Equal(server, c1.ServerKey) {
			t.Fatal("the keys are not the password's")
		}
		testwait.For(t, 10*time.Second, "the other store sees the credential", func() bool {
			got, ok := b.ScramCredential(ScramSHA256, "User:alice")
			return ok && got.ID == c1.ID
		})
		c2, err := NewScramCredential("User:alice", ScramSHA256, "second-pw", 4096, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetScramCredential(ctx, c2); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the new password replaces the old", func() bool {
			got, ok := a.ScramCredential(ScramSHA256, "User:alice")
			return ok && got.ID == c2.ID
		})
		names, _, err := ca.Children(ctx, ScramPath)
		if err != nil || len(names) != 1 {
			t.Fatalf("stored nodes %v %v, want the new one only", names, err)
		}
		data, _, _ := ca.Get(ctx, ScramPath+"/"+names[0])
		if bytes.Contains(data, []byte("second-pw")) {
			t.Fatal("the password is stored")
		}
		if _, ok := a.ScramCredential(ScramSHA512, "User:alice"); ok {
			t.Fatal("a credential for a mechanism never set")
		}
		list, err := a.ReadScramCredentials(ctx, "")
		if err != nil || len(list) != 1 || list[0].Iterations != 4096 {
			t.Fatalf("list %+v %v", list, err)
		}
		if err := a.DeleteScramCredential(ctx, ScramSHA256, "User:alice"); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the other store drops the credential", func() bool {
			_, ok := b.ScramCredential(ScramSHA256, "User:alice")
			return !ok
		})
		if err := a.DeleteScramCredential(ctx, ScramSHA256, "User:alice"); !errors.Is(err, ErrUnknownScramCredential) {
			t.Fatalf("deleting again: %v", err)
		}
	})
}

// Bad inputs are refused with a reason.
func TestNewScramCredentialChecks(t *testing.T) {
	for _, tc := range []struct {
		name, principal, mech, pw string
		iter                      int
	}{
		{"mechanism", "User:a", "SCRAM-SHA-1", "pw", 0},
		{"principal", "alice", ScramSHA256, "pw", 0},
		{"comma in the name", "User:a,b", ScramSHA256, "pw", 0},
		{"few iterations", "User:a", ScramSHA256, "pw", 100},
		{"many iterations", "User:a", ScramSHA256, "pw", 1 << 20},
		{"empty password", "User:a", ScramSHA256, "", 0},
	} {
		if _, err := NewScramCredential(tc.principal, tc.mech, tc.pw, tc.iter, time.Now()); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
