package broker

import (
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/quota"
)

// The Kafka listener's client quotas (kafka.Quotas): the same enforcer
// and buckets as the HTTP door's, so a principal's rates are shared by
// both. A Kafka request is charged after it is served and answered with
// the debt it left (Kafka's throttle_time_ms, with the connection muted
// for it), where an HTTP request over quota is refused before: a Kafka
// client has no way to be told "retry" that it honours everywhere.
var _ kafka.Quotas = kafkaBackend{}

// kafkaCaller is the quota caller of a Kafka request: the connection's
// principal, or the anonymous one an unauthenticated HTTP request has,
// and the client id when it is one quotas may name.
func kafkaCaller(who kafka.Caller) (principal, clientID string) {
	principal = who.Principal
	if principal == "" {
		principal = auth.Anonymous
	}
	clientID = who.ClientID
	if !quota.ValidClientID(clientID) {
		clientID = ""
	}
	return principal, clientID
}

func (k kafkaBackend) ChargeRequest(who kafka.Caller) time.Duration {
	p, c := kafkaCaller(who)
	e := k.b.quotas.enforcer
	e.Charge(p, c, quota.Request, 1)
	return e.Debt(p, c, quota.Request)
}

func (k kafkaBackend) ChargeProduce(who kafka.Caller, bytes int64) time.Duration {
	p, c := kafkaCaller(who)
	e := k.b.quotas.enforcer
	if bytes > 0 {
		e.Charge(p, c, quota.Produce, bytes)
	}
	return e.Debt(p, c, quota.Produce)
}
