package broker

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/offsets"
)

// groupHost keeps a groupCoordinator per __consumer_offsets partition this
// broker holds a replica of. The coordinators load when the partition's
// leadership comes here and drop their state when it goes.
type groupHost struct {
	maxGroups int // Options.MaxGroupsPerCoordinator; set before Start

	mu     sync.Mutex // guards coords; never held while calling a coordinator
	coords map[int32]*groupCoordinator
}

// coordinatorFor returns the coordinator of group: the one of the
// __consumer_offsets partition the group hashes to, if this broker holds a
// replica of it. Anything else is NOT_COORDINATOR (the gateway asks again
// with fresher metadata).
func (b *Broker) coordinatorFor(group string) (*groupCoordinator, error) {
	if err := api.ValidateGroupID(group); err != nil {
		return nil, err
	}
	md := b.view.Current()
	t, ok := md.Topics[api.OffsetsTopic]
	if !ok {
		return nil, api.Errorf(api.CodeCoordinatorNotAvail, "the %s topic does not exist yet", api.OffsetsTopic)
	}
	pid := api.GroupPartition(group, t.Partitions())
	p, err := b.parts.get(md, api.OffsetsTopic, pid)
	if err != nil {
		return nil, api.Errorf(api.CodeNotCoordinator, "broker %d holds no replica of %s-%d", b.opts.ID, api.OffsetsTopic, pid)
	}
	return b.groups.coordinator(p), nil
}

func (h *groupHost) coordinator(p *Partition) *groupCoordinator {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.coords == nil {
		h.coords = map[int32]*groupCoordinator{}
	}
	gc := h.coords[p.ID]
	if gc == nil || gc.p != p {
		gc = &groupCoordinator{p: p, maxGroups: h.maxGroups}
		h.coords[p.ID] = gc
	}
	return gc
}

// groupMeta reports topics' partition counts to the group state machine.
func (b *Broker) groupMeta() offsets.Metadata {
	md := b.view.Current()
	return func(topic string) (int32, bool) {
		t, ok := md.Topics[topic]
		if !ok {
			return 0, false
		}
		return int32(t.Partitions()), true
	}
}

// groupLoop loads the group state of every __consumer_offsets partition this
// broker comes to lead (so groups are served, and sessions expire, without
// waiting for a request), drops it when leadership leaves, and expires
// members whose session ran out.
func (b *Broker) groupLoop(ctx context.Context) {
	every(ctx, 250*time.Millisecond, func() {
		for _, p := range b.parts.topicPartitions(api.OffsetsTopic) {
			gc := b.groups.coordinator(p)
			if _, _, leading := p.leaderState(); !leading {
				if gc.loaded() {
					gc.drop()
				}
				continue
			}
			err := gc.run(ctx, func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
				return st.Expire(now, b.groupMeta()), nil
			}, nil)
			if err != nil && ctx.Err() == nil {
				b.log.Warn("group coordinator pass failed", "partition", p.String(), "err", err)
			}
		}
	})
}

// withCoordinator runs a handler body against the group's coordinator.
func (b *Broker) withCoordinator(w http.ResponseWriter, r *http.Request, group string, f func(gc *groupCoordinator) error) {
	gc, err := b.coordinatorFor(group)
	if err == nil {
		err = f(gc)
	}
	if err != nil {
		apihttp.WriteError(w, err)
	}
}
