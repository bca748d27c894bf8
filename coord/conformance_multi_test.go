package coord

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// Multi and compare-and-set cases of the conformance suite (runConformance).

func testMulti(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	mustCreate(t, c, base+"/x", []byte("x0"), 0)
	mustCreate(t, c, base+"/y", nil, 0)
	mustCreate(t, c, base+"/z", nil, 0)

	res, err := c.Multi(ctx,
		CreateOp(base+"/a", []byte("a"), 0),
		CreateOp(base+"/a/b", nil, 0),
		CreateOp(base+"/a/s-", nil, Sequential),
		SetOp(base+"/x", []byte("x1"), 0),
		DeleteOp(base+"/y", 0),
		CheckOp(base+"/z", 0),
	)
	if err != nil {
		t.Fatalf("Multi: %v", err)
	}
	wantPaths := []string{base + "/a", base + "/a/b", base + "/a/s-0000000001", base + "/x", base + "/y", base + "/z"}
	for i, r := range res {
		if r.Path != wantPaths[i] {
			t.Fatalf("result %d path %q, want %q", i, r.Path, wantPaths[i])
		}
	}
	if res[3].Stat.Version != 1 {
		t.Fatalf("set result stat %+v, want version 1", res[3].Stat)
	}
	mustExist(t, c, base+"/a/b", true)
	mustExist(t, c, base+"/y", false)
	if data, st := mustGet(t, c, base+"/x"); string(data) != "x1" || st.Version != 1 {
		t.Fatalf("x after multi: %q version %d", data, st.Version)
	}
	if res, err := c.Multi(ctx); err != nil || len(res) != 0 {
		t.Fatalf("empty Multi = %v, %v", res, err)
	}
}

func testMultiAllOrNothing(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	mustCreate(t, c, base+"/x", []byte("x0"), 0)
	mustCreate(t, c, base+"/y", nil, 0)
	mustCreate(t, c, base+"/full", nil, 0)
	mustCreate(t, c, base+"/full/child", nil, 0)

	// Each list starts with writes that would succeed alone.
	head := []Op{
		CreateOp(base+"/new", []byte("n"), 0),
		CreateOp(base+"/new/child", nil, 0),
		SetOp(base+"/x", []byte("x1"), 0),
		DeleteOp(base+"/y", AnyVersion),
	}
	cases := []struct {
		name string
		last Op
		want error
	}{
		{"failing check", CheckOp(base+"/x", 5), ErrBadVersion},
		{"check of missing node", CheckOp(base+"/missing", AnyVersion), ErrNoNode},
		{"create existing", CreateOp(base+"/full", nil, 0), ErrNodeExists},
		{"create without parent", CreateOp(base+"/missing/child", nil, 0), ErrNoParent},
		{"set stale version", SetOp(base+"/x", nil, 0), ErrBadVersion}, // x is at 1 after head
		{"delete non-empty", DeleteOp(base+"/full", AnyVersion), ErrNotEmpty},
		{"delete what head deleted", DeleteOp(base+"/y", AnyVersion), ErrNoNode},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops := append(slices.Clone(head), tc.last)
			res, err := c.Multi(ctx, ops...)
			if err == nil {
				t.Fatalf("Multi succeeded: %v", res)
			}
			wantErr(t, "Multi", err, tc.want)
			var me *MultiError
			if !errors.As(err, &me) || me.Index != len(head) {
				t.Fatalf("error %v: want a *MultiError for op %d", err, len(head))
			}
			mustExist(t, c, base+"/new", false)
			mustExist(t, c, base+"/y", true)
			if data, st := mustGet(t, c, base+"/x"); string(data) != "x0" || st.Version != 0 {
				t.Fatalf("x after failed multi: %q version %d", data, st.Version)
			}
		})
	}
}

func testCASRace(t *testing.T, newSession newSessionFunc) {
	const workers = 16
	a, _ := newSession(t)
	b, _ := newSession(t)
	base := testBase(t, a)
	counter := base + "/counter"
	mustCreate(t, a, counter, []byte("0"), 0)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards failures and retries
		failures []error
		retries  int
	)
	for w := range workers {
		c := []Coordinator{a, b}[w%2]
		wg.Go(func() {
			for attempt := 0; ; attempt++ {
				if attempt == 1000 {
					mu.Lock()
					failures = append(failures, errors.New("no increment after 1000 attempts"))
					mu.Unlock()
					return
				}
				data, st, err := c.Get(t.Context(), counter)
				if err == nil {
					var n int
					if n, err = strconv.Atoi(string(data)); err == nil {
						// Let the others read the same version, so that the
						// in-process store sees conflicts too.
						runtime.Gosched()
						_, err = c.Set(t.Context(), counter, []byte(strconv.Itoa(n+1)), st.Version)
					}
				}
				if err == nil {
					return
				}
				mu.Lock()
				if errors.Is(err, ErrBadVersion) {
					retries++
					mu.Unlock()
					continue
				}
				failures = append(failures, err)
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d workers failed, first: %v", len(failures), failures[0])
	}
	data, st := mustGet(t, b, counter)
	if string(data) != strconv.Itoa(workers) || st.Version != workers {
		t.Fatalf("counter %q version %d, want %d increments", data, st.Version, workers)
	}
	t.Logf("%d increments, %d version conflicts retried", workers, retries)
}

// testPipelined: many calls made at once through Pipeline on one handle each
// get their own answer, and a failing one is Pipeline's error.
func testPipelined(t *testing.T, newSession newSessionFunc) {
	ctx := t.Context()
	c, _ := newSession(t)
	base := testBase(t, c)
	const n = 500
	err := Pipeline(ctx, n, 0, func(ctx context.Context, i int) error {
		_, err := c.Create(ctx, fmt.Sprintf("%s/n%03d", base, i), []byte(strconv.Itoa(i)), 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, n)
	err = Pipeline(ctx, n, 16, func(ctx context.Context, i int) error {
		data, _, err := c.Get(ctx, fmt.Sprintf("%s/n%03d", base, i))
		got[i] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g != strconv.Itoa(i) {
			t.Fatalf("node %d holds %q", i, g)
		}
	}
	err = Pipeline(ctx, n, 0, func(ctx context.Context, i int) error {
		if i == n/2 {
			_, _, err := c.Get(ctx, base+"/absent")
			return err
		}
		_, _, err := c.Get(ctx, fmt.Sprintf("%s/n%03d", base, i))
		return err
	})
	wantErr(t, "a pipeline with one read of an absent node", err, ErrNoNode)
}
