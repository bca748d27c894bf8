package broker

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// MaxPartitions bounds one topic's partition count.
const MaxPartitions = 10000

// controller is the broker's controller duty: it competes for the ephemeral
// /controller node and, while it holds it, is the only writer of topic records
// and partition states. Every write it makes is a Multi that checks the
// /controller_epoch version it won with, so a deposed controller's writes fail.
type controller struct {
	self int32
	c    coord.Coordinator
	view *cluster.View
	log  *slog.Logger
	// rebalanceEvery is how often leadership goes back to preferred replicas
	// (negative: never).
	rebalanceEvery time.Duration
	// sweep deletes a deleted topic's objects from the object store in the
	// background (nil without one).
	sweep func(topic, topicID string)
	// maxPartitionsPerBroker bounds the partition replicas a topic creation
	// may bring any broker to.
	maxPartitionsPerBroker int

	mu           sync.Mutex // guards the fields below
	active       bool
	epoch        int32
	epochVersion int32 // znode version of /controller_epoch when this controller won
}

// run competes for the controller role until ctx ends. Owned by the broker.
func (ctl *controller) run(ctx context.Context) {
	for ctx.Err() == nil {
		won, err := ctl.elect(ctx)
		if err != nil {
			ctl.log.Warn("controller election failed; retrying", "err", err)
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		// Wait until the /controller node changes (ours expired, or the
		// winner's went away), then compete again.
		exists, _, ch, err := ctl.c.ExistsW(ctx, cluster.ControllerPath)
		if err != nil {
			ctl.setInactive()
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		if !exists {
			ctl.setInactive()
			continue
		}
		if !won {
			select {
			case <-ch:
			case <-ctx.Done():
			}
			continue
		}
		ctl.log.Info("became controller", "epoch", ctl.currentEpoch())
		// While in office, react to every metadata change: elect leaders for
		// partitions whose leader died, drop dead followers from ISRs, and
		// periodically move leadership back to preferred replicas.
		ctl.serve(ctx, ch)
		ctl.setInactive()
	}
}

// abdicate gives the role up after the duty failed: inactive here, and
// /controller deleted when this session holds it, so the next election can
// be won. Best effort, bounded to 10 s.
func (ctl *controller) abdicate() {
	ctl.setInactive()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, st, err := ctl.c.Get(ctx, cluster.ControllerPath)
	if err == nil && st.EphemeralOwner == ctl.c.SessionID() {
		_ = ctl.c.Delete(ctx, cluster.ControllerPath, st.Version)
	}
}

func (ctl *controller) setInactive() {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	ctl.active = false
}

func (ctl *controller) currentEpoch() int32 {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return ctl.epoch
}

// isActive reports whether this broker is the controller.
func (ctl *controller) isActive() bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return ctl.active
}

// elect bumps /controller_epoch and creates /controller in one Multi, so the
// epoch and the role move together. won is false when another broker holds it.
func (ctl *controller) elect(ctx context.Context) (won bool, err error) {
	data, st, err := ctl.c.Get(ctx, cluster.ControllerEpochPath)
	epoch := int32(0)
	switch {
	case errors.Is(err, coord.ErrNoNode):
		if _, err := ctl.c.Create(ctx, cluster.ControllerEpochPath, []byte("0"), 0); err != nil && !errors.Is(err, coord.ErrNodeExists) {
			return false, err
		}
		return ctl.elect(ctx)
	case err != nil:
		return false, err
	default:
		n, perr := strconv.Atoi(string(data))
		if perr != nil {
			return false, perr
		}
		epoch = int32(n) + 1
	}
	reg, _ := json.Marshal(api.ControllerRegistration{BrokerID: ctl.self, Epoch: epoch})
	res, err := ctl.c.Multi(ctx,
		coord.SetOp(cluster.ControllerEpochPath, []byte(strconv.Itoa(int(epoch))), st.Version),
		coord.CreateOp(cluster.ControllerPath, reg, coord.Ephemeral),
	)
	if errors.Is(err, coord.ErrNodeExists) || errors.Is(err, coord.ErrBadVersion) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ctl.mu.Lock()
	ctl.active, ctl.epoch, ctl.epochVersion = true, epoch, res[0].Stat.Version
	ctl.mu.Unlock()
	return true, nil
}

// fence returns the op that makes a controller write conditional on this
// controller still being the latest.
func (ctl *controller) fence() (coord.Op, error) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if !ctl.active {
		return coord.Op{}, api.Errorf(api.CodeNotController, "broker %d is not the controller", ctl.self)
	}
	return coord.CheckOp(cluster.ControllerEpochPath, ctl.epochVersion), nil
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
	ops := []coord.Op{fence,
		coord.CreateOp(cluster.TopicPath(req.Name), data, 0),
		coord.CreateOp(cluster.PartitionsPath(req.Name), nil, 0),
	}
	epoch := ctl.currentEpoch()
	for p, replicas := range rec.Replicas {
		st, _ := json.Marshal(api.PartitionState{Leader: replicas[0], LeaderEpoch: 0, ISR: replicas, ControllerEpoch: epoch})
		ops = append(ops,
			coord.CreateOp(cluster.PartitionPath(req.Name, int32(p)), nil, 0),
			coord.CreateOp(cluster.PartitionStatePath(req.Name, int32(p)), st, 0))
	}
	if err := coord.EnsurePath(ctx, ctl.c, cluster.TopicsPath); err != nil {
		return err
	}
	_, err = ctl.c.Multi(ctx, ops...)
	switch {
	case errors.Is(err, coord.ErrNodeExists):
		return api.Errorf(api.CodeTopicAlreadyExists, "topic %q already exists", req.Name)
	case errors.Is(err, coord.ErrBadVersion):
		return api.Errorf(api.CodeNotController, "broker %d was replaced as controller", ctl.self)
	case err != nil:
		return err
	}
	ctl.log.Info("created topic", "topic", req.Name, "partitions", req.Partitions, "replication_factor", req.ReplicationFactor)
	return ctl.view.Refresh(ctx)
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
	parts, _, err := ctl.c.Children(ctx, cluster.PartitionsPath(name))
	if errors.Is(err, coord.ErrNoNode) {
		if ok, _, err := ctl.c.Exists(ctx, cluster.TopicPath(name)); err == nil && !ok {
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
		}
	} else if err != nil {
		return err
	}
	ops := []coord.Op{fence}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		// Remote-segment records go with the partition; the objects they
		// name are swept below.
		if recs, _, err := ctl.c.Children(ctx, remotePath(name, int32(n))); err == nil {
			for _, r := range recs {
				ops = append(ops, coord.DeleteOp(remotePath(name, int32(n))+"/"+r, coord.AnyVersion))
			}
			ops = append(ops, coord.DeleteOp(remotePath(name, int32(n)), coord.AnyVersion))
		} else if !errors.Is(err, coord.ErrNoNode) {
			return err
		}
		ops = append(ops,
			coord.DeleteOp(cluster.PartitionStatePath(name, int32(n)), coord.AnyVersion),
			coord.DeleteOp(cluster.PartitionPath(name, int32(n)), coord.AnyVersion))
	}
	if parts != nil {
		ops = append(ops, coord.DeleteOp(cluster.PartitionsPath(name), coord.AnyVersion))
	}
	ops = append(ops, coord.DeleteOp(cluster.TopicPath(name), coord.AnyVersion))
	_, err = ctl.c.Multi(ctx, ops...)
	switch {
	case errors.Is(err, coord.ErrNoNode):
		return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
	case errors.Is(err, coord.ErrBadVersion):
		return api.Errorf(api.CodeNotController, "broker %d was replaced as controller", ctl.self)
	case err != nil:
		return err
	}
	ctl.log.Info("deleted topic", "topic", name)
	if ctl.sweep != nil {
		if tm, ok := ctl.view.Current().Topics[name]; ok {
			ctl.sweep(name, tm.Record.ID)
		}
	}
	return ctl.view.Refresh(ctx)
}

