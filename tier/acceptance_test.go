package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// AcceptanceTest holds bkt to the Bucket contract (bucket.go). bkt must start
// empty; every subtest works under a key prefix of its own.
func AcceptanceTest(t *testing.T, bkt Bucket) {
	t.Helper()
	if err := bkt.List(t.Context(), "", func(info ObjectInfo) error {
		return fmt.Errorf("bucket is not empty: it holds %q", info.Key)
	}); err != nil {
		t.Fatal(err)
	}
	t.Run("PutGetStat", func(t *testing.T) { accPutGetStat(t, bkt) })
	t.Run("Ranges", func(t *testing.T) { accRanges(t, bkt) })
	t.Run("Overwrite", func(t *testing.T) { accOverwrite(t, bkt) })
	t.Run("Empty", func(t *testing.T) { accEmpty(t, bkt) })
	t.Run("NotFound", func(t *testing.T) { accNotFound(t, bkt) })
	t.Run("Delete", func(t *testing.T) { accDelete(t, bkt) })
	t.Run("List", func(t *testing.T) { accList(t, bkt) })
	t.Run("KeyClash", func(t *testing.T) { accKeyClash(t, bkt) })
	t.Run("InvalidKeys", func(t *testing.T) { accInvalidKeys(t, bkt) })
	t.Run("OddKeys", func(t *testing.T) { accOddKeys(t, bkt) })
	t.Run("ExactBody", func(t *testing.T) { accExactBody(t, bkt) })
	t.Run("Cancelled", func(t *testing.T) { accCancelled(t, bkt) })
	t.Run("Large", func(t *testing.T) { accLarge(t, bkt) })
	t.Run("ConcurrentPuts", func(t *testing.T) { accConcurrentPuts(t, bkt) })
	t.Run("NoPartialReads", func(t *testing.T) { accNoPartialReads(t, bkt) })
}

// ---- helpers ----

