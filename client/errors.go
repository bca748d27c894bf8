package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// Error is an error the server answered: the {"error":{"code","message",
// "retriable"}} envelope of an HTTP answer or of a WebSocket error frame.
//
// errors.Is(err, api.ErrUnknownTopic) and the other api sentinels match it by
// code, and errors.As(err, &apiErr) with an *api.Error target finds the code
// and message, so code written against the api package works unchanged.
type Error struct {
	Code    api.Code
	Message string
	// Retriable is the server's word: the same request may succeed later.
	// For a code this client does not know it is still the server's.
	Retriable bool
	// Status is the HTTP status of the answer; for a WebSocket error frame it
	// is the close status minus 4000 (the error's HTTP status), or 0 when
	// the frame came without one.
	Status int
	// RetryAfter is the server's Retry-After (1 s on retriable 503 and 429
	// answers), or for THROTTLED its X-Sluice-Throttle-Ms, zero when it
	// sent none.
	RetryAfter time.Duration
}

// Error reads like an *api.Error: "CODE: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is matches an *api.Error or an *Error with the same code, so the api
// sentinels work with errors.Is.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *api.Error:
		return t.Code == e.Code
	case *Error:
		return t.Code == e.Code
	}
	return false
}

// Unwrap is the *api.Error with the same code and message, for errors.As and
// api.Classify.
func (e *Error) Unwrap() error { return &api.Error{Code: e.Code, Message: e.Message} }

// TransportError is a failure to get an answer: the connection could not be
// made or broke, the answer could not be read, or the attempt ran out of its
// time (WithTimeout). The caller's own context ending is not one: that is
// returned as the context's error.
type TransportError struct {
	Method string
	URL    string
	// Sent says the whole request was written to a connection, so the server
	// may have acted on it. False means it certainly did not.
	Sent bool
	Err  error
}

// Error says what was asked, whether it was sent, and what went wrong.
func (e *TransportError) Error() string {
	state := "not sent"
	if e.Sent {
		state = "sent, no answer"
	}
	return fmt.Sprintf("%s %s: %s: %v", e.Method, e.URL, state, e.Err)
}

// Unwrap is the underlying network or timeout error.
func (e *TransportError) Unwrap() error { return e.Err }

// IsRetriable reports whether the same request may succeed if sent again
// later: an *Error the server marked retriable, or a *TransportError. It is
// false for nil, for the caller's context ending, and for everything else.
//
// Retriable does not mean harmless: a produce without a producer id that
// failed with REQUEST_TIMED_OUT or a lost answer may have been written, and
// sending it again may write it twice. Producer makes such retries safe.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable
	}
	var te *TransportError
	return errors.As(err, &te)
}

// unappliedCodes are the retriable codes answered before anything was
// changed: the request reached no leader, controller or coordinator able to
// act on it. (The gateway itself retries these for a while before answering.)
var unappliedCodes = map[api.Code]bool{
	api.CodeNotLeader:           true,
	api.CodeLeaderNotAvailable:  true,
	api.CodeNotEnoughReplicas:   true,
	api.CodeNotController:       true,
	api.CodeTooManyRequests:     true,
	api.CodeThrottled:           true,
	api.CodeFencedLeaderEpoch:   true,
	api.CodeUnknownLeaderEpoch:  true,
	api.CodeNotCoordinator:      true,
	api.CodeCoordinatorLoading:  true,
	api.CodeCoordinatorNotAvail: true,
}

// provesUnapplied reports whether err is a retriable failure after which the
// request certainly had no effect: a request never sent, or a retriable code
// from unappliedCodes. Calls that change something retry only these.
func provesUnapplied(err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return !te.Sent
	}
	var e *Error
	return errors.As(err, &e) && e.Retriable && unappliedCodes[e.Code]
}

// decodeError turns an error answer into an *Error. A body that is not the
// envelope (a proxy's page, /readyz's 503) falls back to the
// X-Sluice-Error-Code header, then to the status: 429 TOO_MANY_REQUESTS, 404
// NOT_FOUND, other 4xx INVALID_REQUEST, 5xx INTERNAL (retriable, as the
// error table says).
func decodeError(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, RetryAfter: retryAfter(h)}
	var env struct {
		Error struct {
			Code      api.Code `json:"code"`
			Message   string   `json:"message"`
			Retriable *bool    `json:"retriable"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		if env.Error.Retriable != nil {
			e.Retriable = *env.Error.Retriable
		} else {
			e.Retriable = api.Lookup(e.Code).Retriable
		}
		return e
	}
	e.Message = fmt.Sprintf("HTTP %d: %s", status, strings.TrimSpace(string(truncate(body, 512))))
	switch code := h.Get(api.HeaderErrorCode); {
	case code != "":
		e.Code = api.Code(code)
	case status == http.StatusTooManyRequests:
		e.Code = api.CodeTooManyRequests
	case status == http.StatusNotFound:
		e.Code = api.CodeNotFound
	case status >= 400 && status < 500:
		e.Code = api.CodeInvalidRequest
	default:
		e.Code = api.CodeInternal
	}
	e.Retriable = api.Lookup(e.Code).Retriable
	return e
}

// retryAfter reads X-Sluice-Throttle-Ms (a quota's throttle time, to the
// millisecond), else a Retry-After header given in seconds; dates and junk
// are ignored.
func retryAfter(h http.Header) time.Duration {
	if d := apihttp.ThrottleOf(h); d > 0 {
		return d
	}
	s := h.Get("Retry-After")
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// errorFrame decodes a WebSocket text frame holding the error envelope; ok
// is false for any other frame.
func errorFrame(b []byte) (e *Error, ok bool) {
	var env struct {
		Error *api.ErrorDetail `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Code == "" {
		return nil, false
	}
	return &Error{Code: env.Error.Code, Message: env.Error.Message, Retriable: env.Error.Retriable}, true
}
