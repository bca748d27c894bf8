package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/coord"
)

// Znodes of the store. Both kinds of node are written once and never
// changed, only deleted, so a copy is good until its parent's child watch
// says it is gone.
const (
	TokensPath = "/auth/tokens" // children: token id → TokenRecord (JSON)
	ACLsPath   = "/auth/acls"   // children: ACL.Key() → ACL (JSON)
	// ScramPath's children: "<mechanism>.<hex principal>.<id>" →
	// ScramCredential (JSON); a new password is a new node.
	ScramPath = "/auth/scram"
)

// Errors of the store.
var (
	// ErrUnauthenticated: the token is malformed, unknown, revoked or expired.
	ErrUnauthenticated = errors.New("auth: invalid token")
	// ErrUnknownToken: DeleteToken named no token.
	ErrUnknownToken = errors.New("auth: no such token")
)

// maxLookups bounds concurrent coordinator reads for tokens missing from the
// copy (one created through another gateway a moment ago); past it, an
// unknown token is refused at once, so a client sending random ids cannot
// turn requests into coordinator load.
const maxLookups = 4

// Store keeps tokens and ACLs in the coordinator and a watched copy in
// memory that authentication and authorization read without locks.
//
// Goroutines: one, the coord.Follower's (Start → Close): it re-lists both
// parents whenever one of their child watches fires and publishes a new
// snapshot.
type Store struct {
	c   coord.Coordinator
	log *slog.Logger

	snap    atomic.Pointer[snapshot]
	lookups chan struct{} // semaphore, cap maxLookups
	follow  coord.Follower
}

type snapshot struct {
	tokens map[string]TokenRecord
	acls   *ACLSet
	keys   map[string]ACL // by Key
	scram  scramSet
}

// NewStore returns a store over c; Start begins watching.
func NewStore(c coord.Coordinator, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{c: c, log: log, lookups: make(chan struct{}, maxLookups)}
	s.snap.Store(&snapshot{tokens: map[string]TokenRecord{}, acls: NewACLSet(nil), keys: map[string]ACL{}, scram: newScramSet(0)})
	s.follow = coord.Follower{Reload: s.reload, What: "tokens, ACLs and SCRAM credentials", Logger: log}
	return s
}

// Start starts the watch loop, which creates the parent znodes if needed.
func (s *Store) Start() { s.follow.Start() }

// Close stops the watch loop and waits for it.
func (s *Store) Close() { s.follow.Close() }

// Loaded is closed once the first snapshot is in.
func (s *Store) Loaded() <-chan struct{} { return s.follow.Loaded() }

// reload lists both parents with watches and builds a snapshot, reading only
// the children the previous one lacks.
func (s *Store) reload(ctx context.Context, fire coord.WatchFunc) error {
	next, err := s.load(ctx, fire)
	if err != nil {
		return err
	}
	s.snap.Store(next)
	return nil
}

// children lists p's children, with a watch when fire is not nil.
func (s *Store) children(ctx context.Context, p string, fire coord.WatchFunc) ([]string, error) {
	if fire == nil {
		names, _, err := s.c.Children(ctx, p)
		return names, err
	}
	names, _, err := s.c.ChildrenW(ctx, p, fire)
	return names, err
}

