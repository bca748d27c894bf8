package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sluice-io/sluice/api"
)

// SetScramCredential sets a principal's SCRAM credential for a mechanism
// (PUT /v1/scram-credentials), for Kafka clients that authenticate with
// SASL SCRAM; setting it again replaces it, so it is retried.
func (c *Client) SetScramCredential(ctx context.Context, req api.SetScramCredentialRequest) (api.ScramCredential, error) {
	body, err := jsonBody(req)
	if err != nil {
		return api.ScramCredential{}, err
	}
	var out api.ScramCredential
	err = c.doJSON(ctx, &request{method: http.MethodPut, path: "/v1/scram-credentials", body: body, ctype: "application/json"}, &out)
	return out, err
}

// ListScramCredentials lists the SCRAM credentials, of one principal when
// it is not "" (GET /v1/scram-credentials); never their keys.
func (c *Client) ListScramCredentials(ctx context.Context, principal string) ([]api.ScramCredential, error) {
	q := url.Values{}
	if principal != "" {
		q.Set("principal", principal)
	}
	var out api.ScramCredentialList
	err := c.getJSON(ctx, "/v1/scram-credentials", q, &out)
	return out.Credentials, err
}

// DeleteScramCredential removes a principal's credential for a mechanism
// (DELETE /v1/scram-credentials); UNKNOWN_SCRAM_CREDENTIAL when it has none.
func (c *Client) DeleteScramCredential(ctx context.Context, principal, mechanism string) error {
	q := url.Values{"principal": {principal}, "mechanism": {mechanism}}
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/scram-credentials", query: q})
	return err
}