// randBytes returns n pseudo-random bytes, the same for the same seed.
func randBytes(seed uint64, n int) []byte {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

// plainReader hides every method but Read (no ReaderAt, no Seeker, no WriterTo).
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func crcOf(b []byte) uint64 {
	h := NewCRC64NVME()
	h.Write(b)
	return h.Sum64()
}

func mustPut(t testing.TB, bkt Bucket, key string, data []byte) {
	t.Helper()
	if err := bkt.Put(t.Context(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func readClose(t testing.TB, rc io.ReadCloser) []byte {
	t.Helper()
	b, err := io.ReadAll(rc)
	if cerr := rc.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

func mustGet(t testing.TB, bkt Bucket, key string) []byte {
	t.Helper()
	rc, err := bkt.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return readClose(t, rc)
}

func mustStat(t testing.TB, bkt Bucket, key string) ObjectInfo {
	t.Helper()
	info, err := bkt.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return info
}

func listAll(t testing.TB, bkt Bucket, prefix string) []ObjectInfo {
	t.Helper()
	var out []ObjectInfo
	if err := bkt.List(t.Context(), prefix, func(info ObjectInfo) error {
		out = append(out, info)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return out
}

func keysOf(infos []ObjectInfo) []string {
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}

func equalBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: got %d bytes, want %d; first difference at byte %d", what, len(got), len(want), i)
	}
}

func wantErr(t testing.TB, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, sentinel)
	}
}

func wantNotExist(t testing.TB, bkt Bucket, key string) {
	t.Helper()
	_, err := bkt.Stat(t.Context(), key)
	wantErr(t, fmt.Sprintf("Stat(%q)", key), err, ErrNotExist)
	if !IsNotExist(err) {
		t.Fatalf("IsNotExist(%v) = false", err)
	}
	rc, err := bkt.Get(t.Context(), key)
	if err == nil {
		rc.Close()
	}
	wantErr(t, fmt.Sprintf("Get(%q)", key), err, ErrNotExist)
	rc, err = bkt.GetRange(t.Context(), key, 0, 1)
	if err == nil {
		rc.Close()
	}
	wantErr(t, fmt.Sprintf("GetRange(%q)", key), err, ErrNotExist)
}

// checkInfo checks what Stat says about an object just written with data.
func checkInfo(t testing.TB, info ObjectInfo, key string, data []byte, before, after time.Time) {
	t.Helper()
	if info.Key != key || info.Size != int64(len(data)) {
		t.Fatalf("Stat: key %q size %d, want %q %d", info.Key, info.Size, key, len(data))
	}
	// Stores report whole seconds at least; allow a little clock slack.
	if info.LastModified.Before(before.Add(-2*time.Second)) || info.LastModified.After(after.Add(2*time.Second)) {
		t.Fatalf("Stat(%q): LastModified %v outside [%v, %v]", key, info.LastModified, before, after)
	}
	if info.HasCRC64NVME && info.CRC64NVME != crcOf(data) {
		t.Fatalf("Stat(%q): CRC64NVME %016x, want %016x", key, info.CRC64NVME, crcOf(data))
	}
}

// ---- subtests ----

func accPutGetStat(t *testing.T, bkt Bucket) {
	data := randBytes(1, 1000)
	before := time.Now()
	mustPut(t, bkt, "pgs/segment.log", data)
	after := time.Now()
	equalBytes(t, "Get", mustGet(t, bkt, "pgs/segment.log"), data)
	info := mustStat(t, bkt, "pgs/segment.log")
	checkInfo(t, info, "pgs/segment.log", data, before, after)
	t.Logf("stat: etag %q, crc64nvme reported %v", info.ETag, info.HasCRC64NVME)

	// The same bytes again: idempotent.
	mustPut(t, bkt, "pgs/segment.log", data)
	equalBytes(t, "Get after the same Put again", mustGet(t, bkt, "pgs/segment.log"), data)
	if again := mustStat(t, bkt, "pgs/segment.log"); again.Size != info.Size || again.ETag != info.ETag {
		t.Fatalf("Stat after the same Put: %+v, want size and etag of %+v", again, info)
	}
}

func accRanges(t *testing.T, bkt Bucket) {
	const size = 100 << 10
	data := randBytes(2, size)
	mustPut(t, bkt, "ranges/obj", data)
	for _, tc := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"start", 0, 100, data[:100]},
		{"first byte", 0, 1, data[:1]},
		{"middle", 5000, 777, data[5000:5777]},
		{"end", size - 10, 10, data[size-10:]},
		{"last byte", size - 1, 1, data[size-1:]},
		{"whole", 0, size, data},
		{"past the end is short", size - 10, 100, data[size-10:]},
		{"huge length is short", 50000, 1<<63 - 1, data[50000:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := bkt.GetRange(t.Context(), "ranges/obj", tc.off, tc.length)
			if err != nil {
				t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.length, err)
			}
			equalBytes(t, fmt.Sprintf("GetRange(%d, %d)", tc.off, tc.length), readClose(t, rc), tc.want)
		})
	}
	for _, tc := range []struct {
		name        string
		off, length int64
	}{
		{"at the end", size, 1},
		{"after the end", size + 1000, 10},
		{"negative offset", -1, 10},
		{"zero length", 0, 0},
		{"negative length", 10, -5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := bkt.GetRange(t.Context(), "ranges/obj", tc.off, tc.length)
			if err == nil {
				rc.Close()
			}
			wantErr(t, fmt.Sprintf("GetRange(%d, %d)", tc.off, tc.length), err, ErrInvalidRange)
		})
	}
	// Arguments are checked before the store is asked, even for a missing key.
	_, err := bkt.GetRange(t.Context(), "ranges/missing", 0, 0)
	wantErr(t, "GetRange(missing, 0, 0)", err, ErrInvalidRange)
}

func accOverwrite(t *testing.T, bkt Bucket) {
	a, b := randBytes(3, 3000), randBytes(4, 1234)
	mustPut(t, bkt, "over/k", a)
	infoA := mustStat(t, bkt, "over/k")
	before := time.Now()
	mustPut(t, bkt, "over/k", b)
	after := time.Now()
	equalBytes(t, "Get after overwrite", mustGet(t, bkt, "over/k"), b)
	infoB := mustStat(t, bkt, "over/k")
	checkInfo(t, infoB, "over/k", b, before, after)
	if infoA.ETag != "" && infoA.ETag == infoB.ETag {
		t.Fatalf("ETag %q did not change with the content", infoA.ETag)
	}
	if got := listAll(t, bkt, "over/"); len(got) != 1 || got[0].Size != int64(len(b)) {
		t.Fatalf("List after overwrite: %+v", got)
	}
}

