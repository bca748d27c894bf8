package apihttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func codeOf(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return "not an api.Error"
}

func TestDecodeJSON(t *testing.T) {
	type body struct {
		Name string `json:"name"`
	}
	tests := []struct {
		name  string
		body  string
		rules JSONRules
		want  api.Code // "" for success
		got   string
	}{
		{"one value", `{"name":"a"}`, JSONRules{}, "", "a"},
		{"white space after", "{\"name\":\"a\"}\n\t ", JSONRules{}, "", "a"},
		{"a second value", `{"name":"a"}{"name":"b"}`, JSONRules{}, api.CodeInvalidRequest, ""},
		{"garbage after", `{"name":"a"} x`, JSONRules{}, api.CodeInvalidRequest, ""},
		{"garbage after, unknown fields allowed", `{"name":"a"},`, JSONRules{AllowUnknownFields: true}, api.CodeInvalidRequest, ""},
		{"malformed", `{"name":`, JSONRules{}, api.CodeInvalidRequest, ""},
		{"wrong shape", `{"name":1}`, JSONRules{}, api.CodeInvalidRequest, ""},
		{"unknown field", `{"name":"a","x":1}`, JSONRules{}, api.CodeInvalidRequest, ""},
		{"unknown field allowed", `{"name":"a","x":1}`, JSONRules{AllowUnknownFields: true}, "", "a"},
		{"empty", ``, JSONRules{}, api.CodeInvalidRequest, ""},
		{"empty allowed", ``, JSONRules{AllowEmpty: true}, "", "keep"},
		{"over the limit", `{"name":"` + strings.Repeat("a", 100) + `"}`, JSONRules{}, api.CodeRequestTooLarge, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
			v := body{Name: "keep"}
			err := DecodeJSON(httptest.NewRecorder(), r, &v, 64, tc.rules)
			if codeOf(err) != tc.want {
				t.Fatalf("DecodeJSON(%q) = %v, want code %q", tc.body, err, tc.want)
			}
			if tc.want == "" && v.Name != tc.got {
				t.Fatalf("decoded name %q, want %q", v.Name, tc.got)
			}
		})
	}
}

func TestRequireJSON(t *testing.T) {
	for ct, want := range map[string]api.Code{
		"application/json":                  "",
		"application/json; charset=utf-8":   "",
		"text/plain":                        api.CodeUnsupportedMediaType,
		"":                                  api.CodeUnsupportedMediaType,
		"application/x-www-form-urlencoded": api.CodeUnsupportedMediaType,
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", ct)
		if got := codeOf(RequireJSON(r)); got != want {
			t.Errorf("Content-Type %q: %q, want %q", ct, got, want)
		}
	}
}

func TestQueryInt(t *testing.T) {
	tests := []struct {
		query string
		want  int64
		code  api.Code
	}{
		{"", 7, ""},
		{"n=0", 0, ""},
		{"n=10", 10, ""},
		{"n=11", 0, api.CodeInvalidRequest},
		{"n=-1", 0, api.CodeInvalidRequest},
		{"n=1.5", 0, api.CodeInvalidRequest},
		{"n=x", 0, api.CodeInvalidRequest},
	}
	for _, tc := range tests {
		q, _ := url.ParseQuery(tc.query)
		got, err := QueryInt(q, "n", 7, 0, 10)
		if codeOf(err) != tc.code || (tc.code == "" && got != tc.want) {
			t.Errorf("QueryInt(%q) = %d, %v; want %d, code %q", tc.query, got, err, tc.want, tc.code)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusCreated, map[string]int{"a": 1})
	if rec.Code != http.StatusCreated || rec.Header().Get("Content-Type") != MediaJSON ||
		rec.Body.String() != "{\"a\":1}\n" || rec.Header().Get("Content-Length") != "8" {
		t.Fatalf("got %d %q %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Content-Length"), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, func() {}) // cannot be encoded
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("an unencodable value answered %d, want 500", rec.Code)
	}
}
