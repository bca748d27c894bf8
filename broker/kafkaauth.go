package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/kafka"
)

// Kafka's listener security protocols.
const (
	KafkaPlaintext     = "PLAINTEXT"
	KafkaSSL           = "SSL"
	KafkaSASLPlaintext = "SASL_PLAINTEXT"
	KafkaSASLSSL       = "SASL_SSL"
)

// kafkaSecurity is what the Kafka listener's security protocol makes.
type kafkaSecurity struct {
	protocol   string
	tls        *tls.Config // nil: plaintext
	sasl       bool
	mechanisms []string
}

// kafkaSecurity resolves KafkaOptions.SecurityProtocol against the
// broker's TLS (tlsCfg, nil without Options.TLS) and auth options.
func (b *Broker) kafkaSecurity(tlsCfg *tls.Config) (kafkaSecurity, error) {
	o := b.opts.Kafka
	p := o.SecurityProtocol
	if p == "" {
		p = KafkaPlaintext
		if tlsCfg != nil {
			p = KafkaSSL
		}
		if b.opts.Auth.Required {
			p = "SASL_" + p
		}
	}
	sec := kafkaSecurity{protocol: p}
	switch p {
	case KafkaPlaintext, KafkaSASLPlaintext:
	case KafkaSSL, KafkaSASLSSL:
		if tlsCfg == nil {
			return sec, fmt.Errorf("broker: Kafka security protocol %s needs the broker's TLS certificate (Options.TLS)", p)
		}
		sec.tls = tlsCfg
	default:
		return sec, fmt.Errorf("broker: Kafka security protocol %q: one of %s, %s, %s, %s", p, KafkaPlaintext, KafkaSSL, KafkaSASLPlaintext, KafkaSASLSSL)
	}
	sec.sasl = p == KafkaSASLPlaintext || p == KafkaSASLSSL
	if !sec.sasl {
		if len(o.SASLMechanisms) > 0 {
			return sec, fmt.Errorf("broker: SASL mechanisms need a SASL Kafka security protocol, not %s", p)
		}
		if b.opts.Auth.Required {
			return sec, fmt.Errorf("broker: with Auth.Required the Kafka listener must authenticate its clients: %s or %s, not %s", KafkaSASLPlaintext, KafkaSASLSSL, p)
		}
		return sec, nil
	}
	sec.mechanisms = slices.Clone(o.SASLMechanisms)
	if len(sec.mechanisms) == 0 {
		sec.mechanisms = slices.Clone(kafka.Mechanisms)
	}
	for _, m := range sec.mechanisms {
		if !slices.Contains(kafka.Mechanisms, m) {
			return sec, fmt.Errorf("broker: SASL mechanism %q: of %v", m, kafka.Mechanisms)
		}
	}
	return sec, nil
}

// KafkaSecurityProtocol is the Kafka listener's security protocol, "" when
// the broker serves no Kafka protocol.
func (b *Broker) KafkaSecurityProtocol() string { return b.kafka.protocol }

// kafkaAuth is the Kafka listener's Authenticator: the broker's copy of the
// cluster's tokens, SCRAM credentials and ACLs, with the broker's super
// users. With Options.Auth.Required off, a SASL listener authenticates
// its clients and lets them do everything, as the HTTP API then does.
type kafkaAuth struct{ b *Broker }

var _ kafka.Authenticator = kafkaAuth{}

var errNoAuthStore = errors.New("broker: no auth store")

func (a kafkaAuth) Token(ctx context.Context, token string) (string, error) {
	if a.b.authStore == nil {
		return "", errNoAuthStore
	}
	return a.b.authStore.Authenticate(ctx, token, time.Now())
}

func (a kafkaAuth) ScramCredential(mechanism, principal string) (auth.ScramCredential, bool) {
	if a.b.authStore == nil {
		return auth.ScramCredential{}, false
	}
	return a.b.authStore.ScramCredential(mechanism, principal)
}

func (a kafkaAuth) Allowed(principal string, op auth.Operation, rt auth.ResourceType, name string) bool {
	if !a.b.opts.Auth.Required {
		return true
	}
	z := auth.Authorizer{SuperUsers: a.b.opts.Auth.SuperUsers, ACLs: a.b.authStore.ACLs()}
	return z.Allowed(principal, op, rt, name)
}

// The Kafka listener's SCRAM credential APIs (kafka.ScramStore) go to the
// auth store in the coordinator: the broker's watched one, or, on a broker
// that keeps none, one that only reads and writes.
var _ kafka.ScramStore = kafkaBackend{}

func (k kafkaBackend) scramStore() *auth.Store {
	if k.b.authStore != nil {
		return k.b.authStore
	}
	return auth.NewStore(k.b.opts.Coord, k.b.log)
}

func (k kafkaBackend) ReadScramCredentials(ctx context.Context, principal string) ([]auth.ScramCredential, error) {
	return k.scramStore().ReadScramCredentials(ctx, principal)
}

func (k kafkaBackend) SetScramCredential(ctx context.Context, c auth.ScramCredential) error {
	return k.scramStore().SetScramCredential(ctx, c)
}

func (k kafkaBackend) DeleteScramCredential(ctx context.Context, mechanism, principal string) error {
	return k.scramStore().DeleteScramCredential(ctx, mechanism, principal)
}
