package push

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
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

// signer signs with the secrets that are current at a time.
type signer struct {
	keys   [][]byte
	untils []int64 // unix ms; 0: no end
}

func newSigner(secrets []Secret) (*signer, error) {
	s := &signer{}
	for _, sec := range secrets {
		k, err := secretKey(sec.Key)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, k)
		s.untils = append(s.untils, sec.UntilMs)
	}
	return s, nil
}

// sign returns the webhook-signature value for a delivery sent at now.
func (s *signer) sign(id string, now time.Time, body []byte) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	var sb strings.Builder
	for i, k := range s.keys {
		if u := s.untils[i]; u != 0 && now.UnixMilli() >= u {
			continue
		}
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("v1,")
		sb.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return sb.String()
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
