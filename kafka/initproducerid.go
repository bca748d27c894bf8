package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initProducerTimeout bounds the coordinator write that issues an id.
const initProducerTimeout = 30 * time.Second

// handleInitProducerID issues an idempotent producer a new id at epoch 0,
// from the sequence the HTTP producers' ids come from (Backend), so its
// batches meet the same per-partition producer state in the logs. As in
// Kafka, a request without a transactional id always gets a new id, even
// when it names its old one (v3+, after an error the client cannot
// recover from otherwise). Transactions are not served: a transactional
// id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the answer
// that tells a client it cannot use transactions here.
func (s *Server) handleInitProducerID(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, initProducerTimeout)
	defer cancel()
	id, epoch, err := s.opts.Backend.InitProducerID(ctx)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, epoch
	return resp, nil
}
