// Package auth owns who may do what: API tokens (format, hashing,
// verification), ACLs in Kafka's model and their evaluation, and the store
// that keeps both in the coordinator and a watched copy in memory.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// A token is "slc_<id>_<secret>": id is 16 lowercase hex digits (8 random
// bytes), the name under which the token is stored and revoked; secret is 64
// hex digits (32 random bytes). Only SHA-256(secret) is stored, so a leaked
// store does not leak tokens; the secret is shown once, on creation.
const (
	tokenPrefix = "slc_"
	idBytes     = 8
	secretBytes = 32
)

// ErrMalformedToken is returned by ParseToken for a string that is not a token.
var ErrMalformedToken = errors.New("auth: malformed token")

// TokenRecord is what the store keeps of a token.
type TokenRecord struct {
	ID        string `json:"id"`
	Principal string `json:"principal"`
	// SecretHash is hex(SHA-256(secret)).
	SecretHash string `json:"secret_hash"`
	CreatedAt  int64  `json:"created_at"` // Unix ms
	ExpiresAt  int64  `json:"expires_at"` // Unix ms; 0: never
}

// Expired reports whether the token's expiry has passed at now.
func (r TokenRecord) Expired(now time.Time) bool {
	return r.ExpiresAt > 0 && now.UnixMilli() >= r.ExpiresAt
}

// Matches reports, in constant time, whether secret is this token's secret.
func (r TokenRecord) Matches(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	want, err := hex.DecodeString(r.SecretHash)
	if err != nil || len(want) != len(sum) {
		return false
	}
	return subtle.ConstantTimeCompare(sum[:], want) == 1
}

// NewToken makes a token for principal, expiring after ttl (0: never). It
// returns the token string, to be shown once, and the record to store.
func NewToken(principal string, ttl time.Duration, now time.Time) (string, TokenRecord, error) {
	id := make([]byte, idBytes)
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(id); err != nil {
		return "", TokenRecord{}, err
	}
	if _, err := rand.Read(secret); err != nil {
		return "", TokenRecord{}, err
	}
	tok := tokenPrefix + hex.EncodeToString(id) + "_" + hex.EncodeToString(secret)
	rec, err := RecordFor(tok, principal, now)
	if err != nil {
		return "", TokenRecord{}, err
	}
	if ttl > 0 {
		rec.ExpiresAt = now.Add(ttl).UnixMilli()
	}
	return tok, rec, nil
}

// RecordFor is the record of an existing token string (a bootstrap token
// handed in by an operator), never expiring.
func RecordFor(token, principal string, now time.Time) (TokenRecord, error) {
	id, secret, err := ParseToken(token)
	if err != nil {
		return TokenRecord{}, err
	}
	if err := ValidatePrincipal(principal); err != nil {
		return TokenRecord{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	return TokenRecord{ID: id, Principal: principal, SecretHash: hex.EncodeToString(sum[:]), CreatedAt: now.UnixMilli()}, nil
}

// ParseToken splits a token into its id and secret. It checks the shape only.
func ParseToken(s string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return "", "", ErrMalformedToken
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || !isHex(id, 2*idBytes) || !isHex(secret, 2*secretBytes) {
		return "", "", ErrMalformedToken
	}
	return id, secret, nil
}

// ValidID reports whether s has the shape of a token id.
func ValidID(s string) bool { return isHex(s, 2*idBytes) }

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidatePrincipal checks a principal name: "User:<name>", name 1 to 255
// printable ASCII characters without spaces. "User:*" is a pattern in ACLs,
// never a principal that authenticates.
func ValidatePrincipal(p string) error {
	name, ok := strings.CutPrefix(p, "User:")
	if !ok || name == "" || len(name) > 255 {
		return errors.New(`auth: a principal is "User:<name>", name 1 to 255 characters`)
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return errors.New("auth: a principal name is printable ASCII without spaces")
		}
	}
	return nil
}
