package httpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestRecovererAnswersInternalAndNotes(t *testing.T) {
	var noted []any
	h := Recoverer(func(_ *http.Request, v any) { noted = append(noted, v) })(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("bug") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/x", nil))
	if rec.Code != http.StatusInternalServerError || rec.Header().Get(api.HeaderErrorCode) != string(api.CodeInternal) {
		t.Fatalf("answer %d %q, want 500 INTERNAL", rec.Code, rec.Header().Get(api.HeaderErrorCode))
	}
	if !strings.Contains(rec.Body.String(), "GET /v1/x") {
		t.Fatalf("body %q does not name the request", rec.Body.String())
	}
	if len(noted) != 1 || noted[0] != "bug" {
		t.Fatalf("noted %v, want the one panic", noted)
	}
}

func TestRecovererPassesAbortHandler(t *testing.T) {
	h := Recoverer(func(*http.Request, any) { t.Error("an abort was noted as a panic") })(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler passed on", v)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
}

func TestRecovererLeavesTheWriterUnwrapped(t *testing.T) {
	rec := httptest.NewRecorder()
	Recoverer(func(*http.Request, any) {})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if w != http.ResponseWriter(rec) {
			t.Error("the handler got a wrapped ResponseWriter (sendfile and splice need net/http's own)")
		}
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
}
