// Package apihttp writes and reads api's error envelope and throttle
// headers over HTTP, for the gateway, the brokers and the Go client alike.
// It is apart from api so that what links api (the log, the coordinator)
// does not link net/http.
package apihttp

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
)

// WriteError classifies err and writes it as the JSON envelope with the table's status.
func WriteError(w http.ResponseWriter, err error) {
	e := api.Classify(err)
	spec := api.Lookup(e.Code)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(api.HeaderErrorCode, string(e.Code))
	if e.Throttle > 0 {
		SetThrottle(w.Header(), e.Throttle)
	} else if spec.Retriable && (spec.Status == http.StatusServiceUnavailable || spec.Status == http.StatusTooManyRequests) {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(spec.Status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: e.Code, Message: e.Message, Retriable: spec.Retriable}})
}

// ReadError decodes an error response into an *api.Error. A body that is not the
// envelope becomes INTERNAL (5xx) or INVALID_REQUEST (4xx) with the body as message.
func ReadError(resp *http.Response) *api.Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		return &api.Error{Code: body.Error.Code, Message: body.Error.Message, Throttle: ThrottleOf(resp.Header)}
	}
	code := api.CodeInternal
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		code = api.CodeInvalidRequest
	}
	return api.Errorf(code, "HTTP %d: %s", resp.StatusCode, string(b))
}

// SetThrottle sets X-Sluice-Throttle-Ms and Retry-After (whole seconds,
// rounded up, so a client that waits Retry-After is admitted) for a
// throttle time d.
func SetThrottle(h http.Header, d time.Duration) {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	h.Set(api.HeaderThrottleMs, strconv.FormatInt(int64(ms), 10))
	h.Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
}

// ThrottleOf reads X-Sluice-Throttle-Ms (0 when absent or not a number in
// [0, 1 hour]).
func ThrottleOf(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get(api.HeaderThrottleMs), 10, 64)
	if err != nil || ms < 0 || ms > time.Hour.Milliseconds() {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
