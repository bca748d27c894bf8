package gateway

import (
	"net/http"

	"github.com/sluice-io/sluice/api/apihttp"
)

// decodeStrictJSON reads the JSON body of a public route into v: 415 for a
// body not declared application/json (apihttp.RequireJSON says why that
// keeps web pages out), then apihttp.DecodeJSON's rules with every field
// required to be known: 413 past limit, 400 for bad JSON, a field v does
// not have, or anything after the value. An empty body leaves v as it is
// when allowEmpty, and is 400 otherwise.
func decodeStrictJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, allowEmpty bool) error {
	if err := apihttp.RequireJSON(r); err != nil {
		return err
	}
	return apihttp.DecodeJSON(w, r, v, limit, apihttp.JSONRules{AllowEmpty: allowEmpty})
}
