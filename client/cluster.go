package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-io/sluice/api"
)

// ErrNotReady is wrapped by Ready's error when the gateway answered that it
// cannot serve yet; the wrapping error's text has the gateway's reason.
var ErrNotReady = errors.New("gateway not ready")

// Cluster returns the brokers and the controller as the gateway sees them
// (GET /v1/cluster). Retried on every retriable failure.
func (c *Client) Cluster(ctx context.Context) (api.ClusterInfo, error) {
	var out api.ClusterInfo
	err := c.getJSON(ctx, "/v1/cluster", nil, &out)
	return out, err
}

// Ready asks GET /readyz once, without retries: nil when the gateway can
// serve (it has metadata, a live broker and a controller), an error wrapping
// ErrNotReady with the gateway's reason when it cannot yet, or the failure to
// ask (a *TransportError, an *Error, or ctx's error).
func (c *Client) Ready(ctx context.Context) error {
	resp, err := c.once(ctx, &request{method: http.MethodGet, path: "/readyz"})
	if err == nil {
		return nil
	}
	if resp != nil && resp.status == http.StatusServiceUnavailable {
		var body struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(resp.body, &body) == nil && body.Reason != "" {
			return fmt.Errorf("%w: %s", ErrNotReady, body.Reason)
		}
	}
	return err
}

// WaitReady calls Ready every 20 ms until it returns nil, then returns nil;
// when ctx ends first it returns ctx's error with the last answer in its
// text, so a timeout says why the gateway was not ready.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		last := c.Ready(ctx)
		if last == nil {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("%w (last answer: %v)", err, last)
		}
	}
}

// getJSON is a GET of a JSON route (reads are idempotent), decoded into out.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	return c.doJSON(ctx, &request{method: http.MethodGet, path: path, query: q}, out)
}

// doJSON runs req and decodes its JSON answer into out (unless out is nil).
func (c *Client) doJSON(ctx context.Context, req *request, out any) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	if out == nil || len(resp.body) == 0 {
		return nil
	}
	if err := decodeJSON(resp.body, out); err != nil {
		return fmt.Errorf("client: %s %s: decoding the answer: %w", req.method, req.path, err)
	}
	return nil
}

// jsonBody marshals a request body. The api types always marshal; an error
// here is a caller's json.RawMessage that is not JSON.
func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return b, nil
}
