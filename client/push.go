package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluice-io/sluice/api"
)

func pushPath(name string) string { return "/v1/push/" + escape(name) }

// CreatePush creates a push subscription (POST /v1/push). The answer
// carries the signing secret, shown this once. Not retried after a
// failure that may have been applied (a second create would answer
// SUBSCRIPTION_EXISTS). Errors: INVALID_REQUEST, UNKNOWN_TOPIC,
// ENDPOINT_NOT_ALLOWED, SUBSCRIPTION_EXISTS, TOO_MANY_SUBSCRIPTIONS.
func (c *Client) CreatePush(ctx context.Context, cfg api.PushConfig) (api.PushSubscription, error) {
	body, err := jsonBody(cfg)
	if err != nil {
		return api.PushSubscription{}, err
	}
	var out api.PushSubscription
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: "/v1/push", body: body, ctype: "application/json", safety: retryUnapplied}, &out)
	return out, err
}

// ListPush lists the push subscriptions (GET /v1/push).
func (c *Client) ListPush(ctx context.Context) ([]api.PushSubscription, error) {
	var out api.PushList
	err := c.getJSON(ctx, "/v1/push", nil, &out)
	return out.Subscriptions, err
}

// GetPush returns a subscription's settings, state and per-partition
// delivery state (GET /v1/push/{name}). Errors: UNKNOWN_SUBSCRIPTION.
func (c *Client) GetPush(ctx context.Context, name string) (api.PushStatus, error) {
	var out api.PushStatus
	err := c.getJSON(ctx, pushPath(name), nil, &out)
	return out, err
}

// PatchPush changes some of a subscription's settings (PATCH
// /v1/push/{name}): patch holds the fields to change, as JSON.
func (c *Client) PatchPush(ctx context.Context, name string, patch json.RawMessage) (api.PushSubscription, error) {
	var out api.PushSubscription
	err := c.doJSON(ctx, &request{method: http.MethodPatch, path: pushPath(name), body: patch, ctype: "application/json"}, &out)
	return out, err
}

// DeletePush deletes a subscription and its group (DELETE
// /v1/push/{name}); its dead-letter topic stays.
func (c *Client) DeletePush(ctx context.Context, name string) error {
	var maybe maybeApplied
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: pushPath(name), observe: maybe.observe})
	if bool(maybe) && errors.Is(err, &api.Error{Code: api.CodeUnknownSubscription}) {
		return nil
	}
	return err
}

// SetPushState pauses (api.PushPaused) or resumes (api.PushActive) a
// subscription (PUT /v1/push/{name}/state).
func (c *Client) SetPushState(ctx context.Context, name, state string) (api.PushSubscription, error) {
	body, err := jsonBody(api.PushStateRequest{State: state})
	if err != nil {
		return api.PushSubscription{}, err
	}
	var out api.PushSubscription
	err = c.doJSON(ctx, &request{method: http.MethodPut, path: pushPath(name) + "/state", body: body, ctype: "application/json"}, &out)
	return out, err
}

// SeekPush moves a subscription's committed offsets to earliest, latest or
// timestamp:MS (POST /v1/push/{name}/seek); its pushers restart there.
func (c *Client) SeekPush(ctx context.Context, name, to string) (api.CommitResponse, error) {
	body, err := jsonBody(api.PushSeekRequest{To: to})
	if err != nil {
		return api.CommitResponse{}, err
	}
	var out api.CommitResponse
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: pushPath(name) + "/seek", body: body, ctype: "application/json"}, &out)
	return out, err
}

// RotatePushSecret makes a new signing secret (returned in Secret); the
// old ones keep signing for graceSeconds (0: the default, 24 h). Not
// retried after a failure that may have been applied.
func (c *Client) RotatePushSecret(ctx context.Context, name string, graceSeconds int64) (api.PushSubscription, error) {
	body, err := jsonBody(api.PushRotateRequest{GraceSeconds: graceSeconds})
	if err != nil {
		return api.PushSubscription{}, err
	}
	var out api.PushSubscription
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: pushPath(name) + "/secrets/rotate", body: body, ctype: "application/json", safety: retryUnapplied}, &out)
	return out, err
}

// PushTestResult is the answer of TestPush.
type PushTestResult struct {
	Status    int    `json:"status"`
	Verdict   string `json:"verdict"`
	LatencyMs int64  `json:"latency_ms"`
	Response  string `json:"response,omitempty"`
}

// TestPush sends one signed synthetic event to the subscription's endpoint
// (POST /v1/push/{name}/test) and returns how it was answered.
func (c *Client) TestPush(ctx context.Context, name string) (PushTestResult, error) {
	var out PushTestResult
	err := c.doJSON(ctx, &request{method: http.MethodPost, path: pushPath(name) + "/test", body: []byte("{}"), ctype: "application/json", safety: retryUnapplied}, &out)
	return out, err
}

// PushDeliveries reads a subscription's delivery log, newest first (GET
// /v1/push/{name}/deliveries): status failed, dead or all (""), at most
// limit entries (0: the server's 100).
func (c *Client) PushDeliveries(ctx context.Context, name, status string, limit int) ([]api.PushDelivery, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.PushDeliveries
	err := c.getJSON(ctx, pushPath(name)+"/deliveries", q, &out)
	return out.Deliveries, err
}
