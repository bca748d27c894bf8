package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Topic writes. A topic's nodes (its record, and per partition a node and
// its state) can be more than one coordinator request may carry: ZooKeeper
// refuses a request past jute.maxbuffer (1 MiB by default), which two
// creates per partition pass at a few thousand partitions. So the
// controller writes a topic in several Multis of at most maxMultiBytes,
// each led by its fence, and readers never see a topic half written: the
// View shows a topic only when its record is not marked deleting and every
// partition's state exists.
//
//   - Create: the record and the partitions node first, then each
//     partition's node and state, in order; the topic appears with the last
//     state.
//   - Delete: the record is marked deleting first (the topic disappears at
//     once, and brokers drop their replicas), then each partition's
//     remote-segment records, state and node, then the record.
//   - A controller that dies halfway leaves a topic no reader sees; the next
//     one finishes it (finishPending, at the start of its duty): a marked
//     topic is deleted, an unmarked one created from its record.

// maxMultiBytes bounds what one Multi carries (paths and data, with an
// allowance per op), well under ZooKeeper's 1 MiB default.
const maxMultiBytes = 256 << 10

// opCost is what an op adds to a request, roughly: its path, its data,
// and the op's header and ACL.
func opCost(path string, data []byte) int { return len(path) + len(data) + 64 }

// multiBatch gathers ops into Multis of at most maxMultiBytes.
type multiBatch struct {
	chunks [][]coord.Op
	size   int
}

// add appends ops (cost bytes in all) to the current Multi, starting a new
// one when they would not fit. Ops added together stay together.
func (b *multiBatch) add(cost int, ops ...coord.Op) {
	if len(b.chunks) == 0 || (b.size+cost > maxMultiBytes && len(b.chunks[len(b.chunks)-1]) > 0) {
		b.chunks = append(b.chunks, nil)
		b.size = 0
	}
	b.chunks[len(b.chunks)-1] = append(b.chunks[len(b.chunks)-1], ops...)
	b.size += cost
}

// run sends the Multis in order, each led by fence.
func (ctl *controller) runBatch(ctx context.Context, fence coord.Op, b *multiBatch) error {
	for _, chunk := range b.chunks {
		if _, err := ctl.c.Multi(ctx, append([]coord.Op{fence}, chunk...)...); err != nil {
			return err
		}
	}
	return nil
}

// createTopic validates and writes a topic: its record and each partition's
// first state (leader = the first replica, ISR = all replicas, epoch 0).
func (ctl *controller) createTopic(ctx context.Context, req api.CreateTopicRequest) error {
	if err := api.ValidateTopicName(req.Name); err != nil {
		return err
	}
	if req.Partitions < 1 || req.Partitions > MaxPartitions {
		return api.Errorf(api.CodeInvalidPartitions, "partitions=%d: want 1 to %d", req.Partitions, MaxPartitions)
	}
	// Assign over the brokers alive now, not as of the last watch event.
	if err := ctl.viewRefresh(ctx); err != nil {
		return err
	}
	md := ctl.view.Current()
	brokers := md.BrokerIDs()
	if req.ReplicationFactor < 1 || req.ReplicationFactor > len(brokers) {
		return api.Errorf(api.CodeInvalidReplication, "replication_factor=%d: want 1 to %d (the live brokers)", req.ReplicationFactor, len(brokers))
	}
	if _, err := api.ParseTopicConfig(req.Configs, req.ReplicationFactor); err != nil {
		return err
	}
	fence, err := ctl.fence()
	if err != nil {
		return err
	}
	rec := api.TopicRecord{ID: newTopicID(), Replicas: assignReplicas(brokers, req.Partitions, req.ReplicationFactor), Configs: req.Configs}
	if err := checkPartitionBudget(md, rec.Replicas, ctl.maxPartitionsPerBroker); err != nil {
		return err
	}
	if rec.Configs == nil {
		rec.Configs = map[string]string{}
	}
	data, _ := json.Marshal(rec)
	if err := coord.EnsurePath(ctx, ctl.c, cluster.TopicsPath); err != nil {
		return err
	}
	var b multiBatch
	b.add(opCost(cluster.TopicPath(req.Name), data)+opCost(cluster.PartitionsPath(req.Name), nil),
		coord.CreateOp(cluster.TopicPath(req.Name), data, 0),
		coord.CreateOp(cluster.PartitionsPath(req.Name), nil, 0))
	ctl.addPartitions(&b, req.Name, rec, nil)
	err = ctl.runBatch(ctx, fence, &b)
	switch {
	case errors.Is(err, coord.ErrNodeExists):
		return api.Errorf(api.CodeTopicAlreadyExists, "topic %q already exists", req.Name)
	case errors.Is(err, coord.ErrBadVersion):
		return api.Errorf(api.CodeNotController, "broker %d was replaced as controller", ctl.self)
	case err != nil:
		return err
	}
	ctl.log.Info("created topic", "topic", req.Name, "partitions", req.Partitions, "replication_factor", req.ReplicationFactor, "requests", len(b.chunks))
	return ctl.view.Refresh(ctx)
}

