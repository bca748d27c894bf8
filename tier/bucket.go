// Package tier moves closed log segments to object storage and reads them back.
//
// This file holds the object-store abstraction the rest of the package is
// written against: the Bucket interface, its contract, its sentinel errors and
// the key rules. Implementations: S3 (any S3-compatible server, through
// minio-go), LocalDir (a directory, for `sluice dev`) and Memory (tests).
// FaultBucket wraps any of them to inject failures and delays. One acceptance
// test (acceptance_test.go) holds every implementation to the same contract.
package tier

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/minio/crc64nvme"
)

// Bucket is a flat namespace of immutable byte objects addressed by key, with
// the semantics of an S3 bucket as far as this package relies on them. Every
// implementation is safe for concurrent use.
//
// Every method that takes a key first checks it with CheckKey and fails with
// ErrInvalidKey without touching the store. Every method blocks until it is
// done or ctx ends; a ctx deadline that cuts an operation short is reported as
// ErrUnavailable (the store was too slow), a cancellation as ctx's own error.
//
// Errors are classified into the sentinels below, wrapped with %w so that both
// the sentinel and the underlying cause stay visible to errors.Is/As. An error
// that matches no sentinel is permanent for this configuration (bad
// credentials, a missing bucket, a permission denied): retrying will not help.
type Bucket interface {
	// Put stores exactly size bytes read from r under key, replacing any object
	// there. It is idempotent: putting the same bytes under the same key again
	// leaves the same object. Readers never see a partial object: until Put
	// returns nil, a concurrent Get sees the previous object or ErrNotExist,
	// afterwards it sees the new one (S3 gives read-after-write consistency).
	//
	// Put reads r from its current position and never reads past size bytes. If
	// r ends early, Put fails with an error wrapping io.ErrUnexpectedEOF and the
	// previous object (or its absence) is left as it was; the same holds for any
	// other failure. size must be >= 0. When Put returns nil the store holds the
	// bytes durably (S3: acknowledged by the server; LocalDir: fsynced).
	//
	// Put fails with ErrInvalidKey if key would make an object and a "folder"
	// of other objects coincide (key "a" while "a/b" exists, or "a/b" while "a"
	// exists): file-backed stores (versitygw's posix backend, LocalDir) cannot
	// hold both, so no implementation allows it. Keys built from a fixed layout
	// whose leaves carry a file extension never clash.
	//
	// There is no conditional (create-only) put: tier gives every upload attempt
	// a fresh key, so a plain overwrite can only ever replace an object with the
	// same bytes.
	Put(ctx context.Context, key string, r io.Reader, size int64) error

	// Get returns the whole object. The body is tied to ctx: cancel ctx only
	// after closing the body. The caller must Close it. Fails with ErrNotExist
	// if there is no object under key. Reading the body fails (never ends early
	// with io.EOF) if the store breaks off mid-object; such read errors are
	// classified like the others (a broken connection is ErrUnavailable).
	Get(ctx context.Context, key string) (io.ReadCloser, error)

	// GetRange returns the bytes [off, min(off+length, size)) of the object:
	// a range that starts inside the object and runs past its end is a short
	// read (the body ends with io.EOF after the last byte of the object), so a
	// caller that needs exactly length bytes uses io.ReadFull. A negative off
	// or a length <= 0 fails with ErrInvalidRange before the store is asked;
	// then a missing object fails with ErrNotExist, and a range that starts at
	// or after the end (every range of an empty object, too) with
	// ErrInvalidRange. The body behaves as Get's.
	GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)

	// Stat returns the object's metadata, or ErrNotExist. A key that is only a
	// "folder" of other keys does not exist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)

	// List calls fn for every object whose key starts with prefix (a plain
	// string prefix: "a/b" matches "a/b", "a/b/c" and "a/bc"), recursively, in
	// ascending byte order of keys, with ObjectInfo.CRC64NVME left unset.
	// prefix "" lists everything. Objects created or deleted while List runs may
	// or may not be seen. If fn returns an error, List stops and returns that
	// error unchanged. Objects in the store whose names are not valid keys
	// (written by something else) are skipped.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error

	// Delete removes the object under key. Deleting a missing key is not an
	// error, nor is deleting a key that is only a "folder" of other keys (they
	// stay).
	Delete(ctx context.Context, key string) error

	// Close releases the bucket's resources. Calls after Close fail.
	Close() error
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	// Key is the object's key, as given to Put (without any store prefix).
	Key string
	// Size is the object's length in bytes.
	Size int64
	// LastModified is when the object was last written, by the store's clock,
	// to the second at least (S3 reports whole seconds from Stat).
	LastModified time.Time
	// ETag is the store's opaque version tag ("" if it has none: LocalDir).
	// It changes when different bytes are stored under the key. For S3 it is
	// the MD5 of the bytes for single-part uploads and "md5-of-part-md5s-N" for
	// N-part uploads, so it is not a content checksum in general.
	ETag string
	// CRC64NVME is the store's own CRC-64/NVME of the whole object, computed by
	// the store from the bytes it received (HasCRC64NVME reports whether the
	// store gave one: versitygw and AWS S3 do, from Stat only; LocalDir does
	// not; Memory does). Comparing it with a CRC computed locally while
	// uploading proves the store holds the bytes that were sent. See
	// NewCRC64NVME.
	CRC64NVME    uint64
	HasCRC64NVME bool
}