// assignReplicas spreads partitions over brokers round-robin from a random
// start, each partition's replicas on consecutive brokers, so that leaders
// (the first replica) are balanced.
func assignReplicas(brokers []int32, partitions, rf int) [][]int32 {
	start := rand.IntN(len(brokers))
	out := make([][]int32, partitions)
	for p := range out {
		for r := 0; r < rf; r++ {
			out[p] = append(out[p], brokers[(start+p+r)%len(brokers)])
		}
	}
	return out
}

func newTopicID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// checkPartitionBudget refuses an assignment that would bring a broker past
// max partition replicas (POLICY_VIOLATION): every replica costs the broker
// open segment files, index memory and a leader or follower loop.
func checkPartitionBudget(md *cluster.Metadata, assignment [][]int32, max int) error {
	if max <= 0 {
		return nil
	}
	held := map[int32]int{}
	for _, t := range md.Topics {
		for _, replicas := range t.Record.Replicas {
			for _, id := range replicas {
				held[id]++
			}
		}
	}
	adds := map[int32]int{}
	for _, replicas := range assignment {
		for _, id := range replicas {
			adds[id]++
		}
	}
	for id, n := range adds {
		if held[id]+n > max {
			return api.Errorf(api.CodePolicyViolation, "the topic would bring broker %d to %d partition replicas (it holds %d); %s is %d",
				id, held[id]+n, held[id], api.LimitMaxPartitionsPerBroker, max)
		}
	}
	return nil
}