// addPartitions adds the creates of each partition's node and first state
// to b, but for the partitions in have.
func (ctl *controller) addPartitions(b *multiBatch, name string, rec api.TopicRecord, have map[int32]bool) {
	epoch := ctl.currentEpoch()
	for p, replicas := range rec.Replicas {
		if have[int32(p)] {
			continue
		}
		st, _ := json.Marshal(api.PartitionState{Leader: replicas[0], LeaderEpoch: 0, ISR: replicas, ControllerEpoch: epoch})
		pp, sp := cluster.PartitionPath(name, int32(p)), cluster.PartitionStatePath(name, int32(p))
		b.add(opCost(pp, nil)+opCost(sp, st), coord.CreateOp(pp, nil, 0), coord.CreateOp(sp, st, 0))
	}
}

// deleteTopic removes a topic's nodes; brokers then delete their replicas.
func (ctl *controller) deleteTopic(ctx context.Context, name string) error {
	if err := api.ValidateTopicName(name); err != nil {
		return err
	}
	fence, err := ctl.fence()
	if err != nil {
		return err
	}
	data, st, err := ctl.c.Get(ctx, cluster.TopicPath(name))
	if errors.Is(err, coord.ErrNoNode) {
		return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
	} else if err != nil {
		return err
	}
	var rec api.TopicRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("topic %q: unreadable record: %w", name, err)
	}
	if !rec.Deleting {
		rec.Deleting = true
		marked, _ := json.Marshal(rec)
		_, err = ctl.c.Multi(ctx, fence, coord.SetOp(cluster.TopicPath(name), marked, st.Version))
		switch {
		case errors.Is(err, coord.ErrNoNode):
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
		case errors.Is(err, coord.ErrBadVersion):
			// The fence, or the record changed under us: ask again.
			return api.Errorf(api.CodeNotController, "broker %d was replaced as controller, or topic %q changed meanwhile", ctl.self, name)
		case err != nil:
			return err
		}
	}
	if err := ctl.finishDelete(ctx, fence, name); err != nil {
		return err
	}
	ctl.log.Info("deleted topic", "topic", name)
	if ctl.sweep != nil {
		ctl.sweep(name, rec.ID)
	}
	return ctl.view.Refresh(ctx)
}

// finishDelete deletes what is left of a topic marked deleting. What each
// partition holds is read for all of them at once (coord.Pipeline), then
// deleted in bounded Multis.
func (ctl *controller) finishDelete(ctx context.Context, fence coord.Op, name string) error {
	parts, _, err := ctl.c.Children(ctx, cluster.PartitionsPath(name))
	if err != nil && !errors.Is(err, coord.ErrNoNode) {
		return err
	}
	var pids []int32
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err == nil {
			pids = append(pids, int32(n))
		}
	}
	type held struct {
		remote   []string // remote-segment records; nil without the remote node
		hasState bool
	}
	found := make([]held, len(pids))
	err = coord.Pipeline(ctx, len(pids), 0, func(ctx context.Context, i int) error {
		pid := pids[i]
		// Remote-segment records go with the partition; the objects they
		// name are swept afterwards.
		recs, _, err := ctl.c.Children(ctx, remotePath(name, pid))
		switch {
		case err == nil:
			found[i].remote = append([]string{}, recs...)
		case !errors.Is(err, coord.ErrNoNode):
			return err
		}
		found[i].hasState, _, err = ctl.c.Exists(ctx, cluster.PartitionStatePath(name, pid))
		return err
	})
	if err != nil {
		return err
	}
	var b multiBatch
	for i, pid := range pids {
		if found[i].remote != nil {
			for _, r := range found[i].remote {
				rp := remotePath(name, pid) + "/" + r
				b.add(opCost(rp, nil), coord.DeleteOp(rp, coord.AnyVersion))
			}
			b.add(opCost(remotePath(name, pid), nil), coord.DeleteOp(remotePath(name, pid), coord.AnyVersion))
		}
		sp, pp := cluster.PartitionStatePath(name, pid), cluster.PartitionPath(name, pid)
		if found[i].hasState {
			b.add(opCost(sp, nil), coord.DeleteOp(sp, coord.AnyVersion))
		}
		b.add(opCost(pp, nil), coord.DeleteOp(pp, coord.AnyVersion))
	}
	if parts != nil {
		b.add(opCost(cluster.PartitionsPath(name), nil), coord.DeleteOp(cluster.PartitionsPath(name), coord.AnyVersion))
	}
	b.add(opCost(cluster.TopicPath(name), nil), coord.DeleteOp(cluster.TopicPath(name), coord.AnyVersion))
	err = ctl.runBatch(ctx, fence, &b)
	switch {
	case errors.Is(err, coord.ErrBadVersion):
		return api.Errorf(api.CodeNotController, "broker %d was replaced as controller", ctl.self)
	case errors.Is(err, coord.ErrNoNode), errors.Is(err, coord.ErrNotEmpty):
		// Another controller is finishing it too, or a record was added
		// meanwhile: the deletion is retriable, and finishPending retries.
		return api.Errorf(api.CodeNotController, "topic %q changed while it was being deleted: %v", name, err)
	}
	return err
}