// NewCRC64NVME returns a hash computing the CRC-64/NVME that stores report in
// ObjectInfo.CRC64NVME (the S3 "full object" CRC64NVME checksum).
func NewCRC64NVME() hash.Hash64 { return crc64nvme.New() }

// Sentinel errors. Errors returned by a Bucket wrap at most one of them.
//
// Mapping to the public error table (package api), done by the caller, not
// here (tier does not depend on api):
//
//   - ErrUnavailable → STORAGE_ERROR (503, retriable). The object store is the
//     partition's storage just as its disk is, and the client's right move is
//     the same: back off and retry the same request. BROKER_UNAVAILABLE is the
//     wrong code: the gateway uses it for "the owning broker cannot be
//     reached", which invites re-routing, and every broker reads the same
//     bucket, so re-routing cannot help. (STORAGE_ERROR's description in the
//     table speaks of the disk only; it should also name the remote store.)
//   - ErrNotExist on a key that a committed remote-segment record names means
//     either retention deleted it concurrently (re-check the log start and
//     answer OFFSET_OUT_OF_RANGE) or data loss (STORAGE_ERROR).
//   - ErrInvalidKey, ErrInvalidRange and unclassified errors are bugs or
//     misconfiguration: INTERNAL (api.Classify's default).
var (
	// ErrNotExist: there is no object under the key.
	ErrNotExist = errors.New("tier: object does not exist")
	// ErrInvalidKey: the key breaks the rules of CheckKey, or clashes with the
	// path of an existing object (see Bucket.Put).
	ErrInvalidKey = errors.New("tier: invalid object key")
	// ErrInvalidRange: GetRange's range does not start inside the object.
	ErrInvalidRange = errors.New("tier: range not satisfiable")
	// ErrUnavailable: the store failed or was too slow, and the same call may
	// succeed later: S3 5xx and throttling (429, SlowDown), network errors,
	// a body cut short, a ctx deadline; for LocalDir, an I/O error. The
	// operation may or may not have taken effect (a Put may have stored the
	// object; retrying it is safe because Put is idempotent).
	ErrUnavailable = errors.New("tier: object store unavailable")
	// ErrPrecondition: a conditional put (S3.PutIf) was refused because its
	// condition did not hold (HTTP 412): the key exists already, or holds
	// another version than the ETag named. Nothing was stored.
	ErrPrecondition = errors.New("tier: precondition failed")
)

// IsNotExist reports whether err says the object does not exist.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// IsUnavailable reports whether err is a transient failure of the store.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// Key limits. S3 allows 1024 bytes of UTF-8 per object name, and that includes
// the S3 prefix; file-backed stores allow 255 bytes per path segment.
const (
	MaxKeyLen     = 1024
	MaxSegmentLen = 255
)

// CheckKey returns nil if key is a valid object key, else an error wrapping
// ErrInvalidKey. A key is 1..MaxKeyLen bytes of UTF-8 without control
// characters, made of '/'-separated segments of 1..MaxSegmentLen bytes, none
// of them "." or "..". So a key has no leading, trailing or doubled slash, and
// maps to the same path on every store: S3 servers with file backends (and
// LocalDir) would otherwise normalize "a/../b" to "b" or "a//b" to "a/b".
func CheckKey(key string) error {
	if err := checkPath(key); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, err)
	}
	return nil
}

func checkPath(key string) error {
	switch {
	case key == "":
		return errors.New("empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("longer than %d bytes", MaxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("not UTF-8")
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f {
			return errors.New("holds a control character")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return errors.New("has an empty path segment")
		case seg == "." || seg == "..":
			return errors.New(`has a "." or ".." path segment`)
		case len(seg) > MaxSegmentLen:
			return fmt.Errorf("has a path segment longer than %d bytes", MaxSegmentLen)
		}
	}
	return nil
}

// checkRange validates GetRange's arguments before the store is asked.
func checkRange(off, length int64) error {
	if off < 0 || length <= 0 {
		return fmt.Errorf("%w: offset %d, length %d", ErrInvalidRange, off, length)
	}
	return nil
}

// rangeEnd is the last byte of [off, off+length), clamped against overflow.
func rangeEnd(off, length int64) int64 {
	end := off + length - 1
	if end < off {
		return 1<<63 - 1
	}
	return end
}

// ctxError classifies an error caused by ctx ending: a deadline means the
// store was too slow (ErrUnavailable), a cancellation is the caller's own doing.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// errShortBody is what Put reports when r ends before size bytes.
type errShortBody struct{ got, want int64 }

func (e *errShortBody) Error() string {
	return fmt.Sprintf("tier: body ended after %d of %d bytes", e.got, e.want)
}
func (e *errShortBody) Unwrap() error { return io.ErrUnexpectedEOF }

// exactReader reads exactly n bytes from r: it stops at n (reading nothing
// past it) and turns an early EOF into *errShortBody. It deliberately has no
// other methods, so that clients see a plain stream.
type exactReader struct {
	r          io.Reader
	read, want int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	left := e.want - e.read
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := e.r.Read(p)
	e.read += int64(n)
	if err == io.EOF {
		if e.read < e.want {
			return n, &errShortBody{got: e.read, want: e.want}
		}
		return n, io.EOF
	}
	return n, err
}

// checkPut validates Put's arguments before the store is touched.
func checkPut(key string, size int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("tier: put %q: negative size %d", key, size)
	}
	return nil
}
