package api

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Principal string `json:"principal"` // "User:<name>"
	// ExpiresInMs is the token's lifetime; 0 or absent: it never expires.
	ExpiresInMs int64 `json:"expires_in_ms,omitempty"`
}

// Token describes a stored token. Token (the secret) is set only in the
// answer to its creation; it is never shown again.
type Token struct {
	ID        string `json:"id"`
	Token     string `json:"token,omitempty"`
	Principal string `json:"principal"`
	CreatedAt int64  `json:"created_at"`           // Unix ms
	ExpiresAt int64  `json:"expires_at,omitempty"` // Unix ms; absent: never
}

// TokenList is the answer of GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// ACL is one access rule, as Kafka has them: principal ("User:<name>" or
// "User:*"), resource_type (topic, group, cluster), pattern_type (literal,
// the default, or prefixed; a literal "*" names every resource),
// resource_name ("cluster" for the cluster), operation (READ, WRITE,
// CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL)
// and permission (allow or deny).
type ACL struct {
	Principal    string `json:"principal"`
	ResourceType string `json:"resource_type"`
	PatternType  string `json:"pattern_type,omitempty"`
	ResourceName string `json:"resource_name"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

// ACLList is the answer of GET /v1/acls and DELETE /v1/acls.
type ACLList struct {
	ACLs []ACL `json:"acls"`
}

// CreateSessionRequest is the body of POST /v1/session.
type CreateSessionRequest struct {
	Token string `json:"token"`
}

// Session answers GET and POST /v1/session.
type Session struct {
	Principal    string `json:"principal"`
	AuthRequired bool   `json:"auth_required"`
}

// SetScramCredentialRequest is the body of PUT /v1/scram-credentials: the
// password is salted and hashed by the gateway (RFC 5802) and never
// stored.
type SetScramCredentialRequest struct {
	Principal string `json:"principal"` // "User:<name>"; the SCRAM user name is <name>
	Mechanism string `json:"mechanism"` // SCRAM-SHA-256 or SCRAM-SHA-512
	Password  string `json:"password"`
	// Iterations of PBKDF2, 4096 to 16384; 0 or absent: 8192.
	Iterations int `json:"iterations,omitempty"`
}

// ScramCredential describes a stored SCRAM credential (never its keys).
type ScramCredential struct {
	Principal  string `json:"principal"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	CreatedAt  int64  `json:"created_at"` // Unix ms
}

// ScramCredentialList is the answer of GET /v1/scram-credentials.
type ScramCredentialList struct {
	Credentials []ScramCredential `json:"credentials"`
}
