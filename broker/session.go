package broker

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/coord"
)

// sessionLoop watches the coordinator session. The moment the connection
// drops, this broker cannot know whether its session still lives: the client
// only reports Disconnected some way into the timeout, and the ensemble may
// expire the session (and the controller move every leadership) before the
// client hears about it. So all partitions are fenced at once, with a new
// fence generation, and stay fenced until metadata re-read in the reconnected
// session is applied: a deposed leader acknowledges nothing, at the price of
// a pause when the link blips.
//
// The loop never applies states itself: after a successful re-read it
// declares the generation live and kicks the reconcile loop, the only caller
// of manager.reconcile. So it never waits for a reconcile (which may be
// stopping followers) before it can fence again.
func (b *Broker) sessionLoop(ctx context.Context) {
	events := b.opts.Coord.SessionEvents()
	var retry <-chan time.Time // armed while a fence waits for a re-read
	if b.parts.fenced() {
		retry = time.After(0) // restarted after a panic while fenced
	}
	for {
		select {
		case <-ctx.Done():
			return
		case st, ok := <-events:
			if !ok {
				return
			}
			switch st {
			case coord.StateDisconnected, coord.StateExpired:
				if !b.parts.fenced() {
					b.log.Warn("coordinator session lost or in doubt; fencing all partitions", "state", st)
				}
				// A new generation even when already fenced: a re-read that
				// began before this drop must not lift the fence.
				b.parts.fenceAll()
				retry = nil
			case coord.StateConnected:
				if b.parts.fenced() {
					retry = time.After(0)
				}
			}
		case <-retry:
			retry = nil
			if !b.rereadAfterFence(ctx) {
				retry = time.After(250 * time.Millisecond)
			}
		}
	}
}

// rereadAfterFence re-reads the metadata whole (View.Reload: the watches
// cannot be trusted to have named every change made while the link was
// down) and, when that succeeds, declares the fence generation current
// before the read live and asks the reconcile loop to apply it, which lifts
// the fence where this broker still holds its role. It reports whether the
// re-read succeeded.
func (b *Broker) rereadAfterFence(ctx context.Context) bool {
	gen := b.parts.fenceGeneration()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.view.Reload(rctx); err != nil {
		if ctx.Err() == nil {
			b.log.Warn("re-reading metadata after a coordinator reconnect failed; retrying", "err", err)
		}
		return false
	}
	b.parts.markLive(gen)
	b.kickReconcile()
	return true
}
