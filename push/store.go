package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coord"
)

// Path holds the subscriptions: one child per subscription
// (/config/push/<name>, a JSON Subscription). Every write of a child also
// sets the parent (its data: a change count) in the same multi-op, so a
// watcher keeps one data watch on the parent however many subscriptions
// there are, and re-reads the children when it fires.
const Path = "/config/push"

// storeVersion is the version of the stored layout.
const storeVersion = 1

// Subscription is a subscription as stored: its settings, the state an
// operator (or a 410) set, and its signing secrets.
type Subscription struct {
	V      int            `json:"v"`
	Config api.PushConfig `json:"config"`
	State  string         `json:"state"` // active, paused, disabled
	Reason string         `json:"reason,omitempty"`
	// Secrets sign deliveries: the current one first, then those still in
	// their grace after a rotation. Stored in the coordinator in the clear
	// (they sign, so they cannot be hashed): its ACLs guard them as they
	// guard the tokens' hashes.
	Secrets   []Secret `json:"secrets"`
	CreatedMs int64    `json:"created_ms"`
	UpdatedMs int64    `json:"updated_ms"`
}

// Secret is one signing key, "whsec_" and base64; UntilMs is when a
// rotated-out key stops signing (0 for the current key).
type Secret struct {
	Key     string `json:"key"`
	UntilMs int64  `json:"until_ms,omitempty"`
}

// Public renders the subscription for the API, without its secrets.
func (s *Subscription) Public() api.PushSubscription {
	return api.PushSubscription{PushConfig: s.Config, Group: Group(s.Config.Name), State: s.State, Reason: s.Reason,
		CreatedMs: s.CreatedMs, UpdatedMs: s.UpdatedMs}
}

// Errors of the store.
var (
	ErrUnknown  = &api.Error{Code: api.CodeUnknownSubscription}
	ErrExists   = &api.Error{Code: api.CodeSubscriptionExists}
	ErrTooMany  = &api.Error{Code: api.CodeTooManySubscriptions}
	errNoChange = errors.New("push: no change")
)

// Store keeps the subscriptions in the coordinator and a watched copy.
//
// Goroutines: one, the coord.Follower's (Start → Close): it reloads the
// copy whenever the parent's data watch fires, then calls OnChange.
type Store struct {
	c   coord.Coordinator
	log *slog.Logger

	subs   atomic.Pointer[map[string]*Subscription]
	follow coord.Follower
	// onChange is called (on the follower's goroutine) after each reload.
	onChange func()
}

// NewStore returns a store over c; Start begins watching. onChange, when
// not nil, is called after every reload, on the watching goroutine.
func NewStore(c coord.Coordinator, log *slog.Logger, onChange func()) *Store {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{c: c, log: log, onChange: onChange}
	empty := map[string]*Subscription{}
	s.subs.Store(&empty)
	s.follow = coord.Follower{Reload: s.reload, What: "push subscriptions", Logger: log}
	return s
}

// Start starts the watch loop.
func (s *Store) Start() { s.follow.Start() }

// Close stops the watch loop and waits for it.
func (s *Store) Close() { s.follow.Close() }

// Loaded is closed once the first copy is in.
func (s *Store) Loaded() <-chan struct{} { return s.follow.Loaded() }

// Get returns the watched copy of a subscription (do not modify it).
func (s *Store) Get(name string) (*Subscription, bool) {
	sub, ok := (*s.subs.Load())[name]
	return sub, ok
}

// All returns the watched subscriptions, sorted by name.
func (s *Store) All() []*Subscription {
	m := *s.subs.Load()
	out := make([]*Subscription, 0, len(m))
	for _, sub := range m {
		out = append(out, sub)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Config.Name < out[j].Config.Name })
	return out
}

func (s *Store) reload(ctx context.Context, fire coord.WatchFunc) error {
	exists, _, err := s.c.ExistsW(ctx, Path, fire)
	if err != nil {
		return err
	}
	next := map[string]*Subscription{}
	if exists {
		if _, _, err := s.c.GetW(ctx, Path, fire); err != nil && !errors.Is(err, coord.ErrNoNode) {
			return err
		}
		names, _, err := s.c.Children(ctx, Path)
		if err != nil && !errors.Is(err, coord.ErrNoNode) {
			return err
		}
		for _, name := range names {
			data, _, err := s.c.Get(ctx, Path+"/"+name)
			if errors.Is(err, coord.ErrNoNode) {
				continue // deleted between the list and the read: the watch fires again
			}
			if err != nil {
				return err
			}
			sub, err := decodeSubscription(data)
			if err != nil {
				s.log.Warn("ignoring an unreadable push subscription", "name", name, "err", err)
				continue
			}
			next[name] = sub
		}
	}
	s.subs.Store(&next)
	if s.onChange != nil {
		s.onChange()
	}
	return nil
}

func decodeSubscription(data []byte) (*Subscription, error) {
	var sub Subscription
	if err := json.Unmarshal(data, &sub); err != nil {
		return nil, err
	}
	if sub.V != storeVersion {
		return nil, fmt.Errorf("layout version %d, want %d", sub.V, storeVersion)
	}
	if _, err := Normalize(sub.Config); err != nil {
		return nil, err
	}
	return &sub, nil
}

// Create stores a new subscription; ErrExists when the name is taken,
// ErrTooMany past MaxSubscriptions.
func (s *Store) Create(ctx context.Context, sub *Subscription) error {
	return coordErr(s.create(ctx, sub))
}

