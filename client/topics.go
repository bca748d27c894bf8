package client

import (
	"context"
	"net/http"

	"github.com/sluice-io/sluice/api"
)

// CreateTopic creates a topic (POST /v1/topics) and returns it as created.
// Zero fields take the server's defaults: 1 partition, a replication factor
// of min(3, live brokers), and no configs of its own (every config at its
// default). The gateway answers once every partition's leader is ready, so a
// produce right after succeeds.
//
// Errors: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_NAME, INVALID_PARTITIONS,
// INVALID_REPLICATION_FACTOR, INVALID_CONFIG. It is retried only when the
// failure proves nothing was created (no controller, a refused connection);
// after REQUEST_TIMED_OUT or a lost answer the topic may or may not exist,
// and the error says so rather than a retry answering TOPIC_ALREADY_EXISTS.
func (c *Client) CreateTopic(ctx context.Context, t api.CreateTopicRequest) (api.Topic, error) {
	body, err := jsonBody(t)
	if err != nil {
		return api.Topic{}, err
	}
	var out api.Topic
	err = c.doJSON(ctx, &request{
		method: http.MethodPost, path: "/v1/topics", body: body, ctype: "application/json",
		safety: retryUnapplied,
	}, &out)
	return out, err
}

// ListTopics returns every topic, sorted by name, each with its partitions'
// positions (GET /v1/topics). Retried on every retriable failure.
func (c *Client) ListTopics(ctx context.Context) ([]api.Topic, error) {
	var out api.TopicList
	err := c.getJSON(ctx, "/v1/topics", nil, &out)
	return out.Topics, err
}

// GetTopic describes one topic (GET /v1/topics/{topic}); positions are -1
// where a leader did not answer. UNKNOWN_TOPIC when there is no such topic.
// Retried on every retriable failure.
func (c *Client) GetTopic(ctx context.Context, name string) (api.Topic, error) {
	var out api.Topic
	err := c.getJSON(ctx, "/v1/topics/"+escape(name), nil, &out)
	return out, err
}

// DeleteTopic deletes a topic (DELETE /v1/topics/{topic}); it returns once
// the topic's metadata is gone. UNKNOWN_TOPIC when there is no such topic.
// Retried only when the failure proves nothing was deleted.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/topics/" + escape(name), safety: retryUnapplied})
	return err
}

// AlterTopicConfig sets and removes configs of a topic (PATCH
// /v1/topics/{topic}/configs) and returns the topic as it is afterwards.
// Configs in alter.Set take the given values, those in alter.Delete their
// defaults; the rest keep theirs. Errors: UNKNOWN_TOPIC, INVALID_CONFIG,
// INVALID_REQUEST. Retried on every retriable failure: applying the same
// alteration twice changes nothing more.
func (c *Client) AlterTopicConfig(ctx context.Context, name string, alter api.AlterTopicConfigRequest) (api.Topic, error) {
	body, err := jsonBody(alter)
	if err != nil {
		return api.Topic{}, err
	}
	var out api.Topic
	err = c.doJSON(ctx, &request{
		method: http.MethodPatch, path: "/v1/topics/" + escape(name) + "/configs", body: body, ctype: "application/json",
	}, &out)
	return out, err
}
