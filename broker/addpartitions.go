package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
	"github.com/sluice-io/sluice/kafka"
)

// createPartitions grows a topic to count partitions. The new partitions'
// nodes and first states are written first, then the topic's record with
// their replicas, conditionally on the version read: readers build a topic
// from its record's replicas, so they see the old partitions until the
// record is rewritten and all of them after, never a part. Partition nodes
// past the record's count that a controller left before it could rewrite
// the record are no partition of the topic: they are deleted first in the
// same requests. Errors: UNKNOWN_TOPIC, INVALID_PARTITIONS (not more than
// now, or past MaxPartitions), INVALID_REPLICATION (fewer live brokers than
// the replication factor), POLICY_VIOLATION (a broker's partition budget),
// NOT_CONTROLLER (the topic or the controller changed meanwhile: retriable).
func (ctl *controller) createPartitions(ctx context.Context, name string, req api.CreatePartitionsRequest) error {
	if err := api.ValidateTopicName(name); err != nil {
		return err
	}
	if req.Count < 1 || req.Count > MaxPartitions {
		return api.Errorf(api.CodeInvalidPartitions, "count=%d: want 1 to %d", req.Count, MaxPartitions)
	}
	if err := ctl.viewRefresh(ctx); err != nil {
		return err
	}
	fence, err := ctl.fence()
	if err != nil {
		return err
	}
	data, stat, err := ctl.c.Get(ctx, cluster.TopicPath(name))
	if errors.Is(err, coord.ErrNoNode) {
		return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
	} else if err != nil {
		return err
	}
	var rec api.TopicRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("topic %q: reading its record: %w", name, err)
	}
	if rec.Deleting {
		return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	old := len(rec.Replicas)
	if req.Count <= old {
		return api.Errorf(api.CodeInvalidPartitions, "topic %q has %d partitions: count=%d does not add any (partitions can only be added)", name, old, req.Count)
	}
	md := ctl.view.Current()
	brokers := md.BrokerIDs()
	rf := len(firstOr(rec.Replicas))
	if rf < 1 || rf > len(brokers) {
		return api.Errorf(api.CodeInvalidReplication, "topic %q has replication factor %d and %d brokers are live", name, rf, len(brokers))
	}
	added := assignReplicas(brokers, req.Count, rf)[old:]
	if err := checkPartitionBudget(md, added, ctl.maxPartitionsPerBroker); err != nil {
		return err
	}
	if req.ValidateOnly {
		return nil
	}

	parts, _, err := ctl.c.Children(ctx, cluster.PartitionsPath(name))
	if err != nil {
		return err
	}
	var b multiBatch
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < old {
			continue
		}
		// Left by an add that did not finish: no reader ever saw it, so no
		// broker opened it.
		sp, pp := cluster.PartitionStatePath(name, int32(n)), cluster.PartitionPath(name, int32(n))
		if ok, _, err := ctl.c.Exists(ctx, sp); err != nil {
			return err
		} else if ok {
			b.add(opCost(sp, nil), coord.DeleteOp(sp, coord.AnyVersion))
		}
		b.add(opCost(pp, nil), coord.DeleteOp(pp, coord.AnyVersion))
	}
	grown := rec
	grown.Replicas = append(append([][]int32{}, rec.Replicas...), added...)
	have := make(map[int32]bool, old)
	for p := range old {
		have[int32(p)] = true
	}
	ctl.addPartitions(&b, name, grown, have)
	newData, _ := json.Marshal(grown)
	// The record last, in a Multi of its own if need be.
	b.add(opCost(cluster.TopicPath(name), newData), coord.SetOp(cluster.TopicPath(name), newData, stat.Version))
	err = ctl.runBatch(ctx, fence, &b)
	switch {
	case errors.Is(err, coord.ErrBadVersion), errors.Is(err, coord.ErrNodeExists), errors.Is(err, coord.ErrNoNode):
		return api.Errorf(api.CodeNotController, "broker %d was replaced as controller, or topic %q changed meanwhile: %v", ctl.self, name, err)
	case err != nil:
		return err
	}
	ctl.log.Info("added partitions", "topic", name, "partitions", req.Count, "was", old, "requests", len(b.chunks))
	return ctl.view.Refresh(ctx)
}

// handleCreatePartitions answers PathTopicPartitions on the controller.
func (b *Broker) handleCreatePartitions(w http.ResponseWriter, r *http.Request) {
	var req api.CreatePartitionsRequest
	if err := apihttp.DecodeJSON(w, r, &req, 1<<10, internalJSON); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := b.ctl.createPartitions(r.Context(), chi.URLParam(r, "topic"), req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

var _ kafka.PartitionCreator = kafkaBackend{}

// CreatePartitions is the Kafka listener's CreatePartitions, on the
// controller (here, or the one this broker's view names).
func (k kafkaBackend) CreatePartitions(ctx context.Context, topic string, req api.CreatePartitionsRequest) error {
	err := k.onController(ctx,
		func(ctx context.Context) error { return k.b.ctl.createPartitions(ctx, topic, req) },
		func(ctx context.Context, addr string) error { return k.b.peers.CreatePartitions(ctx, addr, topic, req) })
	if err == nil && !req.ValidateOnly {
		k.refresh(ctx)
	}
	return err
}
