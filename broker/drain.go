package broker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Controlled shutdown. Before a broker stops, it closes the leaderships it
// will hand over to new writes and lets what is in flight commit
// (handover.go), then marks its registration shutting down; the controller
// (decideLeader) then moves each leadership it holds to another live ISR
// member with a new epoch, without it in the ISR, and gives it no new one,
// while it stays in the ISRs it follows and keeps following. Drain waits
// until nothing it leads can move any more, so that its exit costs no
// partition an election round: producers and consumers are already routed
// elsewhere when its session ends; then it leaves the ISRs it follows
// (leaveISRs). The marks last until the process stops.

// maxDrainWait bounds one drain request.
const maxDrainWait = 10 * time.Minute

// Drain marks the broker shutting down and waits until every leadership it
// holds that another live, not shutting-down ISR member could take has moved,
// or ctx ends. It returns the leaderships the broker still holds (those with
// no other ISR member to go to) and, when ctx ended first, ctx's error. It is
// safe to call more than once and from several goroutines.
func (b *Broker) Drain(ctx context.Context) (held int, err error) {
	if b.shuttingDown.CompareAndSwap(false, true) {
		b.log.Info("controlled shutdown: handing leaderships to other replicas")
	}
	b.handover.Do(func() {
		start := time.Now()
		closed, pending := b.closeForHandover(ctx, b.view.Current())
		b.log.Info("controlled shutdown: leaderships closed to new writes", "partitions", closed,
			"uncommitted", pending, "took", time.Since(start).Round(time.Millisecond))
	})
	if err := b.markRegistration(ctx, func(r api.BrokerRegistration) bool { return r.ShuttingDown }); err != nil {
		return b.leaderships(b.view.Current()), err
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for b.movableLeaderships(b.view.Current()) > 0 {
		select {
		case <-ctx.Done():
			return b.leaderships(b.view.Current()), ctx.Err()
		case <-t.C:
		}
	}
	b.leaveISRs(ctx)
	return b.leaderships(b.view.Current()), nil
}

// maxLeaveISRWait bounds how long a drain waits for the controller to drop
// the broker from the ISRs once it is stopping.
const maxLeaveISRWait = 5 * time.Second

// leaveISRs marks the registration stopping, and waits until the View
// shows the broker in no ISR the controller drops it from (one with a
// leader other than this broker), at most maxLeaveISRWait or half of what
// is left of ctx. A write of the old leadership that was waiting for this
// broker's fetch commits on the rest of the ISR then, instead of waiting
// until the process stops and its session ends.
func (b *Broker) leaveISRs(ctx context.Context) {
	if b.stopping.CompareAndSwap(false, true) {
		b.log.Info("controlled shutdown: leaving the ISRs of the partitions it follows")
	}
	wait := maxLeaveISRWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.markRegistration(wctx, func(r api.BrokerRegistration) bool { return r.Stopping }); err != nil {
		return
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for b.followedISRs(b.view.Current()) > 0 {
		select {
		case <-wctx.Done():
			b.log.Warn("controlled shutdown: still in ISRs of partitions it follows", "partitions", b.followedISRs(b.view.Current()))
			return
		case <-t.C:
		}
	}
}

// followedISRs counts the partitions with a live leader other than this
// broker whose ISR lists it.
func (b *Broker) followedISRs(md *cluster.Metadata) int {
	n := 0
	for _, tm := range md.Topics {
		for _, st := range tm.States {
			if st.Leader >= 0 && st.Leader != b.opts.ID && slices.Contains(st.ISR, b.opts.ID) {
				n++
			}
		}
	}
	return n
}

// registration is this broker's /brokers/ids/{id} data.
func (b *Broker) registration() []byte {
	return registrationJSON(api.BrokerRegistration{ID: b.opts.ID, Address: b.opts.AdvertisedAddr, KafkaAddress: b.kafka.addr,
		ShuttingDown: b.shuttingDown.Load(), Stopping: b.stopping.Load(), FailedLogs: b.failedLogs()})
}

// markRegistration rewrites the registration (with the marks set now), at
// the version read, while this session owns the node, until the node's
// data satisfies done. When the node is missing or another session's, the
// register loop creates it (with the marks), so this waits for it.
func (b *Broker) markRegistration(ctx context.Context, done func(api.BrokerRegistration) bool) error {
	path := cluster.BrokerPath(b.opts.ID)
	for {
		data, st, err := b.opts.Coord.Get(ctx, path)
		if err == nil && st.EphemeralOwner == b.opts.Coord.SessionID() {
			var reg api.BrokerRegistration
			if json.Unmarshal(data, &reg) == nil && done(reg) {
				return nil
			}
			_, err = b.opts.Coord.Set(ctx, path, b.registration(), st.Version)
			if err == nil {
				return nil
			}
		}
		if err != nil && !errors.Is(err, coord.ErrNoNode) && !errors.Is(err, coord.ErrBadVersion) {
			b.log.Warn("controlled shutdown: marking the registration failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leaderships counts the partitions the metadata names this broker leader of.
func (b *Broker) leaderships(md *cluster.Metadata) int {
	n := 0
	for _, tm := range md.Topics {
		for _, st := range tm.States {
			if st.Leader == b.opts.ID {
				n++
			}
		}
	}
	return n
}

// movableLeaderships counts the partitions this broker leads that have
// another live ISR member not shutting down: those the controller moves.
func (b *Broker) movableLeaderships(md *cluster.Metadata) int {
	n := 0
	for _, tm := range md.Topics {
		for _, st := range tm.States {
			if movable(md, b.opts.ID, st) {
				n++
			}
		}
	}
	return n
}

// handleDrain is POST PathDrain?timeout_ms=: Drain, bounded by the timeout
// (default 30 s). 200 with what the broker still leads once nothing more can
// move; 504 REQUEST_TIMED_OUT when the timeout passed first.
func (b *Broker) handleDrain(w http.ResponseWriter, r *http.Request) {
	ms, err := apihttp.QueryInt(r.URL.Query(), "timeout_ms", 30_000, 1, maxDrainWait.Milliseconds())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
	defer cancel()
	held, err := b.Drain(ctx)
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeRequestTimedOut, "broker %d still leads %d partitions another replica could take: %v", b.opts.ID, b.movableLeaderships(b.view.Current()), err))
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, brokerapi.DrainResult{BrokerID: b.opts.ID, Leaderships: held})
}
