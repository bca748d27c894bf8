package faulttest

import (
	"encoding/json"
	"net/http"

	"github.com/sluice-io/sluice/api/apihttp"
)

// getJSON GETs url and decodes its JSON answer into out.
func getJSON(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return apihttp.ReadError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
