package brokerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/sluice-io/sluice/api"
)

// CreatePartitions asks the controller to grow a topic to req.Count
// partitions (or, with req.ValidateOnly, to check that it could).
func (c *Client) CreatePartitions(ctx context.Context, controller, topic string, req api.CreatePartitionsRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.expand(controller, PathTopicPartitions, topic, 0), bytes.NewReader(b))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	return c.doJSON(hr, nil)
}
