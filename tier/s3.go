package tier

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options say how to reach an S3-compatible bucket. Zero values take the
// defaults named on each field (see WithDefaults).
type S3Options struct {
	// Endpoint is the server's host:port, without a scheme. Required.
	Endpoint string
	// Bucket must exist already; NewS3 checks. Required.
	Bucket string
	// Prefix is a folder inside the bucket under which every key is stored
	// ("tiered" stores key "a/b" as object "tiered/a/b"). It obeys the key rules
	// (CheckKey); surrounding slashes are trimmed. Default "": the bucket root.
	Prefix string
	// AccessKey and SecretKey are static AWS Signature V4 credentials. Both
	// empty means anonymous requests. Default: anonymous.
	AccessKey, SecretKey string
	// Region signs the requests. Default "us-east-1".
	Region string
	// TLS selects https. Default false (plain http, for a server on loopback).
	TLS bool
	// PartSize is the multipart part size: objects larger than PartSize are
	// uploaded in parts of PartSize bytes (several at once), smaller ones in a
	// single PUT. At least 5 MiB (S3's minimum part size), at most 5 GiB.
	// Default 16 MiB.
	PartSize int64
	// MaxAttempts bounds how often one request is tried when it fails in a
	// retriable way (5xx, throttling, network error), with jittered backoff of
	// 200 ms doubling up to 1 s between tries; requests whose body cannot be
	// rewound (a Put from a plain stream) are tried once. Default 3. The ctx of
	// each call bounds the total time anyway.
	MaxAttempts int
}

// Defaults for S3Options.
const (
	DefaultS3Region      = "us-east-1"
	DefaultS3PartSize    = 16 << 20
	DefaultS3MaxAttempts = 3

	minS3PartSize = 5 << 20
	maxS3PartSize = 5 << 30
)

// WithDefaults returns o with every zero field set to its default and the
// prefix's slashes trimmed.
func (o S3Options) WithDefaults() S3Options {
	o.Prefix = strings.Trim(o.Prefix, "/")
	if o.Region == "" {
		o.Region = DefaultS3Region
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultS3PartSize
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultS3MaxAttempts
	}
	return o
}

// Validate reports the first setting that cannot work.
func (o S3Options) Validate() error {
	if o.Endpoint == "" {
		return errors.New("tier: s3: no endpoint")
	}
	if strings.Contains(o.Endpoint, "://") {
		return fmt.Errorf("tier: s3: endpoint %q must be host:port, without a scheme (use TLS for https)", o.Endpoint)
	}
	if _, _, err := net.SplitHostPort(o.Endpoint); err != nil {
		return fmt.Errorf("tier: s3: endpoint %q is not host:port: %v", o.Endpoint, err)
	}
	if o.Bucket == "" {
		return errors.New("tier: s3: no bucket")
	}
	if o.Prefix != "" {
		if err := CheckKey(o.Prefix); err != nil {
			return fmt.Errorf("tier: s3: prefix: %w", err)
		}
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return errors.New("tier: s3: give both the access key and the secret key, or neither")
	}
	if o.PartSize < minS3PartSize || o.PartSize > maxS3PartSize {
		return fmt.Errorf("tier: s3: part size %d is outside [5 MiB, 5 GiB]", o.PartSize)
	}
	if o.MaxAttempts < 1 {
		return fmt.Errorf("tier: s3: max attempts %d < 1", o.MaxAttempts)
	}
	return nil
}

// S3 is a Bucket in an S3-compatible object store, through minio-go, with
// path-style addressing (http://endpoint/bucket/key), which every server
// accepts and which needs no DNS for the bucket.
type S3 struct {
	client *minio.Client
	core   minio.Core // the same client; its GetObject fails at once on a missing key
	opts   S3Options
	prefix string // opts.Prefix + "/", or "" for the bucket root
}

var _ Bucket = (*S3)(nil)

// NewS3 connects to the store and checks that the bucket exists: a missing
// bucket is a plain error naming it, an unreachable store an error wrapping
// ErrUnavailable.
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var creds *credentials.Credentials
	if opts.AccessKey != "" {
		creds = credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{}) // anonymous
	}
	client, err := minio.New(opts.Endpoint, &minio.Options{
		Creds:        creds,
		Secure:       opts.TLS,
		Region:       opts.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   opts.MaxAttempts,
	})
	if err != nil {
		return nil, fmt.Errorf("tier: s3 %s: %w", opts.Endpoint, err)
	}
	b := &S3{client: client, core: minio.Core{Client: client}, opts: opts}
	if opts.Prefix != "" {
		b.prefix = opts.Prefix + "/"
	}
	ok, err := client.BucketExists(ctx, opts.Bucket)
	if err != nil {
		return nil, b.fail("checking bucket of", "", err)
	}
	if !ok {
		return nil, fmt.Errorf("tier: s3 bucket %q does not exist at %s (create it first)", opts.Bucket, opts.Endpoint)
	}
	return b, nil
}

