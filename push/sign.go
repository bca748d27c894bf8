package push

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Standard Webhooks: a delivery carries webhook-id, webhook-timestamp (unix
// seconds) and webhook-signature, "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" keyed by the bytes the secret's base64 (after
// "whsec_") encodes; several signatures, space-separated, while a rotated
// secret is still in its grace.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	secretPrefix           = "whsec_"
	secretBytes            = 32
)

// NewSecret returns a fresh signing secret.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// secretKey is the HMAC key of a secret.
func secretKey(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("push: a secret starts with %s", secretPrefix)
	}
	return base64.StdEncoding.DecodeString(raw)
}

// signer signs with the secrets that are current at a time. Its methods
// may run on many goroutines at once.
type signer struct {
	keys   []signKey
	untils []int64 // unix ms; 0: no end
}

// signKey is one secret's HMAC key, with keyed HMACs to reuse (Reset
// brings one back to its keyed state without hashing the key again).
type signKey struct {
	key  []byte
	macs *sync.Pool // hash.Hash
}

func newSigner(secrets []Secret) (*signer, error) {
	s := &signer{}
	for _, sec := range secrets {
		k, err := secretKey(sec.Key)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, signKey{key: k, macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}})
		s.untils = append(s.untils, sec.UntilMs)
	}
	return s, nil
}

// sign returns the webhook-signature value for a delivery sent at now.
func (s *signer) sign(id string, now time.Time, body []byte) string {
	return s.signAt(id, strconv.FormatInt(now.Unix(), 10), now, body)
}

// signAt is sign with ts, now's webhook-timestamp, already written.
func (s *signer) signAt(id, ts string, now time.Time, body []byte) string {
	var out [2 * (3 + 44 + 1)]byte // room for two signatures
	sig := out[:0]
	var sum [sha256.Size]byte
	for i, k := range s.keys {
		if u := s.untils[i]; u != 0 && now.UnixMilli() >= u {
			continue
		}
		mac := k.macs.Get().(hash.Hash)
		mac.Reset()
		_, _ = io.WriteString(mac, id) // a hash's Write never fails
		mac.Write([]byte{'.'})
		_, _ = io.WriteString(mac, ts)
		mac.Write([]byte{'.'})
		mac.Write(body)
		d := mac.Sum(sum[:0])
		k.macs.Put(mac)
		if len(sig) > 0 {
			sig = append(sig, ' ')
		}
		sig = append(sig, "v1,"...)
		sig = base64.StdEncoding.AppendEncode(sig, d)
	}
	return string(sig)
}

// Rotate puts a new current secret first and gives the others until
// now+grace (keeping an earlier end a key already had); keys past their
// end are dropped.
func Rotate(secrets []Secret, fresh string, now time.Time, grace time.Duration) []Secret {
	out := []Secret{{Key: fresh}}
	until := now.Add(grace).UnixMilli()
	for _, s := range secrets {
		if s.UntilMs != 0 && s.UntilMs <= now.UnixMilli() {
			continue
		}
		if s.UntilMs == 0 || s.UntilMs > until {
			s.UntilMs = until
		}
		if grace > 0 {
			out = append(out, s)
		}
	}
	return out
}
