package broker

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// Topic administration for the Kafka listener (CreateTopics, DeleteTopics,
// IncrementalAlterConfigs): the controller's own writes, called here when
// this broker is the controller and through its internal API otherwise,
// as the gateway calls them for the HTTP API.

// adminTimeout bounds one administrative write.
const adminTimeout = 30 * time.Second

// onController runs local when this broker is the active controller, else
// remote with the controller's internal address.
func (k kafkaBackend) onController(ctx context.Context, local func(context.Context) error, remote func(ctx context.Context, addr string) error) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if k.b.ctl.isActive() {
		return local(ctx)
	}
	md := k.b.view.Current()
	reg, ok := md.Brokers[md.Controller.BrokerID]
	if !ok {
		return api.Errorf(api.CodeNotController, "no controller is registered")
	}
	return remote(ctx, reg.Address)
}

func (k kafkaBackend) CreateTopic(ctx context.Context, req api.CreateTopicRequest, validateOnly bool) error {
	if validateOnly {
		md := k.b.view.Current()
		if err := api.ValidateTopicName(req.Name); err != nil {
			return err
		}
		if _, ok := md.Topics[req.Name]; ok {
			return api.Errorf(api.CodeTopicAlreadyExists, "topic %q already exists", req.Name)
		}
		if req.Partitions < 1 || req.Partitions > MaxPartitions {
			return api.Errorf(api.CodeInvalidPartitions, "partitions=%d: want 1 to %d", req.Partitions, MaxPartitions)
		}
		if n := len(md.Brokers); req.ReplicationFactor < 1 || req.ReplicationFactor > n {
			return api.Errorf(api.CodeInvalidReplication, "replication_factor=%d: want 1 to %d (the live brokers)", req.ReplicationFactor, n)
		}
		_, err := api.ParseTopicConfig(req.Configs, req.ReplicationFactor)
		return err
	}
	err := k.onController(ctx,
		func(ctx context.Context) error { return k.b.ctl.createTopic(ctx, req) },
		func(ctx context.Context, addr string) error { return k.b.peers.CreateTopic(ctx, addr, req) })
	if err == nil {
		k.refresh(ctx)
	}
	return err
}

func (k kafkaBackend) DeleteTopic(ctx context.Context, topic string) error {
	err := k.onController(ctx,
		func(ctx context.Context) error { return k.b.ctl.deleteTopic(ctx, topic) },
		func(ctx context.Context, addr string) error { return k.b.peers.DeleteTopic(ctx, addr, topic) })
	if err == nil {
		k.refresh(ctx)
	}
	return err
}

func (k kafkaBackend) AlterTopicConfig(ctx context.Context, topic string, req api.AlterTopicConfigRequest, validateOnly bool) error {
	if validateOnly {
		tm, ok := k.b.view.Current().Topics[topic]
		if !ok {
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic)
		}
		_, err := api.AlterTopicConfigs(tm.Record.Configs, req, len(firstOr(tm.Record.Replicas)))
		return err
	}
	err := k.onController(ctx,
		func(ctx context.Context) error { return k.b.ctl.alterTopicConfig(ctx, topic, req) },
		func(ctx context.Context, addr string) error { return k.b.peers.AlterTopicConfig(ctx, addr, topic, req) })
	if err == nil {
		k.refresh(ctx)
	}
	return err
}

// refresh re-reads the metadata after a write, so that this broker's next
// Metadata answer has it (best effort: the watch brings it anyway).
func (k kafkaBackend) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = k.b.view.Refresh(rctx)
}

// EnsureOffsetsTopic creates __consumer_offsets as the gateway does
// (api.OffsetsTopicRequest), with Options.OffsetsTopicPartitions
// partitions, when the metadata does not have it; one another made first
// is fine.
func (k kafkaBackend) EnsureOffsetsTopic(ctx context.Context) error {
	md := k.b.view.Current()
	if _, ok := md.Topics[api.OffsetsTopic]; ok {
		return nil
	}
	if len(md.Brokers) == 0 {
		return api.Errorf(api.CodeCoordinatorNotAvail, "no brokers are registered")
	}
	req := api.OffsetsTopicRequest(k.b.opts.OffsetsTopicPartitions, len(md.Brokers))
	// The broker makes the topic for itself, not for the client that asked
	// first (who may create no topic).
	cctx := auth.WithPrincipal(ctx, brokerapi.PrincipalGateway)
	err := k.CreateTopic(cctx, req, false)
	switch {
	case err == nil:
		k.b.log.Info("created the consumer offsets topic for a Kafka client", "partitions", req.Partitions, "replication_factor", req.ReplicationFactor)
	case errors.Is(err, api.ErrTopicExists):
		err = nil
		k.refresh(ctx)
	}
	return err
}