func accEmpty(t *testing.T, bkt Bucket) {
	before := time.Now()
	if err := bkt.Put(t.Context(), "empty/obj", bytes.NewReader(nil), 0); err != nil {
		t.Fatalf("Put empty: %v", err)
	}
	if err := bkt.Put(t.Context(), "empty/plain", plainReader{strings.NewReader("")}, 0); err != nil {
		t.Fatalf("Put empty from a plain reader: %v", err)
	}
	after := time.Now()
	for _, key := range []string{"empty/obj", "empty/plain"} {
		if got := mustGet(t, bkt, key); len(got) != 0 {
			t.Fatalf("Get(%q) = %d bytes, want 0", key, len(got))
		}
		checkInfo(t, mustStat(t, bkt, key), key, nil, before, after)
		rc, err := bkt.GetRange(t.Context(), key, 0, 1)
		if err == nil {
			rc.Close()
		}
		wantErr(t, "GetRange of an empty object", err, ErrInvalidRange)
	}
	got := listAll(t, bkt, "empty/")
	if !slices.Equal(keysOf(got), []string{"empty/obj", "empty/plain"}) || got[0].Size != 0 || got[1].Size != 0 {
		t.Fatalf("List(empty/) = %+v", got)
	}
}

func accNotFound(t *testing.T, bkt Bucket) {
	wantNotExist(t, bkt, "nf/missing")
	mustPut(t, bkt, "nf/file", []byte("x"))
	wantNotExist(t, bkt, "nf/file/child") // a parent of the key is an object
	mustPut(t, bkt, "nf/dir/x", []byte("y"))
	wantNotExist(t, bkt, "nf/dir") // a folder of keys is no object
	wantNotExist(t, bkt, "nf/di")
	wantNotExist(t, bkt, "nf/dir/x/y")
}

