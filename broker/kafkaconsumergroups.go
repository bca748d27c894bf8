package broker

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/offsets"
)

// The Kafka listener's consumer group protocol (kafka.ConsumerGroups):
// KIP-848 heartbeats on the same groupCoordinator as the classic protocol
// and the HTTP members.
var _ kafka.ConsumerGroups = kafkaBackend{}

func (k kafkaBackend) ConsumerHeartbeat(ctx context.Context, group string, h kafka.ConsumerHeartbeat) (kafka.ConsumerHeartbeatResult, error) {
	b := k.b
	gc, err := b.coordinatorFor(group)
	if err != nil {
		return kafka.ConsumerHeartbeatResult{}, err
	}
	oh := offsets.ConsumerHeartbeat{MemberID: h.MemberID, InstanceID: h.InstanceID, Epoch: h.Epoch, Topics: h.Topics, TopicRegex: h.TopicRegex, Owned: h.Owned,
		RebalanceTimeoutMs: h.RebalanceTimeoutMs, ServerAssignor: h.ServerAssignor, ClientID: h.ClientID, ClientHost: h.ClientHost}
	res := kafka.ConsumerHeartbeatResult{HeartbeatIntervalMs: offsets.ConsumerHeartbeatMs}
	meta, topics := b.groupMeta(), b.topicNames.current(b.view.Current())
	err = gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
		return st.HeartbeatConsumer(group, oh, meta, topics, now)
	}, func(st *offsets.State) error {
		if h.Epoch < 0 {
			return nil
		}
		e, tps, err := st.ConsumerAssignment(group, h.MemberID)
		res.Epoch, res.Assignment = e, tps
		return err
	})
	return res, err
}
