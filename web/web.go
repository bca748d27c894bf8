// Package web is the browser dashboard: plain HTML, CSS and JavaScript
// modules embedded in the binary, with no build step. Every gateway serves it
// under /ui/; it talks only to the gateway's public API (openapi.yaml).
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

//go:embed static vendor
var files embed.FS

// csp keeps the dashboard to its own origin: scripts, styles and API calls
// (fetch and event streams) go only to the gateway that served it, and no
// other site may frame it.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Handler serves the dashboard's files for paths under Prefix: /ui/ is the
// page itself, /ui/vendor/... the vendored libraries, anything else under
// /ui/ a file of static/. Unknown files are 404.
func Handler() http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	vendor, err := fs.Sub(files, "vendor")
	if err != nil {
		panic(err)
	}
	staticFiles := http.FileServerFS(static)
	vendorFiles := http.FileServerFS(vendor)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary; revalidate rather than cache
		// a dashboard older than its gateway.
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		if v, ok := strings.CutPrefix(rest, "vendor/"); ok {
			r2.URL.Path = "/" + v
			vendorFiles.ServeHTTP(w, r2)
			return
		}
		r2.URL.Path = "/" + rest
		staticFiles.ServeHTTP(w, r2)
	})
}
