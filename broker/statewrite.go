package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Partition-state writes in bulk. The controller after a failover, a leader
// whose followers came back, a restarted broker handing back what it led:
// each has hundreds or thousands of states to change at once, and one
// conditional write after another costs a coordinator round trip (and, on
// ZooKeeper, a log fsync) each. writeStates carries them in Multis of at
// most maxStatesPerMulti, stateMultisInFlight of them on the wire at once.
//
// The guarantees stay those of one write each: every SetOp is conditional
// on the znode version its state was computed from, so no change made
// meanwhile (a leader's ISR change, another controller's election) is lost;
// and with a fence (the controller's Check of /controller_epoch) every
// Multi starts with it, so a deposed controller's batch writes nothing.
//
// A Multi is all or nothing, so one stale version fails its batch. The
// coordinator names the op that failed (coord.MultiError): that partition
// alone lost its race and is reported for its writer to read again and
// decide again; the rest of the batch is sent again without it. A batch
// with k stale states so costs k+1 round trips, and the other batches are
// not held up. A failed fence ends the batch (every op in it is reported
// fenced), and an answer that names no op (a lost connection: the batch may
// or may not have been applied) ends it too, reported failed for the writer
// to read back before it retries.

// maxStatesPerMulti bounds the states of one Multi: a few hundred is one
// small ZooKeeper transaction (about 100 bytes a state) and one fsync, and
// keeps what one stale version sends again small.
const maxStatesPerMulti = 200

// stateMultisInFlight is how many Multis writeStates has on the wire at
// once: enough to keep ZooKeeper's commit pipeline busy (it group-commits
// what arrives together), and each stale state delays only its own batch.
const stateMultisInFlight = 4

// stateWrite is one conditional write of a partition's state: state, computed
// from the state read at znode version.
type stateWrite struct {
	topic     string
	partition int32
	state     api.PartitionState
	version   int32
}

// writeOutcome is what became of one stateWrite.
type writeOutcome uint8

const (
	// writePending: not sent (ctx ended before its batch went out).
	writePending writeOutcome = iota
	// writeDone: written; stateResult.version is the new znode version.
	writeDone
	// writeLost: the state changed since it was read, or is gone
	// (ErrBadVersion, ErrNoNode): nothing written; read again, decide again.
	writeLost
	// writeFenced: the fence failed (the writer was deposed); nothing of the
	// batch was written.
	writeFenced
	// writeFailed: no answer that says (a lost connection, a timeout): the
	// write may or may not have been applied, so read back before retrying.
	writeFailed
)

// stateResult is the outcome of one stateWrite.
type stateResult struct {
	outcome writeOutcome
	version int32 // the new znode version, for writeDone
	err     error // why, for writeFenced and writeFailed
}

// writeStates writes each state conditionally on its version, in batches led
// by fence when it is given, and returns one result per write, in order.
// It blocks until every batch has its answer or ctx ends.
func writeStates(ctx context.Context, c coord.Coordinator, fence *coord.Op, writes []stateWrite) []stateResult {
	results := make([]stateResult, len(writes))
	ops := make([]coord.Op, len(writes))
	costs := make([]int, len(writes))
	for i, w := range writes {
		data, _ := json.Marshal(w.state)
		path := cluster.PartitionStatePath(w.topic, w.partition)
		ops[i], costs[i] = coord.SetOp(path, data, w.version), opCost(path, data)
	}
	batches := planBatches(costs, maxStatesPerMulti, maxMultiBytes)
	// Every batch records its own outcomes and never stops the others.
	_ = coord.Pipeline(ctx, len(batches), stateMultisInFlight, func(ctx context.Context, j int) error {
		runStateBatch(ctx, c.Multi, fence, ops, batches[j], results)
		return nil
	})
	for i := range results {
		if results[i].outcome == writePending {
			results[i].err = fmt.Errorf("not sent: %w", context.Cause(ctx))
		}
	}
	return results
}

// planBatches splits ops (of the given costs, in bytes) into runs of at most
// maxOps and maxBytes, in order; an op larger than maxBytes goes alone.
func planBatches(costs []int, maxOps, maxBytes int) [][]int {
	var out [][]int
	var cur []int
	size := 0
	for i, c := range costs {
		if len(cur) > 0 && (len(cur) == maxOps || size+c > maxBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += c
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// multiFunc is coord.Coordinator.Multi.
type multiFunc func(ctx context.Context, ops ...coord.Op) ([]coord.OpResult, error)

// runStateBatch sends ops[i] for each i of batch in one Multi (fence first)
// and records each outcome in results; an op the coordinator names as
// failed is recorded and the rest are sent again without it.
func runStateBatch(ctx context.Context, multi multiFunc, fence *coord.Op, ops []coord.Op, batch []int, results []stateResult) {
	off := 0
	if fence != nil {
		off = 1
	}
	pending := batch
	for len(pending) > 0 {
		req := make([]coord.Op, 0, off+len(pending))
		if fence != nil {
			req = append(req, *fence)
		}
		for _, i := range pending {
			req = append(req, ops[i])
		}
		res, err := multi(ctx, req...)
		if err == nil {
			for k, i := range pending {
				results[i] = stateResult{outcome: writeDone, version: res[off+k].Stat.Version}
			}
			return
		}
		var me *coord.MultiError
		if !errors.As(err, &me) || me.Index < 0 || me.Index >= len(req) {
			for _, i := range pending {
				results[i] = stateResult{outcome: writeFailed, err: err}
			}
			return
		}
		if me.Index < off {
			for _, i := range pending {
				results[i] = stateResult{outcome: writeFenced, err: err}
			}
			return
		}
		k := me.Index - off
		if errors.Is(err, coord.ErrBadVersion) || errors.Is(err, coord.ErrNoNode) {
			results[pending[k]] = stateResult{outcome: writeLost, err: err}
		} else {
			results[pending[k]] = stateResult{outcome: writeFailed, err: err}
		}
		pending = append(pending[:k:k], pending[k+1:]...)
	}
}
