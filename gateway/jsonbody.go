package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/sluice-io/sluice/api"
)

// requireJSON refuses a body not declared application/json with 415
// UNSUPPORTED_MEDIA_TYPE. A browser sends a form or text/plain body to any
// origin without asking first, but asks the server before sending JSON (a
// CORS preflight, which the gateway grants only to --allowed-origins, and
// then without credentials), so this check is what keeps a web page from
// creating topics or producer ids from a visitor's browser.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != mediaJSON {
		return api.Errorf(api.CodeUnsupportedMediaType, "Content-Type %q: want %s", ct, mediaJSON)
	}
	return nil
}

// decodeStrictJSON reads a JSON body of at most limit bytes into v (past
// limit, w is told to close the connection rather than read on): 415 for
// another media type, 413 past limit, 400 for bad JSON, a field v does not
// have, or anything after the value. An empty body leaves v as it is when
// allowEmpty, and is 400 otherwise. (groups.go's decodeJSONBody applies the
// same media-type, size and unknown-field rules to the group routes.)
func decodeStrictJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, allowEmpty bool) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && allowEmpty {
		return nil
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
