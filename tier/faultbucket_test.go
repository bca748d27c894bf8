package tier

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// With no fault queued, FaultBucket is a plain pass-through.
func TestFaultBucketAcceptance(t *testing.T) {
	AcceptanceTest(t, NewFaultBucket(NewMemory()))
}

func TestFaultBucket(t *testing.T) {
	ctx := t.Context()
	mem := NewMemory()
	bkt := NewFaultBucket(mem)
	data := randBytes(11, 10_000)
	put := func(key string) error { return bkt.Put(ctx, key, bytes.NewReader(data), int64(len(data))) }

	t.Run("FailNext", func(t *testing.T) {
		bkt.FailNext(OpPut, 2, nil)
		if bkt.Pending(OpPut) != 2 {
			t.Fatalf("Pending = %d, want 2", bkt.Pending(OpPut))
		}
		for i := range 2 {
			if err := put("fail/k"); !IsUnavailable(err) {
				t.Fatalf("put %d: %v, want ErrUnavailable", i, err)
			}
		}
		wantNotExist(t, mem, "fail/k")
		if err := put("fail/k"); err != nil {
			t.Fatalf("third put: %v", err)
		}
		custom := errors.New("disk on fire")
		bkt.FailNext(OpStat, 1, custom)
		if _, err := bkt.Stat(ctx, "fail/k"); err != custom {
			t.Fatalf("Stat: %v, want the injected error", err)
		}
		// Faults of one kind leave other kinds alone.
		bkt.FailNext(OpDelete, 1, nil)
		mustStat(t, bkt, "fail/k")
		if err := bkt.Delete(ctx, "fail/k"); !IsUnavailable(err) {
			t.Fatalf("Delete: %v", err)
		}
		if bkt.Calls(OpPut) != 3 || bkt.Calls(OpStat) != 2 || bkt.Calls(OpDelete) != 1 {
			t.Fatalf("calls: put %d stat %d delete %d", bkt.Calls(OpPut), bkt.Calls(OpStat), bkt.Calls(OpDelete))
		}
	})

	t.Run("DelayNext", func(t *testing.T) {
		bkt.DelayNext(OpGet, 1, 100*time.Millisecond)
		start := time.Now()
		rc, err := bkt.Get(ctx, "fail/k")
		if err != nil {
			t.Fatal(err)
		}
		equalBytes(t, "delayed Get", readClose(t, rc), data)
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("Get took %v, want at least the delay", d)
		}
		// A delay longer than the caller's deadline: ErrUnavailable, on time.
		bkt.DelayNext(OpList, 1, time.Hour)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		err = bkt.List(dctx, "", func(ObjectInfo) error { return nil })
		if !IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Fatalf("stalled List: %v after %v", err, time.Since(start))
		}
	})

	t.Run("CutPut", func(t *testing.T) {
		mustPut(t, mem, "cut/k", []byte("old"))
		bkt.CutNext(OpPut, 1, 4000)
		if err := put("cut/k"); !IsUnavailable(err) {
			t.Fatalf("cut Put: %v, want ErrUnavailable", err)
		}
		equalBytes(t, "Get after a cut Put", mustGet(t, mem, "cut/k"), []byte("old"))
	})

	t.Run("CutGet", func(t *testing.T) {
		bkt.CutNext(OpGetRange, 1, 100)
		rc, err := bkt.GetRange(ctx, "fail/k", 1000, 500)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if !IsUnavailable(err) || !bytes.Equal(got, data[1000:1100]) {
			t.Fatalf("cut GetRange: %d bytes, %v; want 100 bytes then ErrUnavailable", len(got), err)
		}
	})

	t.Run("Reset", func(t *testing.T) {
		bkt.FailNext(OpPut, 5, nil)
		bkt.Reset()
		if err := put("reset/k"); err != nil {
			t.Fatalf("Put after Reset: %v", err)
		}
	})

	t.Run("Sequence", func(t *testing.T) {
		// Faults apply in the order they were queued, one per operation.
		bkt.FailNext(OpStat, 1, nil)
		bkt.DelayNext(OpStat, 1, 10*time.Millisecond)
		if _, err := bkt.Stat(ctx, "reset/k"); !IsUnavailable(err) {
			t.Fatalf("first Stat: %v", err)
		}
		if _, err := bkt.Stat(ctx, "reset/k"); err != nil {
			t.Fatalf("second Stat: %v", err)
		}
		if n := bkt.Pending(OpStat); n != 0 {
			t.Fatalf("Pending = %d after both faults fired", n)
		}
	})
}
