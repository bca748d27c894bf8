package httpserve

import (
	"net/http"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// Recoverer answers a request whose handler panicked with INTERNAL (500)
// instead of letting net/http drop the connection, after calling noted
// with the panic value from the deferred function that recovered it (so a
// stack taken there is the panicking one; the caller logs and counts it).
// A panic is never re-raised: it would only become a dropped connection.
// http.ErrAbortHandler, net/http's way of cutting a response off on
// purpose, passes through.
//
// It does not wrap the ResponseWriter, so a handler still reaches
// net/http's ReadFrom (sendfile, splice). A handler that panics after it
// began its answer gets the error appended to what it sent: the client sees
// a cut or malformed body, never a well-formed wrong one.
func Recoverer(noted func(r *http.Request, v any)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if v == http.ErrAbortHandler {
					panic(v)
				}
				noted(r, v)
				apihttp.WriteError(w, api.Errorf(api.CodeInternal, "internal error serving %s %s", r.Method, r.URL.Path))
			}()
			next.ServeHTTP(w, r)
		})
	}
}
