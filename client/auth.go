package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sluice-io/sluice/api"
)

// CreateToken makes an API token for a principal (POST /v1/tokens); the
// answer's Token field is the only copy of the secret. ttlMs 0: it never
// expires. Retried only when the failure proves nothing was created.
func (c *Client) CreateToken(ctx context.Context, principal string, ttlMs int64) (api.Token, error) {
	body, err := jsonBody(api.CreateTokenRequest{Principal: principal, ExpiresInMs: ttlMs})
	if err != nil {
		return api.Token{}, err
	}
	var out api.Token
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: "/v1/tokens", body: body, ctype: "application/json", safety: retryUnapplied}, &out)
	return out, err
}

// ListTokens lists the stored tokens, without secrets (GET /v1/tokens).
func (c *Client) ListTokens(ctx context.Context) ([]api.Token, error) {
	var out api.TokenList
	err := c.getJSON(ctx, "/v1/tokens", nil, &out)
	return out.Tokens, err
}

// DeleteToken revokes a token by id (DELETE /v1/tokens/{id}); UNKNOWN_TOKEN
// when there is none. Revoking twice has the same effect, so it is retried.
func (c *Client) DeleteToken(ctx context.Context, id string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/tokens/" + escape(id)})
	return err
}

// CreateACL adds a rule (POST /v1/acls); adding it twice changes nothing,
// so it is retried.
func (c *Client) CreateACL(ctx context.Context, a api.ACL) (api.ACL, error) {
	body, err := jsonBody(a)
	if err != nil {
		return api.ACL{}, err
	}
	var out api.ACL
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: "/v1/acls", body: body, ctype: "application/json"}, &out)
	return out, err
}

func aclQuery(f api.ACL) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"principal": f.Principal, "resource_type": f.ResourceType, "pattern_type": f.PatternType,
		"resource_name": f.ResourceName, "operation": f.Operation, "permission": f.Permission} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// ListACLs returns the rules whose fields equal the filter's non-empty ones
// (GET /v1/acls).
func (c *Client) ListACLs(ctx context.Context, filter api.ACL) ([]api.ACL, error) {
	var out api.ACLList
	err := c.getJSON(ctx, "/v1/acls", aclQuery(filter), &out)
	return out.ACLs, err
}

// DeleteACLs removes the rules the filter matches (DELETE /v1/acls; at
// least one field must be set) and returns them. Retried: deleting again
// removes nothing more.
func (c *Client) DeleteACLs(ctx context.Context, filter api.ACL) ([]api.ACL, error) {
	var out api.ACLList
	err := c.doJSON(ctx, &request{method: http.MethodDelete, path: "/v1/acls", query: aclQuery(filter)}, &out)
	return out.ACLs, err
}