// load reads the tokens and ACLs (records already in the copy are not read
// again: they never change, they are only created and deleted).
func (s *Store) load(ctx context.Context, fire coord.WatchFunc) (*snapshot, error) {
	for _, p := range []string{TokensPath, ACLsPath, ScramPath} {
		if err := coord.EnsurePath(ctx, s.c, p); err != nil {
			return nil, err
		}
	}
	old := s.snap.Load()
	ids, err := s.children(ctx, TokensPath, fire)
	if err != nil {
		return nil, err
	}
	keys, err := s.children(ctx, ACLsPath, fire)
	if err != nil {
		return nil, err
	}
	nodes, err := s.children(ctx, ScramPath, fire)
	if err != nil {
		return nil, err
	}
	next := &snapshot{tokens: make(map[string]TokenRecord, len(ids)), keys: make(map[string]ACL, len(keys))}
	if next.scram, err = s.loadScram(ctx, old.scram, nodes); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if rec, ok := old.tokens[id]; ok {
			next.tokens[id] = rec
			continue
		}
		var rec TokenRecord
		if ok, err := s.read(ctx, TokensPath+"/"+id, &rec); err != nil {
			return nil, err
		} else if ok {
			next.tokens[id] = rec
		}
	}
	for _, k := range keys {
		if a, ok := old.keys[k]; ok {
			next.keys[k] = a
			continue
		}
		var a ACL
		if ok, err := s.read(ctx, ACLsPath+"/"+k, &a); err != nil {
			return nil, err
		} else if ok {
			if err := a.Validate(); err != nil {
				s.log.Warn("ignoring an invalid ACL in the store", "key", k, "err", err)
				continue
			}
			next.keys[k] = a
		}
	}
	list := make([]ACL, 0, len(next.keys))
	for _, a := range next.keys {
		list = append(list, a)
	}
	sortACLs(list)
	next.acls = NewACLSet(list)
	return next, nil
}

// read decodes a node; ok is false when it is gone or unreadable.
func (s *Store) read(ctx context.Context, p string, v any) (bool, error) {
	data, _, err := s.c.Get(ctx, p)
	if errors.Is(err, coord.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		s.log.Warn("ignoring an unreadable auth record", "path", p, "err", err)
		return false, nil
	}
	return true, nil
}

// Authenticate returns the principal of a token, or ErrUnauthenticated. A
// token missing from the copy is looked up in the coordinator (it may have
// been created through another gateway a moment ago), at most maxLookups at
// a time.
func (s *Store) Authenticate(ctx context.Context, token string, now time.Time) (string, error) {
	id, secret, err := ParseToken(token)
	if err != nil {
		return "", ErrUnauthenticated
	}
	rec, ok := s.snap.Load().tokens[id]
	if !ok {
		select {
		case s.lookups <- struct{}{}:
		default:
			return "", ErrUnauthenticated
		}
		found, err := s.read(ctx, TokensPath+"/"+id, &rec)
		<-s.lookups
		if err != nil || !found {
			return "", ErrUnauthenticated
		}
	}
	if !rec.Matches(secret) || rec.Expired(now) {
		return "", ErrUnauthenticated
	}
	return rec.Principal, nil
}

// ACLs is the current ACL set.
func (s *Store) ACLs() *ACLSet { return s.snap.Load().acls }

// Tokens lists the stored tokens (records only, never secrets), by creation.
func (s *Store) Tokens() []TokenRecord { return s.snap.Load().sortedTokens() }

