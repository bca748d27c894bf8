package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
)

// NewProducerID issues an idempotent producer id at epoch 0: a sequential
// node under ProducersPath, whose sequence number is the id, holding the
// principal it was issued to ("" where authentication is off). Id 0, which
// means "no producer" in a batch header, is skipped. Gateways (POST
// /v1/producers) and brokers (Kafka's InitProducerId) issue ids from this
// one sequence, so no two producers share an id whichever door they came in.
func NewProducerID(ctx context.Context, c coord.Coordinator, principal string) (int64, error) {
	if err := coord.EnsurePath(ctx, c, ProducersPath); err != nil {
		return 0, err
	}
	data, _ := json.Marshal(api.ProducerRecord{Epoch: 0, Principal: principal})
	for {
		path, err := c.Create(ctx, ProducersPath+"/p-", data, coord.Sequential)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(path[strings.LastIndexByte(path, '/')+1:], "p-"), 10, 64)
		if err != nil {
			return 0, api.Errorf(api.CodeInternal, "unexpected producer node %q", path)
		}
		if n > 0 {
			return n, nil
		}
	}
}