// String names the bucket for logs: s3://endpoint/bucket/prefix.
func (b *S3) String() string {
	return "s3://" + b.opts.Endpoint + "/" + b.opts.Bucket + "/" + b.opts.Prefix
}

// object returns the S3 object name of key, after checking the key.
func (b *S3) object(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if len(b.prefix)+len(key) > MaxKeyLen {
		return "", fmt.Errorf("%w %q: longer than %d bytes with the prefix %q", ErrInvalidKey, key, MaxKeyLen, b.prefix)
	}
	return b.prefix + key, nil
}

// Put implements Bucket. Objects larger than PartSize go up as a multipart
// upload, which minio-go aborts (deleting the parts) if the upload fails.
// When r is also an io.ReaderAt and io.Seeker (an *os.File, a bytes.Reader),
// its length is checked up front and the parts are read with ReadAt, several
// at once and without a buffer; any other reader is streamed through one
// PartSize buffer.
func (b *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkPut(key, size); err != nil {
		return err
	}
	name, err := b.object(key)
	if err != nil {
		return err
	}
	body, err := putBody(r, size)
	if err != nil {
		return fmt.Errorf("tier: s3 put %s: %w", b.where(name), err)
	}
	_, err = b.client.PutObject(ctx, b.opts.Bucket, name, body, size, minio.PutObjectOptions{
		PartSize:    uint64(b.opts.PartSize),
		ContentType: "application/octet-stream",
	})
	if err != nil {
		return b.fail("put", name, err)
	}
	return nil
}

// putBody turns Put's reader into what minio-go should read: exactly size
// bytes from r's current position. minio-go reads an io.ReaderAt from offset
// 0 whatever its position, so a ReaderAt is handed over as a SectionReader
// that starts where r stands.
func putBody(r io.Reader, size int64) (io.Reader, error) {
	ra, isReaderAt := r.(io.ReaderAt)
	sk, isSeeker := r.(io.Seeker)
	if isReaderAt && isSeeker {
		pos, err := sk.Seek(0, io.SeekCurrent)
		if err == nil {
			end, err := sk.Seek(0, io.SeekEnd)
			if err != nil {
				return nil, err
			}
			if _, err := sk.Seek(pos, io.SeekStart); err != nil {
				return nil, err
			}
			if end-pos < size {
				return nil, &errShortBody{got: max(end-pos, 0), want: size}
			}
			return io.NewSectionReader(ra, pos, size), nil
		}
	}
	return &exactReader{r: r, want: size}, nil
}

// PutIf stores data under key only if a condition holds, checked by the
// server atomically with the write: ifMatch "" means the key must not exist
// (If-None-Match: *), any other value that the object's current ETag equals
// it (If-Match). It returns the new object's ETag. Errors: ErrPrecondition
// when the condition does not hold (nothing stored); otherwise as Put's. A
// server that ignores the headers stores unconditionally: callers that
// depend on them probe the server first (see sink.ProbeConditionalWrites).
// Not part of Bucket: tier itself never needs it.
func (b *S3) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	name, err := b.object(key)
	if err != nil {
		return "", err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	if ifMatch == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(strings.Trim(ifMatch, `"`))
	}
	info, err := b.client.PutObject(ctx, b.opts.Bucket, name, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		return "", b.fail("conditional put", name, err)
	}
	return strings.Trim(info.ETag, `"`), nil
}

// ReadObject returns a whole object and its ETag, from one GET, so the ETag
// is that of the bytes returned (for a later PutIf). Errors: as Get's.
func (b *S3) ReadObject(ctx context.Context, key string) ([]byte, string, error) {
	name, err := b.object(key)
	if err != nil {
		return nil, "", err
	}
	rc, info, _, err := b.core.GetObject(ctx, b.opts.Bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", b.fail("get", name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, "", b.fail("read", name, err)
	}
	return data, strings.Trim(info.ETag, `"`), nil
}

// Get implements Bucket.
func (b *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	name, err := b.object(key)
	if err != nil {
		return nil, err
	}
	return b.get(ctx, name, minio.GetObjectOptions{})
}

// GetRange implements Bucket with an HTTP Range request.
func (b *S3) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	name, err := b.object(key)
	if err != nil {
		return nil, err
	}
	if err := checkRange(off, length); err != nil {
		return nil, err
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, rangeEnd(off, length)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRange, err)
	}
	return b.get(ctx, name, opts)
}