// finishCreate creates the partitions of a half-written topic that have
// no state yet, from its record; which those are is read for every
// partition node at once.
func (ctl *controller) finishCreate(ctx context.Context, fence coord.Op, name string, rec api.TopicRecord) error {
	if err := coord.EnsurePath(ctx, ctl.c, cluster.PartitionsPath(name)); err != nil {
		return err
	}
	parts, _, err := ctl.c.Children(ctx, cluster.PartitionsPath(name))
	if err != nil {
		return err
	}
	var pids []int32
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err == nil && n >= 0 && n < len(rec.Replicas) {
			pids = append(pids, int32(n))
		}
	}
	hasState := make([]bool, len(pids))
	err = coord.Pipeline(ctx, len(pids), 0, func(ctx context.Context, i int) error {
		var err error
		hasState[i], _, err = ctl.c.Exists(ctx, cluster.PartitionStatePath(name, pids[i]))
		return err
	})
	if err != nil {
		return err
	}
	var b multiBatch
	have := map[int32]bool{}
	for i, n := range pids {
		have[n] = true
		if hasState[i] {
			continue
		}
		// A node without its state: the two were written together, so
		// this is another writer's; create the state alone.
		sp := cluster.PartitionStatePath(name, n)
		st, _ := json.Marshal(api.PartitionState{Leader: rec.Replicas[n][0], ISR: rec.Replicas[n], ControllerEpoch: ctl.currentEpoch()})
		b.add(opCost(sp, st), coord.CreateOp(sp, st, 0))
	}
	ctl.addPartitions(&b, name, rec, have)
	return ctl.runBatch(ctx, fence, &b)
}

// finishPending finishes every topic a controller left half written:
// deletes the ones marked deleting, creates the rest.
func (ctl *controller) finishPending(ctx context.Context) error {
	fence, err := ctl.fence()
	if err != nil {
		return err
	}
	names, _, err := ctl.c.Children(ctx, cluster.TopicsPath)
	if errors.Is(err, coord.ErrNoNode) {
		return nil
	} else if err != nil {
		return err
	}
	visible := ctl.view.Current().Topics
	var errs []error
	for _, name := range names {
		if _, ok := visible[name]; ok {
			continue
		}
		data, _, err := ctl.c.Get(ctx, cluster.TopicPath(name))
		if errors.Is(err, coord.ErrNoNode) {
			continue
		} else if err != nil {
			return err
		}
		var rec api.TopicRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			ctl.log.Warn("unreadable topic record", "topic", name, "err", err)
			continue
		}
		if rec.Deleting {
			err = ctl.finishDelete(ctx, fence, name)
			if err == nil && ctl.sweep != nil {
				ctl.sweep(name, rec.ID)
			}
		} else {
			err = ctl.finishCreate(ctx, fence, name, rec)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("topic %q: %w", name, err))
			continue
		}
		ctl.log.Info("finished a half-written topic", "topic", name, "deleted", rec.Deleting)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctl.viewRefresh(ctx)
}
