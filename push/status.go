package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"sort"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
)

// StatusPath holds the pushers' live state, which no commit carries: one
// ephemeral node per running pusher, /status/push/<name>/<instance>, a JSON
// PusherStatus. A gateway answering GET /v1/push/{name} reads them all, so
// any gateway shows what every gateway's pusher is doing; a pusher that
// stops deletes its node, and a gateway that dies loses it with its
// session.
const StatusPath = "/status/push"

// Publishing bounds: a pusher writes its node at most once a second, again
// every statusRefresh while it runs (a session that expired took the node
// with it), and keeps a failure's text short (the delivery log keeps the
// whole excerpt).
const (
	statusEvery   = time.Second
	statusRefresh = 30 * time.Second
	statusExcerpt = 200
	// statusMaxBytes bounds a node; past it the errors are left out.
	statusMaxBytes = coord.MaxDataSize / 2
)

// PusherStatus is one running pusher's live state.
type PusherStatus struct {
	Member     string          `json:"member"`
	Instance   string          `json:"instance"`
	BackingOff bool            `json:"backing_off"`
	Reason     string          `json:"reason,omitempty"` // the last error that made it back off
	Partitions []PartitionLive `json:"partitions,omitempty"`
	UpdatedMs  int64           `json:"updated_ms"`
}

// PartitionLive is a partition's live state in its pusher's status: only
// partitions with a request out or an error seen are listed.
type PartitionLive struct {
	api.TopicPartition
	InFlight  int            `json:"in_flight"`
	LastError *api.PushError `json:"last_error,omitempty"`
}

// partLive is what a partition loop publishes at the end of a turn.
type partLive struct {
	inFlight int
	lastErr  *api.PushError
}

func statusDir(name string) string { return StatusPath + "/" + name }

func statusNode(name, instance string) string {
	return statusDir(name) + "/" + url.PathEscape(instance)
}

// newPushError renders a failed attempt for the status.
func newPushError(offset int64, attempt int, o outcome, at time.Time) *api.PushError {
	msg := o.excerpt
	if len(msg) > statusExcerpt {
		cut := statusExcerpt
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return &api.PushError{Offset: offset, Attempt: attempt, Status: o.status, Error: msg, AtMs: at.UnixMilli()}
}

// statusChanged wakes the run's status writer (never blocks).
func (r *subscriptionRun) statusChanged() {
	select {
	case r.statusKick <- struct{}{}:
	default:
	}
}

// snapshot is this pusher's status now.
func (r *subscriptionRun) snapshot() PusherStatus {
	st := PusherStatus{Instance: r.instance}
	if m := r.member.Load(); m != nil {
		st.Member = m.id
	}
	if r.gate.backingOff() {
		_, st.Reason = r.gate.outage()
		st.BackingOff = true
	}
	r.mu.Lock()
	for tp, pr := range r.parts {
		l := pr.p.live.Load()
		if l == nil || (l.inFlight == 0 && l.lastErr == nil) {
			continue
		}
		st.Partitions = append(st.Partitions, PartitionLive{TopicPartition: tp, InFlight: l.inFlight, LastError: l.lastErr})
	}
	r.mu.Unlock()
	sort.Slice(st.Partitions, func(i, j int) bool {
		a, b := st.Partitions[i], st.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	return st
}

// publishStatus writes this pusher's node whenever its state changes (at
// most once every statusEvery) until ctx ends, then deletes it. run
// starts it and waits for it.
func (r *subscriptionRun) publishStatus(ctx context.Context) {
	path := statusNode(r.cfg.Name, r.instance)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.coord.Delete(dctx, path, coord.AnyVersion); err != nil && !errors.Is(err, coord.ErrNoNode) {
			r.log.Debug("a pusher's status node could not be deleted (it goes with the session)", "err", err)
		}
	}()
	refresh := time.NewTicker(statusRefresh)
	defer refresh.Stop()
	var last []byte
	var wrote time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.statusKick:
		case <-refresh.C:
			last = nil // write again, changed or not
		}
		if wait := statusEvery - time.Since(wrote); wait > 0 {
			if waitFor(ctx, nil, wait) != nil {
				return
			}
		}
		// Compared without its time stamp: only a change is written.
		st := r.snapshot()
		key := encodeStatus(st)
		if last != nil && bytes.Equal(last, key) {
			continue
		}
		wrote = time.Now()
		st.UpdatedMs = wrote.UnixMilli()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := writeStatus(wctx, r.coord, r.cfg.Name, path, encodeStatus(st))
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("a pusher's status could not be written; it is written again", "err", err)
				r.statusChanged()
			}
			continue
		}
		last = key
	}
}

// encodeStatus marshals st, leaving the errors out past statusMaxBytes.
func encodeStatus(st PusherStatus) []byte {
	data, _ := json.Marshal(st)
	if len(data) <= statusMaxBytes {
		return data
	}
	for i := range st.Partitions {
		st.Partitions[i].LastError = nil
	}
	data, _ = json.Marshal(st)
	if len(data) > statusMaxBytes {
		st.Partitions = nil
		data, _ = json.Marshal(st)
	}
	return data
}

// writeStatus sets a pusher's node, creating it (and its subscription's
// directory) when it is not there.
func writeStatus(ctx context.Context, c coord.Coordinator, name, path string, data []byte) error {
	_, err := c.Set(ctx, path, data, coord.AnyVersion)
	if !errors.Is(err, coord.ErrNoNode) {
		return err
	}
	if err := coord.EnsurePath(ctx, c, statusDir(name)); err != nil {
		return err
	}
	_, err = c.Create(ctx, path, data, coord.Ephemeral)
	if errors.Is(err, coord.ErrNodeExists) {
		_, err = c.Set(ctx, path, data, coord.AnyVersion)
	}
	return err
}

// ReadStatus returns the live status of every running pusher of name.
func ReadStatus(ctx context.Context, c coord.Coordinator, name string) ([]PusherStatus, error) {
	kids, _, err := c.Children(ctx, statusDir(name))
	if errors.Is(err, coord.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, coordErr(err)
	}
	var out []PusherStatus
	for _, k := range kids {
		data, _, err := c.Get(ctx, statusDir(name)+"/"+k)
		if errors.Is(err, coord.ErrNoNode) {
			continue // stopped since the listing
		}
		if err != nil {
			return nil, coordErr(err)
		}
		var st PusherStatus
		if json.Unmarshal(data, &st) == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// removeStatusDir deletes a deleted subscription's status directory once
// its pushers are gone (best effort: a pusher still stopping keeps it).
func removeStatusDir(ctx context.Context, c coord.Coordinator, name string) {
	_ = c.Delete(ctx, statusDir(name), coord.AnyVersion)
}

// livePublisher lets a partition loop publish what changed in a turn.
type livePublisher struct {
	cur atomic.Pointer[partLive]
}

func (l *livePublisher) Load() *partLive { return l.cur.Load() }

// publish stores (inFlight, lastErr) if it differs from what is stored and
// reports whether it did.
func (l *livePublisher) publish(inFlight int, lastErr *api.PushError) bool {
	if c := l.cur.Load(); c != nil && c.inFlight == inFlight && c.lastErr == lastErr {
		return false
	}
	l.cur.Store(&partLive{inFlight: inFlight, lastErr: lastErr})
	return true
}
