package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Quotas are the broker's client quotas as the Kafka listener applies
// them: the request-rate quota to every request but ApiVersions, and the
// producer byte-rate quota to the record bytes of every Produce. A
// Backend that enforces quotas implements it too; against one that does
// not, nothing is throttled. Each method charges what the request cost
// and returns how long the caller's quota is in debt after it (0: within
// the quota). Every method may be called from many connections at once.
type Quotas interface {
	ChargeRequest(who Caller) time.Duration
	ChargeProduce(who Caller, bytes int64) time.Duration
}

// Caller is who a request is accounted to: the connection's principal
// (auth.Anonymous until the connection authenticates: the principal
// as an HTTP request without credentials is) and the request's client id.
type Caller struct {
	Principal string
	ClientID  string
}

// maxThrottle bounds the throttle one answer carries and the time a
// connection is muted for it (Kafka bounds it by its quota window).
const maxThrottle = 30 * time.Second

// throttle charges a request's quotas and returns the throttle its answer
// carries: the longest debt of the quotas it charged. Kafka's behaviour
// (KIP-219) follows in serve: an answer a client throttles itself after
// (Produce v6+, Fetch v8+ and most others) goes out at once with
// throttle_time_ms, and the connection then reads nothing for that long;
// an older answer is held back for that long before it is written.
func (c *conn) throttle(key int16, req kmsg.Request, resp kmsg.Response) time.Duration {
	q, ok := c.s.opts.Backend.(Quotas)
	if !ok || key == kmsg.ApiVersions.Int16() {
		return 0
	}
	who := Caller{Principal: c.principal, ClientID: c.clientID}
	d := q.ChargeRequest(who)
	if pr, ok := req.(*kmsg.ProduceRequest); ok {
		var n int64
		for _, t := range pr.Topics {
			for _, p := range t.Partitions {
				n += int64(len(p.Records))
			}
		}
		d = max(d, q.ChargeProduce(who, n))
	}
	d = min(d, maxThrottle)
	tr, ok := resp.(settableThrottle)
	if !ok {
		return d
	}
	// The answer may carry a throttle of its own (a Fetch's consumer
	// byte-rate debt): the longest one is answered and waited.
	ms, _ := tr.Throttle()
	if want := int32((d + time.Millisecond - 1) / time.Millisecond); want > ms {
		tr.SetThrottle(want)
	}
	return max(d, min(time.Duration(ms)*time.Millisecond, maxThrottle))
}

// settableThrottle is an answer with a throttle_time_ms field (every
// kmsg response that has one).
type settableThrottle interface {
	Throttle() (int32, bool)
	SetThrottle(int32)
}

// throttledAfter reports whether the client of resp waits out its
// throttle itself once answered (KIP-219); false for answers without a
// throttle field and for the older versions, which the broker holds back.
func throttledAfter(resp kmsg.Response) bool {
	tr, ok := resp.(kmsg.ThrottleResponse)
	if !ok {
		return false
	}
	_, after := tr.Throttle()
	return after
}

// pause waits d, or less when the server closes the connection; false
// when it did.
func (c *conn) pause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closing:
		return false
	case <-c.s.ctx.Done():
		return false
	}
}