func (snap *snapshot) sortedTokens() []TokenRecord {
	out := make([]TokenRecord, 0, len(snap.tokens))
	for _, r := range snap.tokens {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// ReadTokens is Tokens as the coordinator holds them now, not the watched
// copy: a list right after a create or delete through any gateway shows it.
func (s *Store) ReadTokens(ctx context.Context) ([]TokenRecord, error) {
	snap, err := s.load(ctx, nil)
	if err != nil {
		return nil, err
	}
	return snap.sortedTokens(), nil
}

// CreateToken makes and stores a token; the string is returned once.
func (s *Store) CreateToken(ctx context.Context, principal string, ttl time.Duration, now time.Time) (string, TokenRecord, error) {
	tok, rec, err := NewToken(principal, ttl, now)
	if err != nil {
		return "", TokenRecord{}, err
	}
	data, _ := json.Marshal(rec)
	if err := coord.EnsurePath(ctx, s.c, TokensPath); err != nil {
		return "", TokenRecord{}, err
	}
	if _, err := s.c.Create(ctx, TokensPath+"/"+rec.ID, data, 0); err != nil {
		return "", TokenRecord{}, fmt.Errorf("auth: storing token: %w", err)
	}
	s.awaitCopy(ctx, func(sn *snapshot) bool { _, ok := sn.tokens[rec.ID]; return ok })
	return tok, rec, nil
}

// awaitCopy waits, at most copyWait, until the watched copy satisfies ok:
// a change made through this store shows in the next listing from it, as
// whoever made it expects (other gateways see it when their watches fire).
// A store that is not following (never started) does not wait.
func (s *Store) awaitCopy(ctx context.Context, ok func(*snapshot) bool) {
	select {
	case <-s.follow.Loaded():
	default:
		return
	}
	ctx, cancel := context.WithTimeout(ctx, copyWait)
	defer cancel()
	for !ok(s.snap.Load()) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// copyWait bounds awaitCopy.
const copyWait = 5 * time.Second

// DeleteToken revokes a token by id; every gateway drops it when its watch
// fires.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	if !ValidID(id) {
		return ErrUnknownToken
	}
	err := s.c.Delete(ctx, TokensPath+"/"+id, coord.AnyVersion)
	if errors.Is(err, coord.ErrNoNode) {
		return ErrUnknownToken
	}
	if err == nil {
		s.awaitCopy(ctx, func(sn *snapshot) bool { _, ok := sn.tokens[id]; return !ok })
	}
	return err
}

// CreateACL stores a validated ACL; storing an equal one again is a no-op.
func (s *Store) CreateACL(ctx context.Context, a ACL) error {
	if err := a.Validate(); err != nil {
		return err
	}
	data, _ := json.Marshal(a)
	if err := coord.EnsurePath(ctx, s.c, ACLsPath); err != nil {
		return err
	}
	_, err := s.c.Create(ctx, ACLsPath+"/"+a.Key(), data, 0)
	if errors.Is(err, coord.ErrNodeExists) {
		err = nil
	}
	if err == nil {
		s.awaitCopy(ctx, func(sn *snapshot) bool { _, ok := sn.keys[a.Key()]; return ok })
	}
	return err
}

// DeleteACLs removes the ACLs the filter matches (in the current copy) and
// returns them.
func (s *Store) DeleteACLs(ctx context.Context, f Filter) ([]ACL, error) {
	var gone []ACL
	for _, a := range s.ListACLs(f) {
		err := s.c.Delete(ctx, ACLsPath+"/"+a.Key(), coord.AnyVersion)
		if err != nil && !errors.Is(err, coord.ErrNoNode) {
			return gone, err
		}
		gone = append(gone, a)
	}
	s.awaitCopy(ctx, func(sn *snapshot) bool {
		for _, a := range gone {
			if _, ok := sn.keys[a.Key()]; ok {
				return false
			}
		}
		return true
	})
	return gone, nil
}

// ListACLs returns the ACLs the filter matches, in a stable order.
func (s *Store) ListACLs(f Filter) []ACL { return s.snap.Load().matching(f) }

// ReadACLs is ListACLs as the coordinator holds them now (see ReadTokens).
func (s *Store) ReadACLs(ctx context.Context, f Filter) ([]ACL, error) {
	snap, err := s.load(ctx, nil)
	if err != nil {
		return nil, err
	}
	return snap.matching(f), nil
}

func (snap *snapshot) matching(f Filter) []ACL {
	var out []ACL
	for _, a := range snap.acls.All() {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	return out
}

func sortACLs(list []ACL) {
	slices.SortFunc(list, func(a, b ACL) int {
		for _, c := range [][2]string{{a.Principal, b.Principal}, {string(a.ResourceType), string(b.ResourceType)},
			{a.ResourceName, b.ResourceName}, {string(a.PatternType), string(b.PatternType)},
			{string(a.Operation), string(b.Operation)}, {string(a.Permission), string(b.Permission)}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
}
