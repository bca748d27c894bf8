package quota

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
		c1, c2 := open(), open()
		writer, watcher := startStore(t, c1), startStore(t, c2)
		ctx := t.Context()
		alice := Entity{Principal: "User:alice"}
		if err := writer.Set(ctx, Quota{Entity: alice, ProducerByteRate: 1024}); err != nil {
			t.Fatal(err)
		}
		// The other store sees it through its watch: the first write
		// creates the node, which its exists-watch waited for.
		rateOf := func(e Entity, k Kind) func() (float64, bool) {
			return func() (float64, bool) {
				q, ok := watcher.Config().Get(e)
				return q.Rate(k), ok
			}
		}
		testwait.For(t, 10*time.Second, "the watcher sees alice's quota", func() bool { r, _ := rateOf(alice, Produce)(); return r == 1024 })
		// Set replaces the entity's rates.
		if err := writer.Set(ctx, Quota{Entity: alice, ConsumerByteRate: 2048}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the watcher sees the new rates", func() bool {
			q, _ := watcher.Config().Get(alice)
			return q.ConsumerByteRate == 2048 && q.ProducerByteRate == 0
		})
		def := Entity{Principal: Default, ClientID: Default}
		if err := writer.Set(ctx, Quota{Entity: def, RequestRate: 5}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "two quotas", func() bool { return watcher.Config().Len() == 2 })
		if err := writer.Delete(ctx, alice); err != nil {
			t.Fatal(err)
		}
		if err := writer.Delete(ctx, alice); !errors.Is(err, ErrUnknown) {
			t.Fatalf("deleting again: %v, want ErrUnknown", err)
		}
		testwait.For(t, 10*time.Second, "alice's quota gone", func() bool { _, ok := rateOf(alice, Fetch)(); return !ok })
		if got := watcher.Config().All(); len(got) != 1 || got[0].Entity != def {
			t.Fatalf("left %+v", got)
		}
		if err := writer.Set(ctx, Quota{Entity: alice}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a quota without rates: %v", err)
		}
	})
}

// TestStoreConcurrentSets: conditional writes from two stores lose nothing.
func TestStoreConcurrentSets(t *testing.T) {
	open := coordtest.Mem(t)
	c1, c2 := open(), open()
	a, b := startStore(t, c1), startStore(t, c2)
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		for j, s := range []*Store{a, b} {
			go func() {
				errs <- s.Set(context.Background(), Quota{Entity: Entity{ClientID: "c" + string(rune('a'+i)) + string(rune('0'+j))}, RequestRate: 1})
			}()
		}
	}
	for i := 0; i < 40; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "40 quotas", func() bool { return a.Config().Len() == 40 })
}