func (s *Store) create(ctx context.Context, sub *Subscription) error {
	if err := coord.EnsurePath(ctx, s.c, Path); err != nil {
		return err
	}
	for {
		names, st, err := s.c.Children(ctx, Path)
		if err != nil {
			return err
		}
		if len(names) >= MaxSubscriptions {
			return api.Errorf(api.CodeTooManySubscriptions, "the cluster holds %d push subscriptions, the most it may", len(names))
		}
		sub.V = storeVersion
		data, err := json.Marshal(sub)
		if err != nil {
			return err
		}
		_, err = s.c.Multi(ctx,
			coord.CreateOp(Path+"/"+sub.Config.Name, data, 0),
			coord.SetOp(Path, changeCount(st), st.Version))
		switch {
		case errors.Is(err, coord.ErrNodeExists):
			return api.Errorf(api.CodeSubscriptionExists, "push subscription %q exists", sub.Config.Name)
		case errors.Is(err, coord.ErrBadVersion):
			continue // another subscription changed: count again
		}
		return err
	}
}

// Update reads a subscription, lets change modify it and writes it back
// conditionally, again while another writer wins the race. It returns what
// was stored. ErrUnknown when the subscription does not exist; an error
// from change is returned as is, and nothing is written.
func (s *Store) Update(ctx context.Context, name string, change func(*Subscription) error) (*Subscription, error) {
	sub, err := s.update(ctx, name, change)
	return sub, coordErr(err)
}

func (s *Store) update(ctx context.Context, name string, change func(*Subscription) error) (*Subscription, error) {
	path := Path + "/" + name
	for {
		data, st, err := s.c.Get(ctx, path)
		if errors.Is(err, coord.ErrNoNode) {
			return nil, api.Errorf(api.CodeUnknownSubscription, "no push subscription %q", name)
		}
		if err != nil {
			return nil, err
		}
		sub, err := decodeSubscription(data)
		if err != nil {
			return nil, fmt.Errorf("push: subscription %q is unreadable: %w", name, err)
		}
		if err := change(sub); errors.Is(err, errNoChange) {
			return sub, nil
		} else if err != nil {
			return nil, err
		}
		out, err := json.Marshal(sub)
		if err != nil {
			return nil, err
		}
		_, pst, err := s.c.Get(ctx, Path)
		if err != nil {
			return nil, err
		}
		_, err = s.c.Multi(ctx, coord.SetOp(path, out, st.Version), coord.SetOp(Path, changeCount(pst), pst.Version))
		if errors.Is(err, coord.ErrBadVersion) {
			continue
		}
		if errors.Is(err, coord.ErrNoNode) {
			return nil, api.Errorf(api.CodeUnknownSubscription, "no push subscription %q", name)
		}
		return sub, err
	}
}

// Delete removes a subscription; ErrUnknown when it does not exist.
func (s *Store) Delete(ctx context.Context, name string) error {
	return coordErr(s.delete(ctx, name))
}

func (s *Store) delete(ctx context.Context, name string) error {
	path := Path + "/" + name
	for {
		_, pst, err := s.c.Get(ctx, Path)
		if errors.Is(err, coord.ErrNoNode) {
			return api.Errorf(api.CodeUnknownSubscription, "no push subscription %q", name)
		}
		if err != nil {
			return err
		}
		_, err = s.c.Multi(ctx, coord.DeleteOp(path, coord.AnyVersion), coord.SetOp(Path, changeCount(pst), pst.Version))
		switch {
		case errors.Is(err, coord.ErrNoNode):
			return api.Errorf(api.CodeUnknownSubscription, "no push subscription %q", name)
		case errors.Is(err, coord.ErrBadVersion):
			continue
		}
		return err
	}
}

// changeCount is the parent's next data: its version after the write, so
// the data changes with every write (the watch fires on any set anyway).
func changeCount(st coord.Stat) []byte {
	return []byte(strconv.FormatInt(int64(st.Version)+1, 10))
}

// Read reads a subscription from the coordinator (not the watched copy, so
// a route answers what was just written); ErrUnknown when there is none.
func (s *Store) Read(ctx context.Context, name string) (*Subscription, error) {
	sub, err := s.read(ctx, name)
	return sub, coordErr(err)
}

func (s *Store) read(ctx context.Context, name string) (*Subscription, error) {
	data, _, err := s.c.Get(ctx, Path+"/"+name)
	if errors.Is(err, coord.ErrNoNode) {
		return nil, api.Errorf(api.CodeUnknownSubscription, "no push subscription %q", name)
	}
	if err != nil {
		return nil, err
	}
	sub, err := decodeSubscription(data)
	if err != nil {
		return nil, fmt.Errorf("push: subscription %q is unreadable: %w", name, err)
	}
	return sub, nil
}

// List reads every subscription from the coordinator, sorted by name.
func (s *Store) List(ctx context.Context) ([]*Subscription, error) {
	subs, err := s.list(ctx)
	return subs, coordErr(err)
}

func (s *Store) list(ctx context.Context) ([]*Subscription, error) {
	names, _, err := s.c.Children(ctx, Path)
	if errors.Is(err, coord.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*Subscription, 0, len(names))
	for _, name := range names {
		sub, err := s.read(ctx, name)
		if errors.Is(err, ErrUnknown) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sub)
	}
	return out, nil
}

// coordErr keeps the API's errors (those of the store and of a change
// function) and makes any other, the coordinator's, COORDINATOR_NOT_AVAILABLE.
func coordErr(err error) error {
	var ae *api.Error
	if err == nil || errors.As(err, &ae) {
		return err
	}
	return api.Errorf(api.CodeCoordinatorNotAvail, "the push subscriptions' store: %v", err)
}
