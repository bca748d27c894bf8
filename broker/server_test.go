package broker

import (
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestReadBodyBelievesContentLengthOnlySoFar: a body that declares 64 MiB
// and sends five bytes costs far less than 64 MiB: a declared length is
// allocated up front only up to maxBodyUpfront.
func TestReadBodyBelievesContentLengthOnlySoFar(t *testing.T) {
	r := httptest.NewRequest("POST", "/", io.NopCloser(strings.NewReader("hello")))
	r.ContentLength = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	bp, err := readBody(r, 64<<20)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer putBody(bp)
	if string(*bp) != "hello" {
		t.Fatalf("read %q", *bp)
	}
	// Generous: other goroutines may allocate meanwhile; the old behaviour
	// allocated the whole 64 MiB.
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Fatalf("reading 5 bytes allocated %d bytes", got)
	}
}
