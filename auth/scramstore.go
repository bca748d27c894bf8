package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-io/sluice/coord"
)

// scramSet is the SCRAM credentials of a snapshot: every stored node, and
// the one in force per (mechanism, principal), the newest when a password
// change left two for a moment.
type scramSet struct {
	nodes   map[string]ScramCredential // by znode name
	current map[scramKey]ScramCredential
}

func newScramSet(n int) scramSet {
	return scramSet{nodes: make(map[string]ScramCredential, n), current: make(map[scramKey]ScramCredential, n)}
}

func (set scramSet) add(node string, c ScramCredential) {
	set.nodes[node] = c
	k := scramKey{c.Mechanism, c.Principal}
	if cur, ok := set.current[k]; !ok || c.CreatedAt > cur.CreatedAt || (c.CreatedAt == cur.CreatedAt && c.ID > cur.ID) {
		set.current[k] = c
	}
}

// loadScram reads the credential nodes the old set lacks.
func (s *Store) loadScram(ctx context.Context, old scramSet, nodes []string) (scramSet, error) {
	next := newScramSet(len(nodes))
	for _, n := range nodes {
		if c, ok := old.nodes[n]; ok {
			next.add(n, c)
			continue
		}
		var c ScramCredential
		ok, err := s.read(ctx, ScramPath+"/"+n, &c)
		if err != nil {
			return scramSet{}, err
		}
		if !ok {
			continue
		}
		if err := c.validate(); err != nil || c.node() != n {
			s.log.Warn("ignoring an invalid SCRAM credential in the store", "node", n, "err", err)
			continue
		}
		next.add(n, c)
	}
	return next, nil
}

// ScramCredential returns the credential in force of principal for
// mechanism, from the watched copy.
func (s *Store) ScramCredential(mechanism, principal string) (ScramCredential, bool) {
	c, ok := s.snap.Load().scram.current[scramKey{mechanism, principal}]
	return c, ok
}

// ReadScramCredentials lists the credentials in force as the coordinator
// holds them now, by principal then mechanism; principal "" lists all.
func (s *Store) ReadScramCredentials(ctx context.Context, principal string) ([]ScramCredential, error) {
	snap, err := s.load(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []ScramCredential
	for _, c := range snap.scram.current {
		if principal == "" || c.Principal == principal {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b ScramCredential) int {
		if c := strings.Compare(a.Principal, b.Principal); c != 0 {
			return c
		}
		return strings.Compare(a.Mechanism, b.Mechanism)
	})
	return out, nil
}

// SetScramCredential stores c as the credential in force of its principal
// and mechanism, and deletes the ones it replaces.
func (s *Store) SetScramCredential(ctx context.Context, c ScramCredential) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("auth: SCRAM credential: %w", err)
	}
	if err := coord.EnsurePath(ctx, s.c, ScramPath); err != nil {
		return err
	}
	data, _ := json.Marshal(c)
	if _, err := s.c.Create(ctx, ScramPath+"/"+c.node(), data, 0); err != nil {
		return fmt.Errorf("auth: storing the SCRAM credential: %w", err)
	}
	if err := s.deleteScram(ctx, c.Mechanism, c.Principal, c.node()); err != nil {
		return err
	}
	s.awaitCopy(ctx, func(sn *snapshot) bool {
		cur, ok := sn.scram.current[scramKey{c.Mechanism, c.Principal}]
		return ok && cur.ID == c.ID
	})
	return nil
}

// DeleteScramCredential removes principal's credential for mechanism;
// ErrUnknownScramCredential when there is none.
func (s *Store) DeleteScramCredential(ctx context.Context, mechanism, principal string) error {
	snap, err := s.load(ctx, nil)
	if err != nil {
		return err
	}
	if _, ok := snap.scram.current[scramKey{mechanism, principal}]; !ok {
		return ErrUnknownScramCredential
	}
	if err := s.deleteScram(ctx, mechanism, principal, ""); err != nil {
		return err
	}
	s.awaitCopy(ctx, func(sn *snapshot) bool {
		_, ok := sn.scram.current[scramKey{mechanism, principal}]
		return !ok
	})
	return nil
}

// deleteScram deletes every stored node of (mechanism, principal) but keep.
func (s *Store) deleteScram(ctx context.Context, mechanism, principal, keep string) error {
	names, _, err := s.c.Children(ctx, ScramPath)
	if err != nil {
		return err
	}
	prefix := ScramCredential{Mechanism: mechanism, Principal: principal}.node() // ends in "."
	for _, n := range names {
		if n == keep || !strings.HasPrefix(n, prefix) {
			continue
		}
		if err := s.c.Delete(ctx, ScramPath+"/"+n, coord.AnyVersion); err != nil && !errors.Is(err, coord.ErrNoNode) {
			return fmt.Errorf("auth: deleting a SCRAM credential: %w", err)
		}
	}
	return nil
}
