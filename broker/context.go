package broker

import (
	"context"
	"net/http"
	"time"
)

// contextWithTimeout bounds a request's work by d (0: no bound beyond the
// request's own context).
func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(r.Context())
	}
	return context.WithTimeout(r.Context(), d)
}
