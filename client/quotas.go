package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sluice-io/sluice/api"
)

// entityQuery names a quota entity in a query: the parts that are set.
func entityQuery(principal, clientID string) url.Values {
	q := url.Values{}
	if principal != "" {
		q.Set("principal", principal)
	}
	if clientID != "" {
		q.Set("client_id", clientID)
	}
	return q
}

// ListQuotas returns the client quotas (GET /v1/quotas), only those whose
// principal and client id equal the given ones where these are not "".
func (c *Client) ListQuotas(ctx context.Context, principal, clientID string) ([]api.Quota, error) {
	var out api.QuotaList
	err := c.getJSON(ctx, "/v1/quotas", entityQuery(principal, clientID), &out)
	return out.Quotas, err
}

// SetQuota sets an entity's rates, replacing those it had (PUT
// /v1/quotas). Setting the same again changes nothing, so it is retried.
func (c *Client) SetQuota(ctx context.Context, q api.Quota) (api.Quota, error) {
	body, err := jsonBody(q)
	if err != nil {
		return api.Quota{}, err
	}
	var out api.Quota
	err = c.doJSON(ctx, &request{method: http.MethodPut, path: "/v1/quotas", body: body, ctype: "application/json"}, &out)
	return out, err
}

// DeleteQuota removes exactly the entity's quota (DELETE /v1/quotas);
// UNKNOWN_QUOTA when it has none.
func (c *Client) DeleteQuota(ctx context.Context, principal, clientID string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/quotas", query: entityQuery(principal, clientID)})
	return err
}