func accDelete(t *testing.T, bkt Bucket) {
	ctx := t.Context()
	mustPut(t, bkt, "del/a/b", []byte("1"))
	mustPut(t, bkt, "del/a/c", []byte("2"))
	if err := bkt.Delete(ctx, "del/a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantNotExist(t, bkt, "del/a/b")
	for range 2 {
		if err := bkt.Delete(ctx, "del/a/b"); err != nil {
			t.Fatalf("Delete of a deleted key: %v", err)
		}
	}
	if err := bkt.Delete(ctx, "del/never"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if err := bkt.Delete(ctx, "del/a"); err != nil { // a folder, not an object
		t.Fatalf("Delete of a folder key: %v", err)
	}
	if err := bkt.Delete(ctx, "del/a/c/d"); err != nil { // under an object
		t.Fatalf("Delete of a key under an object: %v", err)
	}
	equalBytes(t, "Get of a sibling", mustGet(t, bkt, "del/a/c"), []byte("2"))
	if err := bkt.Delete(ctx, "del/a/c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := listAll(t, bkt, "del/"); len(got) != 0 {
		t.Fatalf("List after deleting everything: %v", keysOf(got))
	}
	// With its folder gone, the folder's name can be an object.
	mustPut(t, bkt, "del/a", []byte("3"))
	equalBytes(t, "Get", mustGet(t, bkt, "del/a"), []byte("3"))
}

func accList(t *testing.T, bkt Bucket) {
	// Byte order: '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < '0' < 'a': a store
	// that walks directories in name order gets this wrong.
	keys := []string{
		"list/x-1", "list/x.2", "list/x/y/z", "list/x/y.w", "list/x/y-v/0", "list/xa",
		"list/y/1", "list/y/10", "list/y/2", "list/y/1.5/a.b", "list/z", "list/00000000000000000100.log",
		"list/00000000000000000020.log",
	}
	sizes := map[string]int{}
	for i, k := range keys {
		sizes[k] = 10 + i
		mustPut(t, bkt, k, randBytes(uint64(100+i), 10+i))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	match := func(prefix string) []string {
		var out []string
		for _, k := range sorted {
			if strings.HasPrefix(k, prefix) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, prefix := range []string{
		"list/", "list", "list/x", "list/x/", "list/x/y", "list/x/y/", "list/x/y/z", "list/y/1",
		"list/y/1.", "list/0", "list/nothing", "list/x/y/z/", "list/x/../", "list//", "list/./x",
	} {
		t.Run(prefix, func(t *testing.T) {
			got := listAll(t, bkt, prefix)
			if !slices.Equal(keysOf(got), match(prefix)) {
				t.Fatalf("List(%q) = %q, want %q", prefix, keysOf(got), match(prefix))
			}
			for _, info := range got {
				if info.Size != int64(sizes[info.Key]) || info.HasCRC64NVME {
					t.Fatalf("List(%q): %+v: want size %d and no checksum", prefix, info, sizes[info.Key])
				}
			}
		})
	}
	// Everything, sorted, ours included.
	all := keysOf(listAll(t, bkt, ""))
	if !slices.IsSorted(all) {
		t.Fatalf("List(\"\") is not sorted: %q", all)
	}
	for _, k := range keys {
		if _, ok := slices.BinarySearch(all, k); !ok {
			t.Fatalf("List(\"\") misses %q", k)
		}
	}
	// fn's error stops the listing and comes back unchanged.
	errStop := errors.New("stop here")
	calls := 0
	err := bkt.List(t.Context(), "list/", func(ObjectInfo) error { calls++; return errStop })
	if err != errStop || calls != 1 {
		t.Fatalf("List with a failing fn: err %v after %d calls, want errStop after 1", err, calls)
	}
	// fn may call the bucket.
	if err := bkt.List(t.Context(), "list/y/", func(info ObjectInfo) error {
		_, err := bkt.Stat(t.Context(), info.Key)
		return err
	}); err != nil {
		t.Fatalf("List with Stat inside fn: %v", err)
	}
}

func accKeyClash(t *testing.T, bkt Bucket) {
	ctx := t.Context()
	mustPut(t, bkt, "clash/file", []byte("f"))
	err := bkt.Put(ctx, "clash/file/child", bytes.NewReader([]byte("c")), 1)
	wantErr(t, "Put under an object", err, ErrInvalidKey)
	mustPut(t, bkt, "clash/dir/child", []byte("c"))
	err = bkt.Put(ctx, "clash/dir", bytes.NewReader([]byte("d")), 1)
	wantErr(t, "Put of a folder's name", err, ErrInvalidKey)
	if got := keysOf(listAll(t, bkt, "clash/")); !slices.Equal(got, []string{"clash/dir/child", "clash/file"}) {
		t.Fatalf("List after refused Puts: %q", got)
	}
}

func accInvalidKeys(t *testing.T, bkt Bucket) {
	ctx := t.Context()
	for _, key := range []string{
		"", "/", "/a", "a/", "a//b", ".", "..", "./a", "a/.", "a/./b", "a/../b", "../a",
		"a\x00b", "a\nb", "a\x7fb", "bad\xffutf8", strings.Repeat("s", 256), strings.Repeat("a/", 512) + "b",
	} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			wantErr(t, "CheckKey", CheckKey(key), ErrInvalidKey)
			wantErr(t, "Put", bkt.Put(ctx, key, bytes.NewReader([]byte("x")), 1), ErrInvalidKey)
			_, err := bkt.Get(ctx, key)
			wantErr(t, "Get", err, ErrInvalidKey)
			_, err = bkt.GetRange(ctx, key, 0, 1)
			wantErr(t, "GetRange", err, ErrInvalidKey)
			_, err = bkt.Stat(ctx, key)
			wantErr(t, "Stat", err, ErrInvalidKey)
			wantErr(t, "Delete", bkt.Delete(ctx, key), ErrInvalidKey)
		})
	}
	// Nothing was stored by any of them.
	if got := listAll(t, bkt, ""); slices.ContainsFunc(got, func(info ObjectInfo) bool { return CheckKey(info.Key) != nil }) {
		t.Fatalf("an invalid key was stored: %q", keysOf(got))
	}
}

func accOddKeys(t *testing.T, bkt Bucket) {
	keys := []string{
		"odd/a.b/c.d", "odd/.hidden/x", "odd/..x/y..", "odd/with space", "odd/plus+eq=amp&",
		"odd/pct%20", "odd/q?mark#hash", "odd/ünïcödé/ключ", "odd/star*tilde~", "odd/" + strings.Repeat("s", 255),
		"odd/00000000000000001234-00000007-0123456789abcdef.log",
	}
	for i, k := range keys {
		mustPut(t, bkt, k, []byte(k))
		if got := mustGet(t, bkt, k); string(got) != k {
			t.Fatalf("key %d %q: Get = %q", i, k, got)
		}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	if got := keysOf(listAll(t, bkt, "odd/")); !slices.Equal(got, sorted) {
		t.Fatalf("List(odd/) = %q, want %q", got, sorted)
	}
}

func accExactBody(t *testing.T, bkt Bucket) {
	ctx := t.Context()
	old := []byte("the old content")
	data := randBytes(5, 4096)
	for _, tc := range []struct {
		name string
		r    func(b []byte) io.Reader
	}{
		{"ReaderAt", func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"stream", func(b []byte) io.Reader { return plainReader{bytes.NewReader(b)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, fresh := "exact/"+tc.name+"/k", "exact/"+tc.name+"/fresh"
			mustPut(t, bkt, key, old)
			// Short: fails, and leaves the old object (or none) in place.
			err := bkt.Put(ctx, key, tc.r(data[:100]), 200)
			wantErr(t, "Put of a short body", err, io.ErrUnexpectedEOF)
			equalBytes(t, "Get after a short Put", mustGet(t, bkt, key), old)
			err = bkt.Put(ctx, fresh, tc.r(data[:100]), 200)
			wantErr(t, "Put of a short body", err, io.ErrUnexpectedEOF)
			wantNotExist(t, bkt, fresh)
			// Long: only size bytes are stored, and no more are read.
			r := tc.r(data)
			if err := bkt.Put(ctx, key, r, 1000); err != nil {
				t.Fatalf("Put of 1000 of %d bytes: %v", len(data), err)
			}
			equalBytes(t, "Get after a long Put", mustGet(t, bkt, key), data[:1000])
			// From the reader's current position, not its start.
			br := bytes.NewReader(data)
			if _, err := br.Seek(3000, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			var from io.Reader = br
			if tc.name == "stream" {
				from = plainReader{br}
			}
			if err := bkt.Put(ctx, key, from, 1000); err != nil {
				t.Fatalf("Put from offset 3000: %v", err)
			}
			equalBytes(t, "Get after Put from offset 3000", mustGet(t, bkt, key), data[3000:4000])
		})
	}
}

func accCancelled(t *testing.T, bkt Bucket) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := bkt.Put(ctx, "cancel/k", bytes.NewReader([]byte("x")), 1); err == nil {
		t.Fatal("Put with a cancelled ctx succeeded")
	} else if !errors.Is(err, context.Canceled) || IsUnavailable(err) {
		t.Fatalf("Put with a cancelled ctx: %v, want context.Canceled and not ErrUnavailable", err)
	}
	wantNotExist(t, bkt, "cancel/k")
	mustPut(t, bkt, "cancel/k", []byte("x"))
	if _, err := bkt.Stat(ctx, "cancel/k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stat with a cancelled ctx: %v", err)
	}
	// A deadline that passed is the store being too slow: ErrUnavailable.
	dctx, dcancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer dcancel()
	_, err := bkt.Stat(dctx, "cancel/k")
	if !errors.Is(err, context.DeadlineExceeded) || !IsUnavailable(err) {
		t.Fatalf("Stat past its deadline: %v, want DeadlineExceeded and ErrUnavailable", err)
	}
}

// accLarge puts 24 MiB (more than S3's default 16 MiB part size, so S3 goes
// multipart) through both of Put's reading paths and checks every byte.
func accLarge(t *testing.T, bkt Bucket) {
	const size = 24 << 20
	data := randBytes(6, size)
	want := crcOf(data)
	for _, tc := range []struct {
		name string
		r    io.Reader
	}{
		{"ReaderAt", func() io.Reader {
			// Starts 1 MiB into the reader: Put must read from the position.
			r := bytes.NewReader(append(randBytes(7, 1<<20), data...))
			_, _ = r.Seek(1<<20, io.SeekStart)
			return r
		}()},
		{"stream", plainReader{bytes.NewReader(data)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "large/" + tc.name + ".log"
			start := time.Now()
			if err := bkt.Put(t.Context(), key, tc.r, size); err != nil {
				t.Fatalf("Put 24 MiB: %v", err)
			}
			put := time.Since(start)
			start = time.Now()
			got := mustGet(t, bkt, key)
			get := time.Since(start)
			equalBytes(t, "Get 24 MiB", got, data)
			info := mustStat(t, bkt, key)
			if info.Size != size {
				t.Fatalf("Stat size %d, want %d", info.Size, size)
			}
			if info.HasCRC64NVME && info.CRC64NVME != want {
				t.Fatalf("Stat CRC64NVME %016x, want %016x", info.CRC64NVME, want)
			}
			// A range across the 16 MiB part boundary.
			rc, err := bkt.GetRange(t.Context(), key, 16<<20-1000, 5000)
			if err != nil {
				t.Fatalf("GetRange across the part boundary: %v", err)
			}
			equalBytes(t, "GetRange across the part boundary", readClose(t, rc), data[16<<20-1000:16<<20+4000])
			t.Logf("24 MiB from %s: put %v (%.0f MiB/s), get %v (%.0f MiB/s); etag %q, crc64nvme reported %v",
				tc.name, put.Round(time.Millisecond), 24/put.Seconds(), get.Round(time.Millisecond), 24/get.Seconds(),
				info.ETag, info.HasCRC64NVME)
		})
	}
	// A short stream of a multipart size fails and leaves nothing.
	err := bkt.Put(t.Context(), "large/short.log", plainReader{bytes.NewReader(data[:20<<20])}, size)
	wantErr(t, "Put of a short 24 MiB body", err, io.ErrUnexpectedEOF)
	wantNotExist(t, bkt, "large/short.log")
}

func accConcurrentPuts(t *testing.T, bkt Bucket) {
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("conc/%02d/seg.log", i)
			data := randBytes(uint64(200+i), 64<<10+i)
			if err := bkt.Put(t.Context(), key, bytes.NewReader(data), int64(len(data))); err != nil {
				errs <- fmt.Errorf("Put(%q): %w", key, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := listAll(t, bkt, "conc/")
	if len(got) != n {
		t.Fatalf("List(conc/) has %d keys, want %d: %q", len(got), n, keysOf(got))
	}
	for i, info := range got {
		if want := fmt.Sprintf("conc/%02d/seg.log", i); info.Key != want {
			t.Fatalf("List(conc/)[%d] = %q, want %q", i, info.Key, want)
		}
		equalBytes(t, info.Key, mustGet(t, bkt, info.Key), randBytes(uint64(200+i), 64<<10+i))
	}
}

// accNoPartialReads overwrites one key with two different contents while
// readers read it: every read sees one content whole.
func accNoPartialReads(t *testing.T, bkt Bucket) {
	const key = "partial/k"
	versions := [][]byte{bytes.Repeat([]byte{'a'}, 256<<10), bytes.Repeat([]byte{'b'}, 300<<10)}
	mustPut(t, bkt, key, versions[0])
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	reads := make([]int, 3)
	for r := range reads {
		wg.Go(func() {
			for ctx.Err() == nil {
				rc, err := bkt.Get(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("Get: %w", err)
					}
					return
				}
				got, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("reading: %w", err)
					}
					return
				}
				if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
					errs <- fmt.Errorf("read %d bytes that are neither version", len(got))
					return
				}
				reads[r]++
			}
		})
	}
	for i := range 20 {
		v := versions[(i+1)%2]
		if err := bkt.Put(t.Context(), key, bytes.NewReader(v), int64(len(v))); err != nil {
			t.Errorf("Put %d: %v", i, err)
			break
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("reads during 20 overwrites: %v", reads)
}
