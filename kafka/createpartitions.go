package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// PartitionCreator is the part of a Backend that grows topics, through the
// controller; a Backend without it answers CreatePartitions INVALID_REQUEST.
type PartitionCreator interface {
	// CreatePartitions grows a topic to req.Count partitions (or checks
	// that it could, with req.ValidateOnly). Errors as the HTTP API's.
	CreatePartitions(ctx context.Context, topic string, req api.CreatePartitionsRequest) error
}

// handleCreatePartitions grows topics as POST /v1/topics/{t}/partitions
// does: a count not above the present one is INVALID_PARTITIONS, a manual
// assignment of the new partitions INVALID_REQUEST (placement is the
// controller's), a topic named twice INVALID_REQUEST for both. Keys map to
// partitions by murmur2 modulo the count, so after a topic grows new
// records of a key may land on another partition, as in Kafka.
func (s *Server) handleCreatePartitions(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	pc, served := s.opts.Backend.(PartitionCreator)
	named := map[string]int{}
	for _, t := range req.Topics {
		named[t.Topic]++
	}
	for i, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		switch {
		case i >= maxAdminTopics:
			err = api.Errorf(api.CodeInvalidRequest, "more than %d topics in one request", maxAdminTopics)
		case !served:
			err = api.Errorf(api.CodeInvalidRequest, "this listener cannot add partitions")
		case named[t.Topic] > 1:
			err = api.Errorf(api.CodeInvalidRequest, "topic %q is named more than once", t.Topic)
		case t.Assignment != nil:
			err = api.Errorf(api.CodeInvalidRequest, "replica placement is the controller's: a manual assignment is not served")
		default:
			err = pc.CreatePartitions(ctx, t.Topic, api.CreatePartitionsRequest{Count: int(t.Count), ValidateOnly: req.ValidateOnly})
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = errorCode(err), errorMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
