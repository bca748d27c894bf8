package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/sluice-io/sluice/coord"
)

// Path is the znode holding every quota, one JSON document
// {"quotas":[Quota...]}: a change is one conditional write, and a watcher
// one data watch, however many entities there are (at most MaxQuotas).
const Path = "/config/quotas"

// ErrUnknown: Delete named an entity without a quota.
var ErrUnknown = errors.New("quota: no quota for this entity")

// ErrTooMany: Set would store more than MaxQuotas entities.
var ErrTooMany = errors.New("quota: too many quota entities")

type document struct {
	Quotas []Quota `json:"quotas"`
}

// Store keeps the quotas in the coordinator and a watched copy that
// requests read without locks.
//
// Goroutines: one, the coord.Follower's (Start → Close): it reads the node
// whenever its data watch fires and publishes a new Config.
type Store struct {
	c   coord.Coordinator
	log *slog.Logger

	cfg    atomic.Pointer[Config]
	follow coord.Follower
}

// NewStore returns a store over c with no quotas; Start begins watching.
func NewStore(c coord.Coordinator, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{c: c, log: log}
	s.cfg.Store(NewConfig(nil))
	s.follow = coord.Follower{Reload: s.reload, What: "quotas", Logger: log}
	return s
}

// Start starts the watch loop.
func (s *Store) Start() { s.follow.Start() }

// Close stops the watch loop and waits for it.
func (s *Store) Close() { s.follow.Close() }

// Loaded is closed once the first copy is in.
func (s *Store) Loaded() <-chan struct{} { return s.follow.Loaded() }

// Config is the current set of quotas.
func (s *Store) Config() *Config { return s.cfg.Load() }

// Read is the quotas as the coordinator holds them now, not the watched
// copy: a list right after a change through any gateway shows it.
func (s *Store) Read(ctx context.Context) (*Config, error) {
	data, _, err := s.c.Get(ctx, Path)
	if errors.Is(err, coord.ErrNoNode) {
		return NewConfig(nil), nil
	}
	if err != nil {
		return nil, err
	}
	doc, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("quota: the stored document is unreadable: %w", err)
	}
	return NewConfig(doc.Quotas), nil
}

// reload reads the node with a watch (or, while it does not exist, watches
// for its creation) and publishes what it holds.
func (s *Store) reload(ctx context.Context, fire coord.WatchFunc) error {
	data, _, err := s.c.GetW(ctx, Path, fire)
	if errors.Is(err, coord.ErrNoNode) {
		exists, _, err := s.c.ExistsW(ctx, Path, fire)
		if err != nil {
			return err
		}
		if exists {
			return s.reload(ctx, fire)
		}
		s.cfg.Store(NewConfig(nil))
		return nil
	}
	if err != nil {
		return err
	}
	doc, err := decode(data)
	if err != nil {
		// Keep the last good copy: a bad write must not lift every quota.
		s.log.Warn("ignoring an unreadable quota document", "path", Path, "err", err)
		return nil
	}
	valid := doc.Quotas[:0]
	for _, q := range doc.Quotas {
		if err := q.Validate(); err != nil {
			s.log.Warn("ignoring an invalid quota", "entity", q.Entity, "err", err)
			continue
		}
		valid = append(valid, q)
	}
	s.cfg.Store(NewConfig(valid))
	return nil
}

func decode(data []byte) (document, error) {
	var doc document
	if len(data) == 0 {
		return doc, nil
	}
	err := json.Unmarshal(data, &doc)
	return doc, err
}

// Set stores q, replacing the entity's rates if it has a quota. It reads
// the node and writes it back conditionally, again while another writer
// wins the race.
func (s *Store) Set(ctx context.Context, q Quota) error {
	if err := q.Validate(); err != nil {
		return err
	}
	return s.update(ctx, func(cfg *Config) ([]Quota, error) {
		if _, ok := cfg.Get(q.Entity); !ok && cfg.Len() >= MaxQuotas {
			return nil, fmt.Errorf("%w: the cluster holds %d, the most it may", ErrTooMany, MaxQuotas)
		}
		return append(cfg.All(), q), nil
	})
}

// Delete removes e's quota, or returns ErrUnknown.
func (s *Store) Delete(ctx context.Context, e Entity) error {
	return s.update(ctx, func(cfg *Config) ([]Quota, error) {
		if _, ok := cfg.Get(e); !ok {
			return nil, ErrUnknown
		}
		var out []Quota
		for _, q := range cfg.All() {
			if q.Entity != e {
				out = append(out, q)
			}
		}
		return out, nil
	})
}

// update applies change to the stored quotas with a conditional write,
// retrying when another writer got there first.
func (s *Store) update(ctx context.Context, change func(*Config) ([]Quota, error)) error {
	if err := coord.EnsurePath(ctx, s.c, "/config"); err != nil {
		return err
	}
	for {
		data, st, err := s.c.Get(ctx, Path)
		exists := err == nil
		if err != nil && !errors.Is(err, coord.ErrNoNode) {
			return err
		}
		doc, err := decode(data)
		if err != nil {
			return fmt.Errorf("quota: the stored document is unreadable: %w", err)
		}
		next, err := change(NewConfig(doc.Quotas))
		if err != nil {
			return err
		}
		out, _ := json.Marshal(document{Quotas: NewConfig(next).All()})
		if exists {
			_, err = s.c.Set(ctx, Path, out, st.Version)
		} else {
			_, err = s.c.Create(ctx, Path, out, 0)
		}
		if errors.Is(err, coord.ErrBadVersion) || errors.Is(err, coord.ErrNodeExists) || errors.Is(err, coord.ErrNoNode) {
			continue
		}
		return err
	}
}
