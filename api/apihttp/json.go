package apihttp

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluice-io/sluice/api"
)

// MediaJSON is the media type of JSON bodies.
const MediaJSON = "application/json"

// WriteJSON answers status with v as one JSON value and a newline, with its
// Content-Length set. A v that cannot be encoded (a bug) is answered
// INTERNAL instead.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", MediaJSON)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // a client gone mid-answer is its own loss
}

// RequireJSON refuses a body not declared application/json with 415
// UNSUPPORTED_MEDIA_TYPE. A browser sends a form or text/plain body to any
// origin without asking first, but asks the server before sending JSON (a
// CORS preflight), so the public API checks this on every JSON route.
func RequireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != MediaJSON {
		return api.Errorf(api.CodeUnsupportedMediaType, "Content-Type %q: want %s", ct, MediaJSON)
	}
	return nil
}

// JSONRules are the choices DecodeJSON leaves to a route. The zero value is
// the strictest: a body is required and every field must be known.
type JSONRules struct {
	// AllowEmpty leaves v as it is for an empty body instead of refusing it.
	AllowEmpty bool
	// AllowUnknownFields ignores fields v does not have. The brokers'
	// internal API sets it, so that a gateway one version ahead can talk
	// to a broker during a rolling upgrade; the public API never does, so
	// a misspelt field is an error, not a silent default.
	AllowUnknownFields bool
}

// DecodeJSON reads one JSON value of at most limit bytes from r's body
// into v. Every JSON route of the gateway and the brokers reads its body
// through it, so the same mistake gets the same answer everywhere:
//   - past limit: 413 REQUEST_TOO_LARGE (w is told to close the
//     connection rather than read on);
//   - malformed JSON, a value of the wrong shape, or anything but white
//     space after the value: 400 INVALID_REQUEST;
//   - an empty body: 400, unless rules.AllowEmpty;
//   - a field v does not have: 400, unless rules.AllowUnknownFields.
//
// The media type is checked by RequireJSON, where a route wants it.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, rules JSONRules) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if !rules.AllowUnknownFields {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if rules.AllowEmpty {
			return nil
		}
		return api.Errorf(api.CodeInvalidRequest, "the request body is empty; want a JSON value")
	}
	if err == nil {
		// One value, then nothing but white space.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("data after the JSON value")
			if terr != nil {
				err = terr
			}
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeRequestTooLarge, "the body is over %d bytes", limit)
		}
		return api.Errorf(api.CodeInvalidRequest, "bad request body: %v", err)
	}
	return nil
}

// QueryInt reads the optional integer query parameter name, within
// [lo, hi]; def when it is absent. Anything else is 400 INVALID_REQUEST
// naming the parameter and its bounds.
func QueryInt(q url.Values, name string, def, lo, hi int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, api.Errorf(api.CodeInvalidRequest, "%s=%q: want an integer from %d to %d", name, s, lo, hi)
	}
	return n, nil
}
