package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// ResourceType is what an ACL protects.
type ResourceType string

const (
	ResourceTopic   ResourceType = "topic"
	ResourceGroup   ResourceType = "group"
	ResourceCluster ResourceType = "cluster"
)

// ClusterName is the name of the one cluster resource.
const ClusterName = "cluster"

// PatternType says how an ACL's resource name matches.
type PatternType string

const (
	// PatternLiteral matches the name exactly; the name "*" matches every name.
	PatternLiteral PatternType = "literal"
	// PatternPrefixed matches every name that starts with the ACL's name.
	PatternPrefixed PatternType = "prefixed"
)

// Operation is what a principal does to a resource.
type Operation string

const (
	OpRead            Operation = "READ"
	OpWrite           Operation = "WRITE"
	OpCreate          Operation = "CREATE"
	OpDelete          Operation = "DELETE"
	OpAlter           Operation = "ALTER"
	OpDescribe        Operation = "DESCRIBE"
	OpDescribeConfigs Operation = "DESCRIBE_CONFIGS"
	OpAlterConfigs    Operation = "ALTER_CONFIGS"
	// OpAll in an ACL stands for every operation.
	OpAll Operation = "ALL"
)

var operations = []Operation{OpRead, OpWrite, OpCreate, OpDelete, OpAlter, OpDescribe, OpDescribeConfigs, OpAlterConfigs, OpAll}

// Permission is an ACL's verdict when it matches.
type Permission string

const (
	Allow Permission = "allow"
	Deny  Permission = "deny"
)

// AnyPrincipal in an ACL matches every principal.
const AnyPrincipal = "User:*"

// ACL is one rule, as Kafka has them.
type ACL struct {
	Principal    string       `json:"principal"`
	ResourceType ResourceType `json:"resource_type"`
	PatternType  PatternType  `json:"pattern_type"`
	ResourceName string       `json:"resource_name"`
	Operation    Operation    `json:"operation"`
	Permission   Permission   `json:"permission"`
}

// Validate checks every field; PatternType defaults to literal.
func (a *ACL) Validate() error {
	if a.PatternType == "" {
		a.PatternType = PatternLiteral
	}
	if a.Principal != AnyPrincipal {
		if err := ValidatePrincipal(a.Principal); err != nil {
			return err
		}
	}
	switch a.ResourceType {
	case ResourceTopic, ResourceGroup:
	case ResourceCluster:
		if a.ResourceName != ClusterName && a.ResourceName != "*" {
			return fmt.Errorf(`auth: the cluster resource is named %q`, ClusterName)
		}
	default:
		return fmt.Errorf(`auth: resource_type is "topic", "group" or "cluster", not %q`, a.ResourceType)
	}
	switch a.PatternType {
	case PatternLiteral:
	case PatternPrefixed:
		if a.ResourceName == "*" {
			return fmt.Errorf(`auth: "*" is a literal pattern`)
		}
	default:
		return fmt.Errorf(`auth: pattern_type is "literal" or "prefixed", not %q`, a.PatternType)
	}
	if a.ResourceName == "" || len(a.ResourceName) > 255 || strings.ContainsFunc(a.ResourceName, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("auth: resource_name is 1 to 255 printable ASCII characters")
	}
	if !slices.Contains(operations, a.Operation) {
		return fmt.Errorf("auth: operation %q is not one of %v", a.Operation, operations)
	}
	if a.Permission != Allow && a.Permission != Deny {
		return fmt.Errorf(`auth: permission is "allow" or "deny", not %q`, a.Permission)
	}
	return nil
}

// Key names an ACL in the store: equal ACLs have equal keys, so creating one
// twice stores it once.
func (a ACL) Key() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{a.Principal, string(a.ResourceType), string(a.PatternType),
		a.ResourceName, string(a.Operation), string(a.Permission)}, "\x00")))
	return hex.EncodeToString(sum[:12])
}

// Filter selects ACLs in a listing or deletion; empty fields match anything.
type Filter struct {
	Principal    string
	ResourceType ResourceType
	PatternType  PatternType
	ResourceName string
	Operation    Operation
	Permission   Permission
}

// Matches reports whether a passes the filter (fields compared as written,
// not as patterns).
func (f Filter) Matches(a ACL) bool {
	return (f.Principal == "" || f.Principal == a.Principal) &&
		(f.ResourceType == "" || f.ResourceType == a.ResourceType) &&
		(f.PatternType == "" || f.PatternType == a.PatternType) &&
		(f.ResourceName == "" || f.ResourceName == a.ResourceName) &&
		(f.Operation == "" || f.Operation == a.Operation) &&
		(f.Permission == "" || f.Permission == a.Permission)
}
