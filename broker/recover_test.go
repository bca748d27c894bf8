package broker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

func panicTestBroker(t *testing.T) *Broker {
	return &Broker{log: slog.New(slog.NewTextHandler(io.Discard, nil)), panics: map[string]uint64{}}
}

// readerFromWriter is a ResponseWriter with ReadFrom, as net/http's is.
type readerFromWriter struct{ *httptest.ResponseRecorder }

func (w readerFromWriter) ReadFrom(r io.Reader) (int64, error) { return io.Copy(w.ResponseRecorder, r) }

func TestRecoverer(t *testing.T) {
	b := panicTestBroker(t)
	t.Run("a panic answers INTERNAL and is counted", func(t *testing.T) {
		rec := httptest.NewRecorder()
		b.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("bug") })).
			ServeHTTP(rec, httptest.NewRequest("GET", "/internal/v1/health", nil))
		if rec.Code != 500 || rec.Header().Get(api.HeaderErrorCode) != string(api.CodeInternal) {
			t.Fatalf("answer %d %q, want 500 INTERNAL", rec.Code, rec.Header().Get(api.HeaderErrorCode))
		}
		if b.panics["http"] != 1 {
			t.Fatalf("panics counted: %v", b.panics)
		}
	})
	t.Run("the handler gets the ResponseWriter itself", func(t *testing.T) {
		w := readerFromWriter{httptest.NewRecorder()}
		b.recoverer(http.HandlerFunc(func(got http.ResponseWriter, _ *http.Request) {
			if _, ok := got.(io.ReaderFrom); !ok || got != http.ResponseWriter(w) {
				t.Errorf("handler got %T, want the server's writer (ReadFrom is how fetch reaches sendfile)", got)
			}
		})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	})
	t.Run("ErrAbortHandler passes through", func(t *testing.T) {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		b.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })).
			ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	})
}

// TestGoLoopRestartsAfterPanic: a loop that panics is noted and started
// again; one that returns is done.
func TestGoLoopRestartsAfterPanic(t *testing.T) {
	b := panicTestBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	second := make(chan struct{})
	b.goLoop(ctx, "test", func(ctx context.Context) {
		if runs.Add(1) == 1 {
			panic("first pass")
		}
		close(second)
		<-ctx.Done()
	})
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop was not started again after its panic")
	}
	cancel()
	b.goroutines.Close()
	if runs.Load() != 2 || b.panics["test"] != 1 {
		t.Fatalf("%d runs, panics %v; want 2 runs and one panic", runs.Load(), b.panics)
	}
}

func TestCrashOnPanicReraises(t *testing.T) {
	b := panicTestBroker(t)
	b.opts.CrashOnPanic = true
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), "bug") {
			t.Fatalf("recovered %v, want the loop's panic re-raised", v)
		}
		if b.panics["loop"] != 1 {
			t.Fatalf("panics counted: %v", b.panics)
		}
	}()
	b.recovering("loop", func() { panic("bug") })
}
