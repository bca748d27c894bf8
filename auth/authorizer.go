package auth

import (
	"slices"
	"strings"
)

// implies lists, for an operation asked for, the operations whose allow
// ACLs grant it too (Kafka's rule: READ, WRITE, DELETE and ALTER imply
// DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). Deny ACLs are never
// widened: a deny matches the operation asked for, or ALL.
var implies = map[Operation][]Operation{
	OpDescribe:        {OpDescribe, OpRead, OpWrite, OpDelete, OpAlter},
	OpDescribeConfigs: {OpDescribeConfigs, OpAlterConfigs},
}

// ACLSet is an immutable set of ACLs indexed for evaluation. The zero value
// holds none (everything is denied but to super users).
type ACLSet struct {
	// by resource type: literal ACLs by name ("*" included), and the
	// prefixed ones.
	literal  map[ResourceType]map[string][]ACL
	prefixed map[ResourceType][]ACL
	all      []ACL
}

// NewACLSet indexes acls (already validated).
func NewACLSet(acls []ACL) *ACLSet {
	s := &ACLSet{literal: map[ResourceType]map[string][]ACL{}, prefixed: map[ResourceType][]ACL{}, all: slices.Clone(acls)}
	for _, a := range acls {
		if a.PatternType == PatternPrefixed {
			s.prefixed[a.ResourceType] = append(s.prefixed[a.ResourceType], a)
			continue
		}
		m := s.literal[a.ResourceType]
		if m == nil {
			m = map[string][]ACL{}
			s.literal[a.ResourceType] = m
		}
		m[a.ResourceName] = append(m[a.ResourceName], a)
	}
	return s
}

// All returns the ACLs of the set.
func (s *ACLSet) All() []ACL {
	if s == nil {
		return nil
	}
	return slices.Clone(s.all)
}

// Allowed reports whether principal may perform op on the resource: a
// matching deny wins over any allow, and with no matching allow the answer
// is no. Super users are decided by the caller (Authorizer).
func (s *ACLSet) Allowed(principal string, op Operation, rt ResourceType, name string) bool {
	if s == nil {
		return false
	}
	allowed := false
	visit := func(a ACL) bool { // false: a deny matched, stop
		if a.Principal != principal && a.Principal != AnyPrincipal {
			return true
		}
		if a.Permission == Deny {
			if a.Operation == op || a.Operation == OpAll {
				return false
			}
			return true
		}
		if !allowed && (a.Operation == OpAll || a.Operation == op || slices.Contains(implies[op], a.Operation)) {
			allowed = true
		}
		return true
	}
	lit := s.literal[rt]
	for _, key := range [2]string{name, "*"} {
		for _, a := range lit[key] {
			if !visit(a) {
				return false
			}
		}
		if name == "*" {
			break
		}
	}
	for _, a := range s.prefixed[rt] {
		if strings.HasPrefix(name, a.ResourceName) && !visit(a) {
			return false
		}
	}
	return allowed
}

// Authorizer decides requests: super users may do everything; everyone
// else as the ACLs say.
type Authorizer struct {
	SuperUsers []string
	ACLs       *ACLSet
}

// Allowed applies the rules to one request.
func (z Authorizer) Allowed(principal string, op Operation, rt ResourceType, name string) bool {
	if slices.Contains(z.SuperUsers, principal) {
		return true
	}
	return z.ACLs.Allowed(principal, op, rt, name)
}
