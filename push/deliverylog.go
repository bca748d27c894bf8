package push

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// The delivery log: every attempt the endpoint did not acknowledge, every
// record dead-lettered, and every acknowledgement that followed failed
// attempts go to the internal topic api.PushDeliveriesTopic, keyed by
// subscription, so GET /v1/push/{name}/deliveries on any gateway shows what
// every gateway's pushers saw. Best effort and bounded: entries wait in a
// queue of deliveryQueue, and past it are dropped (and counted); a write
// that fails is not retried. Failures are few by construction (retries
// back off, outages are probed one request at a time), so the queue holds.
const (
	deliveryQueue = 1024
	deliveryBatch = 100
)

// deliveryLog is the queue and its writer goroutine (owned by the Manager).
type deliveryLog struct {
	c        Cluster
	instance string
	log      *slog.Logger
	m        *Metrics
	q        chan api.PushDelivery
}

func newDeliveryLog(c Cluster, instance string, m *Metrics, log *slog.Logger) *deliveryLog {
	return &deliveryLog{c: c, instance: instance, m: m, log: log, q: make(chan api.PushDelivery, deliveryQueue)}
}

// add queues an entry, or drops it when the queue is full.
func (d *deliveryLog) add(e api.PushDelivery) {
	e.Gateway = d.instance
	select {
	case d.q <- e:
	default:
		d.m.logDropped.Inc()
	}
}

// record queues one record's line: a failed attempt, a dead-lettering, or
// an acknowledgement that followed failed attempts.
func (d *deliveryLog) record(sub string, tp api.TopicPartition, offset int64, attempt int, o outcome, status string) {
	if d == nil {
		return
	}
	e := api.PushDelivery{TimeMs: time.Now().UnixMilli(), Subscription: sub, Topic: tp.Topic, Partition: tp.Partition,
		Offset: offset, Attempt: attempt, Status: status, HTTPStatus: o.status, LatencyMs: o.took.Milliseconds(), Response: o.excerpt}
	if status == api.DeliveryFailed {
		e.Error = o.verdict.String()
	}
	d.add(e)
}

// run writes queued entries until ctx ends.
func (d *deliveryLog) run(ctx context.Context) {
	for {
		var e api.PushDelivery
		select {
		case <-ctx.Done():
			return
		case e = <-d.q:
		}
		batch := []api.PushDelivery{e}
	more:
		for len(batch) < deliveryBatch {
			select {
			case e := <-d.q:
				batch = append(batch, e)
			default:
				break more
			}
		}
		for _, e := range batch {
			v, _ := json.Marshal(e)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.c.Produce(wctx, api.PushDeliveriesTopic, recordbatch.Record{Timestamp: e.TimeMs, Key: []byte(e.Subscription), Value: v})
			cancel()
			if err != nil {
				d.m.logDropped.Inc()
				if ctx.Err() == nil {
					d.log.Debug("a delivery log entry was not written", "err", err)
				}
			}
		}
	}
}
