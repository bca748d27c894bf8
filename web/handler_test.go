package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/web"
)

func TestHandler(t *testing.T) {
	h := web.Handler()
	tests := []struct {
		name, method, path string
		status             int
		contentType, body  string
	}{
		{"page", http.MethodGet, "/ui/", 200, "text/html", `<script type="module" src="js/app.js">`},
		{"module", http.MethodGet, "/ui/js/app.js", 200, "text/javascript", "import"},
		{"stylesheet", http.MethodGet, "/ui/app.css", 200, "text/css", "--accent"},
		{"vendored chart library", http.MethodGet, "/ui/vendor/uPlot.iife.min.js", 200, "text/javascript", "uPlot"},
		{"vendored licence", http.MethodGet, "/ui/vendor/uPlot.LICENSE", 200, "", "MIT"},
		{"missing file", http.MethodGet, "/ui/nope.js", 404, "", ""},
		{"outside the prefix", http.MethodGet, "/v1/topics", 404, "", ""},
		{"no escape from the directory", http.MethodGet, "/ui/../web.go", 404, "", ""},
		{"write method", http.MethodPost, "/ui/", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("%s %s: HTTP %d, want %d", tc.method, tc.path, rec.Code, tc.status)
			}
			if tc.status != 200 {
				return
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
				t.Errorf("Content-Type %q, want %s", ct, tc.contentType)
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body does not contain %q", tc.body)
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
		})
	}
}
