package kafka

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"hash"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/auth"
)

// scramExchange is the server side of one SCRAM authentication (RFC 5802):
// the client's first message, the server's (nonce, salt, iterations), the
// client's proof checked against the stored key, and the server's
// signature. Channel binding is not offered (gs2 flag "n" or "y" only), and
// no extension is served (Kafka's delegation-token "tokenauth" included).
type scramExchange struct {
	mechanism string
	h         func() hash.Hash
	creds     Authenticator

	step            int // 0: awaiting client-first, 1: awaiting client-final
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	nonce           string // client's + server's
	cred            auth.ScramCredential
	known           bool // the user has a credential; false: fail at the proof
}

var errScramFailed = errors.New("authentication failed: invalid credentials")

// maxScramMessage bounds a SCRAM message from a client.
const maxScramMessage = 4 << 10

func newScramExchange(mechanism string, creds Authenticator) (*scramExchange, bool) {
	h, ok := auth.ScramHash(mechanism)
	if !ok {
		return nil, false
	}
	return &scramExchange{mechanism: mechanism, h: h, creds: creds}, true
}

// next takes a client message and returns the server's answer; done once
// the client is authenticated as principal. An error fails the
// authentication; its text is what the client is told.
func (x *scramExchange) next(msg []byte) (out []byte, principal string, done bool, err error) {
	if len(msg) > maxScramMessage {
		return nil, "", false, errors.New("SCRAM message too long")
	}
	switch x.step {
	case 0:
		out, err = x.clientFirst(string(msg))
		x.step = 1
		return out, "", false, err
	case 1:
		x.step = 2
		out, err = x.clientFinal(string(msg))
		if err != nil {
			return nil, "", false, err
		}
		return out, x.cred.Principal, true, nil
	}
	return nil, "", false, errors.New("SCRAM exchange already complete")
}

func (x *scramExchange) clientFirst(msg string) ([]byte, error) {
	// gs2-header: ("n" | "y") "," [ "a=" authzid ] ","
	parts := strings.SplitN(msg, ",", 3)
	if len(parts) != 3 {
		return nil, errors.New("malformed SCRAM client-first message")
	}
	switch {
	case parts[0] == "n", parts[0] == "y":
	case strings.HasPrefix(parts[0], "p="):
		return nil, errors.New("SCRAM channel binding is not supported")
	default:
		return nil, errors.New("malformed SCRAM gs2 header")
	}
	x.gs2Header = parts[0] + "," + parts[1] + ","
	x.clientFirstBare = parts[2]
	attrs := strings.Split(parts[2], ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) < 3 {
		return nil, errors.New("malformed SCRAM client-first message")
	}
	if len(attrs) > 2 {
		return nil, errors.New("SCRAM extensions are not supported")
	}
	user, err := scramUnescape(attrs[0][2:])
	if err != nil {
		return nil, err
	}
	principal := "User:" + user
	if authz := parts[1]; authz != "" && (!strings.HasPrefix(authz, "a=") || authz[2:] != user) {
		return nil, errors.New("SCRAM authorization id must be the user name")
	}
	x.cred, x.known = x.creds.ScramCredential(x.mechanism, principal)
	if !x.known {
		// An unknown user is refused at the proof, as a wrong password is,
		// with a salt of the right shape: the answer does not tell which
		// user names exist.
		x.cred = auth.ScramCredential{Principal: principal, Iterations: auth.ScramDefaultIterations, Salt: make([]byte, 32)}
		_, _ = rand.Read(x.cred.Salt)
	}
	snonce := make([]byte, 24)
	if _, err := rand.Read(snonce); err != nil {
		return nil, err
	}
	x.nonce = attrs[1][2:] + base64.RawURLEncoding.EncodeToString(snonce)
	x.serverFirst = "r=" + x.nonce + ",s=" + base64.StdEncoding.EncodeToString(x.cred.Salt) + ",i=" + strconv.Itoa(x.cred.Iterations)
	return []byte(x.serverFirst), nil
}

func (x *scramExchange) clientFinal(msg string) ([]byte, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, errors.New("malformed SCRAM client-final message")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) != 2 || attrs[0] != "c="+base64.StdEncoding.EncodeToString([]byte(x.gs2Header)) {
		return nil, errors.New("SCRAM channel binding does not match")
	}
	// The nonce must end with the one the server sent, as Kafka checks it:
	// librdkafka 2.0.2 (kcat 1.7.1's) sends the client's nonce again in front of it.
	if !strings.HasPrefix(attrs[1], "r=") || !strings.HasSuffix(attrs[1], x.nonce) {
		return nil, errors.New("SCRAM nonce does not match")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil {
		return nil, errors.New("malformed SCRAM proof")
	}
	authMessage := x.clientFirstBare + "," + x.serverFirst + "," + withoutProof
	if !x.known || len(proof) != len(x.cred.StoredKey) {
		return nil, errScramFailed
	}
	sig := auth.ScramHMAC(x.h, x.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ sig[i]
	}
	sum := x.h()
	sum.Write(clientKey)
	if subtle.ConstantTimeCompare(sum.Sum(nil), x.cred.StoredKey) != 1 {
		return nil, errScramFailed
	}
	serverSig := auth.ScramHMAC(x.h, x.cred.ServerKey, authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig)), nil
}

// scramUnescape decodes a saslname ("=2C" is ",", "=3D" is "=").
func scramUnescape(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", errors.New("malformed SCRAM user name")
		}
		i += 2
	}
	return b.String(), nil
}
