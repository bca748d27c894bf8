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

	// ahead holds, per partition this controller wrote in its current
	// term, the znode version its write made, until the View shows it
	// (electLeaders). Owned by the serve goroutine.
	ahead map[partitionKey]int32

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
		fn, ch := coord.WatchChan()
		exists, _, err := ctl.c.ExistsW(ctx, cluster.ControllerPath, fn)
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
// open segment files, index memory and its leader or follower state.
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
