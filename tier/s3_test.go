package tier

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
)

// s3Options returns options for the test S3 server under a fresh random
// prefix, so that runs (and tests) never see each other's objects.
func s3Options(t *testing.T) S3Options {
	t.Helper()
	cfg := testsvc.S3(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return S3Options{
		Endpoint:  cfg.Endpoint,
		Bucket:    cfg.Bucket,
		Prefix:    fmt.Sprintf("tier-test/%s-%s", time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(rnd[:])),
		AccessKey: cfg.AccessKey,
		SecretKey: cfg.SecretKey,
		Region:    cfg.Region,
	}
}

// newTestS3 opens an S3 bucket and deletes what the test left under its prefix.
func newTestS3(t *testing.T, opts S3Options) *S3 {
	t.Helper()
	bkt, err := NewS3(t.Context(), opts)
	if err != nil {
		t.Fatalf("NewS3(%s/%s): %v", opts.Endpoint, opts.Bucket, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var keys []string
		if err := bkt.List(ctx, "", func(info ObjectInfo) error { keys = append(keys, info.Key); return nil }); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, k := range keys {
			if err := bkt.Delete(ctx, k); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return bkt
}

func TestS3Acceptance(t *testing.T) {
	AcceptanceTest(t, newTestS3(t, s3Options(t)))
}

// TestS3Multipart checks that objects above PartSize really go up in parts:
// S3's ETag of an N-part object ends in "-N".
func TestS3Multipart(t *testing.T) {
	opts := s3Options(t)
	opts.PartSize = 5 << 20
	bkt := newTestS3(t, opts)
	for _, tc := range []struct {
		size  int
		parts int // 0: a single PUT
	}{
		{5 << 20, 0},
		{5<<20 + 1, 2},
		{12 << 20, 3},
	} {
		for _, via := range []string{"ReaderAt", "stream"} {
			name := fmt.Sprintf("%d-%s", tc.size, via)
			t.Run(name, func(t *testing.T) {
				data := randBytes(uint64(tc.size), tc.size)
				var r io.Reader = bytes.NewReader(data)
				if via == "stream" {
					r = plainReader{r}
				}
				if err := bkt.Put(t.Context(), name, r, int64(tc.size)); err != nil {
					t.Fatal(err)
				}
				info := mustStat(t, bkt, name)
				_, suffix, multi := strings.Cut(info.ETag, "-")
				switch {
				case tc.parts == 0 && multi:
					t.Fatalf("ETag %q: a %d-byte object went multipart", info.ETag, tc.size)
				case tc.parts > 0 && suffix != fmt.Sprint(tc.parts):
					t.Fatalf("ETag %q: want a %d-part upload", info.ETag, tc.parts)
				}
				if !info.HasCRC64NVME || info.CRC64NVME != crcOf(data) {
					t.Fatalf("Stat: CRC64NVME %016x (reported %v), want %016x", info.CRC64NVME, info.HasCRC64NVME, crcOf(data))
				}
				equalBytes(t, "Get", mustGet(t, bkt, name), data)
			})
		}
	}

	// The default part size is 16 MiB: 24 MiB goes up in 2 parts.
	def := newTestS3(t, s3Options(t))
	data := randBytes(24, 24<<20)
	mustPut(t, def, "default.log", data)
	if etag := mustStat(t, def, "default.log").ETag; !strings.HasSuffix(etag, "-2") {
		t.Fatalf("24 MiB with the default part size: ETag %q, want a 2-part upload", etag)
	}
}

// TestS3CutUpload breaks a multipart upload after its first part: the Put
// fails, no object appears, and minio-go aborts the upload so no parts are
// left behind.
func TestS3CutUpload(t *testing.T) {
	opts := s3Options(t)
	opts.PartSize = 5 << 20
	inner := newTestS3(t, opts)
	bkt := NewFaultBucket(inner)
	data := randBytes(9, 12<<20)
	for _, via := range []string{"ReaderAt", "stream"} {
		key := "cut-" + via
		var r io.Reader = bytes.NewReader(data)
		if via == "stream" {
			r = plainReader{r}
		}
		bkt.CutNext(OpPut, 1, 6<<20)
		err := bkt.Put(t.Context(), key, r, int64(len(data)))
		if !IsUnavailable(err) {
			t.Fatalf("cut Put via %s: %v, want ErrUnavailable", via, err)
		}
		wantNotExist(t, bkt, key)
	}
	// minio-go aborts in the background of the failed call; give it a moment.
	testwait.Check(t, 10*time.Second, "the failed multipart uploads to be aborted", func() error {
		var left []string
		for u := range inner.client.ListIncompleteUploads(t.Context(), opts.Bucket, opts.Prefix+"/", true) {
			if u.Err != nil {
				t.Fatalf("ListIncompleteUploads: %v", u.Err)
			}
			left = append(left, u.Key)
		}
		if len(left) > 0 {
			return fmt.Errorf("multipart uploads left behind: %q", left)
		}
		return nil
	})
}

// TestS3Prefix checks that the prefix isolates buckets and is stripped from
// listed keys.
func TestS3Prefix(t *testing.T) {
	base := s3Options(t)
	whole := newTestS3(t, base)
	one, two := base, base
	one.Prefix, two.Prefix = "/"+base.Prefix+"/one/", base.Prefix+"/two"
	b1, b2 := newTestS3(t, one), newTestS3(t, two)
	mustPut(t, b1, "k", []byte("one"))
	mustPut(t, b2, "k", []byte("two"))
	equalBytes(t, "Get via prefix one", mustGet(t, b1, "k"), []byte("one"))
	equalBytes(t, "Get via prefix two", mustGet(t, b2, "k"), []byte("two"))
	if got := keysOf(listAll(t, b1, "")); len(got) != 1 || got[0] != "k" {
		t.Fatalf("List via prefix one: %q", got)
	}
	if got := keysOf(listAll(t, whole, "")); strings.Join(got, " ") != "one/k two/k" {
		t.Fatalf("List of the parent prefix: %q", got)
	}
}

func TestS3Options(t *testing.T) {
	good := S3Options{Endpoint: "127.0.0.1:9000", Bucket: "b"}
	if err := good.WithDefaults().Validate(); err != nil {
		t.Fatalf("minimal options: %v", err)
	}
	d := good.WithDefaults()
	if d.Region != "us-east-1" || d.PartSize != 16<<20 || d.MaxAttempts != 3 || d.TLS {
		t.Fatalf("defaults: %+v", d)
	}
	for _, tc := range []struct {
		name string
		edit func(*S3Options)
	}{
		{"no endpoint", func(o *S3Options) { o.Endpoint = "" }},
		{"scheme", func(o *S3Options) { o.Endpoint = "http://127.0.0.1:9000" }},
		{"no port", func(o *S3Options) { o.Endpoint = "127.0.0.1" }},
		{"no bucket", func(o *S3Options) { o.Bucket = "" }},
		{"bad prefix", func(o *S3Options) { o.Prefix = "a/../b" }},
		{"key without secret", func(o *S3Options) { o.AccessKey = "k" }},
		{"small parts", func(o *S3Options) { o.PartSize = 1 << 20 }},
		{"negative attempts", func(o *S3Options) { o.MaxAttempts = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if err := o.WithDefaults().Validate(); err == nil {
				t.Fatalf("%+v: no error", o)
			}
			if _, err := NewS3(t.Context(), o); err == nil {
				t.Fatalf("NewS3(%+v): no error", o)
			}
		})
	}
}

// TestS3Setup checks NewS3's errors against the real server.
func TestS3Setup(t *testing.T) {
	opts := s3Options(t)

	missing := opts
	missing.Bucket = "no-such-bucket-" + strings.ToLower(hex.EncodeToString([]byte(t.Name()))[:8])
	_, err := NewS3(t.Context(), missing)
	if err == nil || !strings.Contains(err.Error(), missing.Bucket) || IsUnavailable(err) {
		t.Fatalf("NewS3 of a missing bucket: %v, want a permanent error naming it", err)
	}

	badKey := opts
	badKey.SecretKey = "wrong"
	_, err = NewS3(t.Context(), badKey)
	if err == nil || IsUnavailable(err) || IsNotExist(err) {
		t.Fatalf("NewS3 with a wrong secret: %v, want a permanent error", err)
	}

	// Nothing listens: unavailable, quickly.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := opts
	closed.Endpoint = l.Addr().String()
	closed.MaxAttempts = 1
	l.Close()
	_, err = NewS3(t.Context(), closed)
	if !IsUnavailable(err) {
		t.Fatalf("NewS3 of a closed port: %v, want ErrUnavailable", err)
	}
}

// TestS3Classify runs the S3 bucket against a fake server that answers what
// the real one will not on demand: 5xx, throttling, a hang, a body cut short,
// access denied.
func TestS3Classify(t *testing.T) {
	const bucket = "fake"
	var modeVal atomic.Value // string: how the server answers now
	modeVal.Store("")
	stop := make(chan struct{}) // ends hanging handlers
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := modeVal.Load().(string)
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == bucket {
			return // BucketExists: yes
		}
		s3Error := func(status int, code string) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
			}
		}
		switch mode {
		case "503":
			s3Error(http.StatusServiceUnavailable, "ServiceUnavailable")
		case "500":
			s3Error(http.StatusInternalServerError, "InternalError")
		case "slowdown":
			s3Error(http.StatusServiceUnavailable, "SlowDown")
		case "429":
			s3Error(http.StatusTooManyRequests, "TooManyRequests")
		case "403":
			s3Error(http.StatusForbidden, "AccessDenied")
		case "hang":
			// The server notices a client that hangs up only once it has
			// read the request body, which a hanging handler never does.
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		case "cut":
			if r.Method != http.MethodGet {
				s3Error(http.StatusNotImplemented, "NotImplemented")
				return
			}
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(make([]byte, 10))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drop the connection mid-body
		}
	}))
	defer srv.Close()
	defer close(stop) // before srv.Close, which waits for the handlers
	bkt, err := NewS3(t.Context(), S3Options{
		Endpoint:    strings.TrimPrefix(srv.URL, "http://"),
		Bucket:      bucket,
		AccessKey:   "k",
		SecretKey:   "s",
		MaxAttempts: 2,
	})
	if err != nil {
		t.Fatalf("NewS3 against the fake: %v", err)
	}

	ops := map[string]func(ctx context.Context) error{
		"put": func(ctx context.Context) error { return bkt.Put(ctx, "k", bytes.NewReader([]byte("x")), 1) },
		"put stream": func(ctx context.Context) error {
			return bkt.Put(ctx, "k", plainReader{bytes.NewReader([]byte("x"))}, 1)
		},
		"get":      func(ctx context.Context) error { return readErr(bkt.Get(ctx, "k")) },
		"getrange": func(ctx context.Context) error { return readErr(bkt.GetRange(ctx, "k", 5, 10)) },
		"stat":     func(ctx context.Context) error { _, err := bkt.Stat(ctx, "k"); return err },
		"list":     func(ctx context.Context) error { return bkt.List(ctx, "", func(ObjectInfo) error { return nil }) },
		"delete":   func(ctx context.Context) error { return bkt.Delete(ctx, "k") },
	}
	for _, tc := range []struct {
		mode        string
		unavailable bool
		ops         []string // "" = all
	}{
		{"503", true, nil},
		{"500", true, nil},
		{"slowdown", true, nil},
		{"429", true, nil},
		{"403", false, nil},
		{"hang", true, nil},
		{"cut", true, []string{"get", "getrange"}},
	} {
		modeVal.Store(tc.mode)
		for name, op := range ops {
			if tc.ops != nil && !strings.Contains(strings.Join(tc.ops, ","), name) {
				continue
			}
			t.Run(tc.mode+"/"+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				err := op(ctx)
				if err == nil {
					t.Fatal("no error")
				}
				if IsUnavailable(err) != tc.unavailable || IsNotExist(err) {
					t.Fatalf("%v: IsUnavailable = %v, want %v", err, IsUnavailable(err), tc.unavailable)
				}
				if tc.mode == "hang" && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%v: want context.DeadlineExceeded in the chain", err)
				}
			})
		}
	}
}

// readErr reads a body to its end and returns the first error.
func readErr(rc io.ReadCloser, err error) error {
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}
