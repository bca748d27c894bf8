// Package coordtest runs a test against every coordinator implementation:
// the in-process store and the real ZooKeeper that `make test` starts. A
// package whose code sits on coord.Coordinator (a watched store, a
// registry) writes its test once and gets both, the way coord's own
// conformance suite holds the two implementations to one contract.
package coordtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/internal/testsvc"
)

// Tree opens handles on one coordinator tree. Each call is a new session,
// as two processes (gateways, brokers) would hold; every handle is closed
// when the test ends.
type Tree func() coord.Coordinator

// ForEach runs test as a subtest per implementation, "mem" (a fresh
// coord.MemStore) and "zookeeper" (the shared test ZooKeeper under a chroot
// of the test's own, so tests never see each other's nodes).
func ForEach(t *testing.T, test func(t *testing.T, open Tree)) {
	t.Helper()
	t.Run("mem", func(t *testing.T) { test(t, Mem(t)) })
	t.Run("zookeeper", func(t *testing.T) { test(t, ZooKeeper(t)) })
}

// Mem returns a fresh in-process tree, closed when the test ends.
func Mem(t testing.TB) Tree {
	t.Helper()
	m, err := coord.NewMemStore(coord.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return func() coord.Coordinator { return m.Session() }
}

// ZooKeeper returns a tree under a fresh chroot of the shared test
// ZooKeeper (under -short, where there is none, the test skips).
func ZooKeeper(t testing.TB) Tree {
	t.Helper()
	addr := testsvc.ZooKeeper(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	chroot := "/coordtest-" + hex.EncodeToString(b)
	return func() coord.Coordinator {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		z, err := coord.DialZK(ctx, coord.ZKOptions{Servers: []string{addr}, Chroot: chroot})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = z.Close() })
		return z
	}
}
