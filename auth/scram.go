package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"time"
)

// SCRAM (RFC 5802, RFC 7677) credentials, for Kafka clients that
// authenticate with SASL SCRAM-SHA-256 or SCRAM-SHA-512. A credential
// belongs to a principal "User:<name>"; the SCRAM user name is <name>. Only
// what RFC 5802 has a server keep is stored (salt, iterations, StoredKey,
// ServerKey), never the password: StoredKey lets the server check a
// client's proof, ServerKey lets it prove itself, and neither gives the
// password or lets anyone log in as the client.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"

	// ScramMinIterations and ScramMaxIterations bound a credential's
	// PBKDF2 iterations (Kafka's bounds); ScramDefaultIterations is what
	// a credential gets when none is asked for.
	ScramMinIterations     = 4096
	ScramMaxIterations     = 16384
	ScramDefaultIterations = 8192

	// ScramMaxPasswordBytes bounds a password handed in.
	ScramMaxPasswordBytes = 1024

	scramSaltBytes = 32
)

// ScramMechanisms are the SCRAM mechanisms credentials are kept for.
var ScramMechanisms = []string{ScramSHA256, ScramSHA512}

// ErrUnknownScramCredential: DeleteScramCredential named no credential.
var ErrUnknownScramCredential = errors.New("auth: no such SCRAM credential")

// ScramCredential is what the store keeps of a principal's SCRAM password
// for one mechanism. Byte fields are base64 in JSON.
type ScramCredential struct {
	Principal  string `json:"principal"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
	CreatedAt  int64  `json:"created_at"` // Unix ms
	// id makes each stored version its own znode (credentials are written
	// once, like tokens; a new password is a new node, the old one deleted).
	ID string `json:"id"`
}

// ScramHash returns the hash function of a SCRAM mechanism, or false.
func ScramHash(mechanism string) (func() hash.Hash, bool) {
	switch mechanism {
	case ScramSHA256:
		return sha256.New, true
	case ScramSHA512:
		return sha512.New, true
	}
	return nil, false
}

// ScramUser is the SCRAM user name of a principal ("User:alice" → "alice").
func ScramUser(principal string) string { return strings.TrimPrefix(principal, "User:") }

// NewScramCredential derives a credential from a password with a fresh
// random salt. iterations 0 takes ScramDefaultIterations.
func NewScramCredential(principal, mechanism, password string, iterations int, now time.Time) (ScramCredential, error) {
	h, ok := ScramHash(mechanism)
	if !ok {
		return ScramCredential{}, fmt.Errorf("auth: SCRAM mechanism %q: %s or %s", mechanism, ScramSHA256, ScramSHA512)
	}
	if iterations == 0 {
		iterations = ScramDefaultIterations
	}
	if iterations < ScramMinIterations || iterations > ScramMaxIterations {
		return ScramCredential{}, fmt.Errorf("auth: SCRAM iterations are %d to %d", ScramMinIterations, ScramMaxIterations)
	}
	if password == "" || len(password) > ScramMaxPasswordBytes {
		return ScramCredential{}, fmt.Errorf("auth: a SCRAM password is 1 to %d bytes", ScramMaxPasswordBytes)
	}
	salt := make([]byte, scramSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return ScramCredential{}, err
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return ScramCredential{}, err
	}
	return ScramCredentialFromSalted(principal, mechanism, salt, salted, iterations, now)
}

// ScramCredentialFromSalted makes a credential from a password the client
// already salted (Kafka's AlterUserScramCredentials sends
// Hi(password, salt, iterations), never the password).
func ScramCredentialFromSalted(principal, mechanism string, salt, salted []byte, iterations int, now time.Time) (ScramCredential, error) {
	h, ok := ScramHash(mechanism)
	if !ok {
		return ScramCredential{}, fmt.Errorf("auth: SCRAM mechanism %q: %s or %s", mechanism, ScramSHA256, ScramSHA512)
	}
	if err := ValidatePrincipal(principal); err != nil {
		return ScramCredential{}, err
	}
	if strings.ContainsAny(ScramUser(principal), ",=") {
		// RFC 5802 escapes these in a user name; Kafka refuses them in
		// SCRAM user names, and so does Sluice.
		return ScramCredential{}, errors.New(`auth: a SCRAM user name cannot contain "," or "="`)
	}
	if iterations < ScramMinIterations || iterations > ScramMaxIterations {
		return ScramCredential{}, fmt.Errorf("auth: SCRAM iterations are %d to %d", ScramMinIterations, ScramMaxIterations)
	}
	if len(salt) == 0 || len(salt) > 1024 || len(salted) != h().Size() {
		return ScramCredential{}, fmt.Errorf("auth: a SCRAM salt is 1 to 1024 bytes and a salted password %d", h().Size())
	}
	id := make([]byte, idBytes)
	if _, err := rand.Read(id); err != nil {
		return ScramCredential{}, err
	}
	stored, server := ScramKeys(h, salted)
	return ScramCredential{Principal: principal, Mechanism: mechanism, Iterations: iterations, Salt: slices.Clone(salt),
		StoredKey: stored, ServerKey: server, CreatedAt: now.UnixMilli(), ID: hex.EncodeToString(id)}, nil
}

// ScramKeys derives StoredKey = H(HMAC(salted, "Client Key")) and
// ServerKey = HMAC(salted, "Server Key") from a salted password.
func ScramKeys(h func() hash.Hash, salted []byte) (storedKey, serverKey []byte) {
	clientKey := ScramHMAC(h, salted, "Client Key")
	sum := h()
	sum.Write(clientKey)
	return sum.Sum(nil), ScramHMAC(h, salted, "Server Key")
}

// ScramHMAC is HMAC(key, msg) with h.
func ScramHMAC(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// validate checks a record read from the store.
func (c ScramCredential) validate() error {
	h, ok := ScramHash(c.Mechanism)
	switch {
	case !ok:
		return fmt.Errorf("unknown mechanism %q", c.Mechanism)
	case ValidatePrincipal(c.Principal) != nil:
		return fmt.Errorf("invalid principal %q", c.Principal)
	case c.Iterations < ScramMinIterations || c.Iterations > ScramMaxIterations:
		return fmt.Errorf("iterations %d out of bounds", c.Iterations)
	case len(c.StoredKey) != h().Size() || len(c.ServerKey) != h().Size() || len(c.Salt) == 0:
		return errors.New("keys of the wrong size")
	case !ValidID(c.ID):
		return errors.New("invalid id")
	}
	return nil
}

// node is the credential's znode name under ScramPath.
func (c ScramCredential) node() string {
	return c.Mechanism + "." + hex.EncodeToString([]byte(c.Principal)) + "." + c.ID
}

// scramKey is the (mechanism, principal) a credential answers for.
type scramKey struct{ mechanism, principal string }
