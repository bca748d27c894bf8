package quota

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Default names the default entity in either part of an entity, as
// Kafka's <default>: the quota applies to each principal (or client id)
// that has none of its own, separately.
const Default = "<default>"

// Kind is one of the rates a quota sets.
type Kind int

// The kinds of quota.
const (
	Produce Kind = iota // producer_byte_rate: batch bytes appended per second
	Fetch               // consumer_byte_rate: batch bytes served to consumers per second
	Request             // request_rate: broker requests per second
	numKinds
)

// String is the kind's metric label.
func (k Kind) String() string {
	switch k {
	case Produce:
		return "produce"
	case Fetch:
		return "fetch"
	case Request:
		return "request"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Entity is who a quota applies to. Principal is "User:<name>", Default or
// "" (any principal); ClientID is a client id, Default or "" (any client
// id). At least one of them is set.
type Entity struct {
	Principal string `json:"principal,omitempty"`
	ClientID  string `json:"client_id,omitempty"`
}

// String is the entity as a caller names it: "User:alice", "User:alice/app1",
// "client app1", "<default>".
func (e Entity) String() string {
	switch {
	case e.ClientID == "":
		return e.Principal
	case e.Principal == "":
		return "client " + e.ClientID
	}
	return e.Principal + "/" + e.ClientID
}

// Quota is one entity's rates; a zero rate is not set (a less specific
// entity's applies, or none).
type Quota struct {
	Entity
	ProducerByteRate float64 `json:"producer_byte_rate,omitempty"`
	ConsumerByteRate float64 `json:"consumer_byte_rate,omitempty"`
	RequestRate      float64 `json:"request_rate,omitempty"`
}

// Rate is the rate q sets for kind (0: none).
func (q Quota) Rate(k Kind) float64 {
	switch k {
	case Produce:
		return q.ProducerByteRate
	case Fetch:
		return q.ConsumerByteRate
	case Request:
		return q.RequestRate
	}
	return 0
}

// Bounds of a quota.
const (
	// MaxRate bounds every rate (a petabyte, or a quadrillion requests, a
	// second: any larger is a typo).
	MaxRate = 1e15
	// MaxClientIDLen bounds a client id.
	MaxClientIDLen = 255
	// MaxQuotas bounds the entities a cluster stores, so the whole set
	// fits in one coordinator node (ZooKeeper refuses 1 MiB).
	MaxQuotas = 2000
)

// ErrInvalid wraps every validation failure.
var ErrInvalid = errors.New("quota: invalid")

// ValidClientID reports whether id is a client id a caller may send: 1 to
// 255 of [a-zA-Z0-9._-] (Kafka's legal client id characters).
func ValidClientID(id string) bool {
	if id == "" || len(id) > MaxClientIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPrincipal is auth.ValidatePrincipal's rule, which this package
// cannot import (auth imports nothing of quotas, and neither should depend
// on the other): "User:<name>", name 1 to 255 printable ASCII characters
// without spaces.
func validPrincipal(p string) bool {
	name, ok := strings.CutPrefix(p, "User:")
	if !ok || name == "" || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// Validate checks the entity's names.
func (e Entity) Validate() error {
	if e.Principal == "" && e.ClientID == "" {
		return fmt.Errorf("%w: name a principal, a client id or both (%q for the default)", ErrInvalid, Default)
	}
	if e.Principal != "" && e.Principal != Default && !validPrincipal(e.Principal) {
		return fmt.Errorf(`%w: principal %q: want "User:<name>" or %q`, ErrInvalid, e.Principal, Default)
	}
	if e.ClientID != "" && e.ClientID != Default && !ValidClientID(e.ClientID) {
		return fmt.Errorf("%w: client id %q: want 1 to %d of [a-zA-Z0-9._-] or %q", ErrInvalid, e.ClientID, MaxClientIDLen, Default)
	}
	return nil
}

// Validate checks the entity and that every rate is unset or in (0, MaxRate],
// and at least one is set.
func (q Quota) Validate() error {
	if err := q.Entity.Validate(); err != nil {
		return err
	}
	set := false
	for _, r := range []struct {
		name string
		v    float64
	}{{"producer_byte_rate", q.ProducerByteRate}, {"consumer_byte_rate", q.ConsumerByteRate}, {"request_rate", q.RequestRate}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > MaxRate {
			return fmt.Errorf("%w: %s %v: want a number in (0, %g], or leave it out", ErrInvalid, r.name, r.v, float64(MaxRate))
		}
		set = set || r.v > 0
	}
	if !set {
		return fmt.Errorf("%w: set at least one of producer_byte_rate, consumer_byte_rate, request_rate (to remove the quota, delete it)", ErrInvalid)
	}
	return nil
}

// Config is a set of quotas, immutable once built, indexed for Resolve.
type Config struct {
	list []Quota
	by   map[Entity]Quota
}

// NewConfig indexes quotas; a later one for the same entity wins.
func NewConfig(quotas []Quota) *Config {
	c := &Config{by: make(map[Entity]Quota, len(quotas))}
	for _, q := range quotas {
		c.by[q.Entity] = q
	}
	for _, q := range c.by {
		c.list = append(c.list, q)
	}
	sortQuotas(c.list)
	return c
}

// All lists the quotas by principal, then client id.
func (c *Config) All() []Quota { return slices.Clone(c.list) }

// Len is the number of entities.
func (c *Config) Len() int { return len(c.list) }

// Get returns the quota of exactly e.
func (c *Config) Get(e Entity) (Quota, bool) {
	q, ok := c.by[e]
	return q, ok
}

// Resolve finds the quota of kind that applies to a caller, in Kafka's
// order of precedence, the first entity that sets the kind winning:
//
//  1. principal and client id
//  2. principal, default client id
//  3. principal
//  4. default principal, client id
//  5. default principal, default client id
//  6. default principal
//  7. client id
//  8. default client id
//
// clientID "" (the caller sent none) matches only entities without a
// client id or with the default one. It returns the rate (0: no quota) and
// the key of the bucket the caller shares: the matching entity with each
// default replaced by the caller's own name, so a default quota gives every
// principal (or client id) a bucket of its own while a principal's quota is
// shared by all its client ids.
func (c *Config) Resolve(principal, clientID string, k Kind) (rate float64, key Entity) {
	if c == nil || len(c.by) == 0 {
		return 0, Entity{}
	}
	for _, cand := range [...]struct {
		e, key   Entity
		clientID bool // names the caller's client id
	}{
		{Entity{principal, clientID}, Entity{principal, clientID}, true},
		{Entity{principal, Default}, Entity{principal, clientID}, false},
		{Entity{principal, ""}, Entity{principal, ""}, false},
		{Entity{Default, clientID}, Entity{principal, clientID}, true},
		{Entity{Default, Default}, Entity{principal, clientID}, false},
		{Entity{Default, ""}, Entity{principal, ""}, false},
		{Entity{"", clientID}, Entity{"", clientID}, true},
		{Entity{"", Default}, Entity{"", clientID}, false},
	} {
		if cand.clientID && clientID == "" {
			continue
		}
		if q, ok := c.by[cand.e]; ok && q.Rate(k) > 0 {
			return q.Rate(k), cand.key
		}
	}
	return 0, Entity{}
}

func sortQuotas(list []Quota) {
	slices.SortFunc(list, func(a, b Quota) int {
		if c := strings.Compare(a.Principal, b.Principal); c != 0 {
			return c
		}
		return strings.Compare(a.ClientID, b.ClientID)
	})
}