func (b *S3) get(ctx context.Context, name string, opts minio.GetObjectOptions) (io.ReadCloser, error) {
	// Core.GetObject sends the request now, so a missing key or a bad range
	// fails here; Client.GetObject would defer every error to the first Read.
	rc, _, _, err := b.core.GetObject(ctx, b.opts.Bucket, name, opts)
	if err != nil {
		return nil, b.fail("get", name, err)
	}
	return &s3Body{rc: rc, b: b, name: name}, nil
}

// s3Body classifies the errors of reading an object's body.
type s3Body struct {
	rc   io.ReadCloser
	b    *S3
	name string
}

func (s *s3Body) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	if err != nil && err != io.EOF {
		err = s.b.fail("read", s.name, err)
	}
	return n, err
}

func (s *s3Body) Close() error { return s.rc.Close() }

// Stat implements Bucket with a HEAD request that asks for the checksum.
func (b *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	name, err := b.object(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	var opts minio.StatObjectOptions
	opts.Checksum = true // x-amz-checksum-mode: ENABLED
	st, err := b.client.StatObject(ctx, b.opts.Bucket, name, opts)
	if err != nil {
		return ObjectInfo{}, b.fail("stat", name, err)
	}
	info := ObjectInfo{Key: key, Size: st.Size, LastModified: st.LastModified, ETag: st.ETag}
	if raw, err := base64.StdEncoding.DecodeString(st.ChecksumCRC64NVME); err == nil && len(raw) == 8 {
		info.CRC64NVME, info.HasCRC64NVME = binary.BigEndian.Uint64(raw), true
	}
	return info, nil
}

// List implements Bucket with ListObjectsV2, which returns keys in ascending
// UTF-8 byte order, a page of 1000 at a time.
func (b *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's lister goroutine if fn stops early
	for obj := range b.client.ListObjects(ctx, b.opts.Bucket, minio.ListObjectsOptions{
		Prefix:    b.prefix + prefix,
		Recursive: true,
	}) {
		if obj.Err != nil {
			return b.fail("list", b.prefix+prefix, obj.Err)
		}
		key, ok := strings.CutPrefix(obj.Key, b.prefix)
		if !ok || CheckKey(key) != nil {
			continue // a folder marker or a name written by something else
		}
		if err := fn(ObjectInfo{Key: key, Size: obj.Size, LastModified: obj.LastModified, ETag: obj.ETag}); err != nil {
			return err
		}
	}
	// The lister stops without an error when ctx ends.
	if err := ctx.Err(); err != nil {
		return b.fail("list", b.prefix+prefix, err)
	}
	return nil
}

// Delete implements Bucket. S3 answers 204 for a missing key too.
func (b *S3) Delete(ctx context.Context, key string) error {
	name, err := b.object(key)
	if err != nil {
		return err
	}
	if err := b.client.RemoveObject(ctx, b.opts.Bucket, name, minio.RemoveObjectOptions{}); err != nil {
		err = b.fail("delete", name, err)
		if IsNotExist(err) {
			return nil
		}
		return err
	}
	return nil
}

// Close implements Bucket. The client holds nothing but idle connections.
func (b *S3) Close() error { return nil }

func (b *S3) where(name string) string { return b.opts.Bucket + "/" + name }

// fail wraps err with the operation, the object and the sentinel it is
// classified as, if any. This is the one place S3 errors are classified.
func (b *S3) fail(op, name string, err error) error {
	if s := classifyS3(err); s != nil {
		return fmt.Errorf("tier: s3 %s %s: %w: %w", op, b.where(name), s, err)
	}
	return fmt.Errorf("tier: s3 %s %s: %w", op, b.where(name), err)
}

// classifyS3 returns the sentinel err belongs to, or nil.
func classifyS3(err error) error {
	var short *errShortBody
	switch {
	case errors.As(err, &short), errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return ErrUnavailable
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.StatusCode != 0 || resp.Code != "") {
		switch resp.Code {
		case "PreconditionFailed":
			return ErrPrecondition
		case "NoSuchKey":
			return ErrNotExist
		case "InvalidRange":
			return ErrInvalidRange
		case "ObjectParentIsFile", "ExistingObjectIsDirectory": // versitygw's posix backend
			return ErrInvalidKey
		case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable":
			return ErrUnavailable
		}
		switch s := resp.StatusCode; {
		case s == http.StatusPreconditionFailed:
			return ErrPrecondition
		case s == http.StatusRequestedRangeNotSatisfiable:
			return ErrInvalidRange
		case s >= 500, s == http.StatusTooManyRequests, s == http.StatusRequestTimeout:
			return ErrUnavailable
		}
		return nil // 403, NoSuchBucket, 400: permanent
	}
	// No answer from the server: the connection failed or broke off.
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return ErrUnavailable
	}
	return nil
}
