package client

import (
	"context"
	"net/http"

	"github.com/sluice-io/sluice/api"
)

// CreatePartitions grows a topic to count partitions (POST
// /v1/topics/{topic}/partitions) and returns the topic as it is afterwards;
// validateOnly checks without adding any. Keys are placed by murmur2
// modulo the partition count: once a topic grows, new records of a key may
// go to another partition than its earlier ones. Errors: UNKNOWN_TOPIC,
// INVALID_PARTITIONS (a count not above the present one), INVALID_REPLICATION,
// POLICY_VIOLATION. Not retried after the request may have been applied: a
// second try of an applied one fails INVALID_PARTITIONS.
func (c *Client) CreatePartitions(ctx context.Context, name string, count int, validateOnly bool) (api.Topic, error) {
	body, err := jsonBody(api.CreatePartitionsRequest{Count: count, ValidateOnly: validateOnly})
	if err != nil {
		return api.Topic{}, err
	}
	var out api.Topic
	err = c.doJSON(ctx, &request{
		method: http.MethodPost, path: "/v1/topics/" + escape(name) + "/partitions", body: body, ctype: "application/json",
		safety: retryUnapplied,
	}, &out)
	return out, err
}
