package faulttest

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLoadOptions shape a franz-go producer writing into a History.
type KafkaLoadOptions struct {
	// Seeds are the brokers' Kafka addresses. Required.
	Seeds []string
	// Partition every record goes to. Default 0.
	Partition int32
	// Idempotent keeps franz-go's idempotent producer (exactly once per
	// record); false turns it off (kgo.DisableIdempotentWrite), so a
	// retried batch may be stored twice and its ops are AtLeastOnce.
	Idempotent bool
	// InFlight is how many records may be unacknowledged at once, so
	// batches of several records form. Default 16.
	InFlight int
	// DeliveryTimeout bounds each record (kgo.RecordDeliveryTimeout); a
	// record not acknowledged by then is an Unknown op. Default 60 s.
	DeliveryTimeout time.Duration
}

// KafkaLoad is a franz-go producer with acks=all writing fresh values of
// one History producer until Stop. Every record is an op of its own; its
// value is a JSON string, so that ReadPartition reads it back.
type KafkaLoad struct {
	h      *History
	w      int
	o      KafkaLoadOptions
	cl     *kgo.Client
	seen   *kafkaAnswers
	cancel context.CancelFunc
	wg     sync.WaitGroup // the producing goroutine and every record's callback
}

// StartKafkaLoad starts a producer through the Kafka listener.
func (h *History) StartKafkaLoad(o KafkaLoadOptions) *KafkaLoad {
	h.c.T.Helper()
	if o.InFlight == 0 {
		o.InFlight = 16
	}
	if o.DeliveryTimeout == 0 {
		o.DeliveryTimeout = 60 * time.Second
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(o.DeliveryTimeout),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	if !o.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	seen := &kafkaAnswers{}
	opts = append(opts, kgo.WithHooks(seen))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		h.c.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &KafkaLoad{h: h, w: h.NewProducer(), o: o, cl: cl, seen: seen, cancel: cancel}
	l.wg.Add(1)
	go l.run(ctx)
	h.c.T.Cleanup(l.Stop)
	return l
}

// Producer is the History producer number of the load's values.
func (l *KafkaLoad) Producer() int { return l.w }

func (l *KafkaLoad) run(ctx context.Context) {
	defer l.wg.Done()
	slots := make(chan struct{}, l.o.InFlight)
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		v := l.h.values(l.w, 1)[0]
		val, _ := json.Marshal(v)
		op := &Op{Producer: l.w, Values: []string{v}, Partition: l.o.Partition, Acks: "all", Start: time.Now(), AtLeastOnce: !l.o.Idempotent}
		l.wg.Add(1)
		// Not ctx: a record sent must be waited for, not abandoned,
		// so that every op's outcome is what the broker answered.
		l.cl.Produce(context.Background(), &kgo.Record{Topic: l.h.Topic, Partition: l.o.Partition, Value: val}, func(r *kgo.Record, err error) {
			defer l.wg.Done()
			op.End = time.Now()
			if err != nil {
				op.Outcome, op.Err = Unknown, err.Error()
			} else {
				op.Outcome, op.Offsets = OK, []int64{r.Offset}
			}
			l.h.mu.Lock()
			l.h.ops = append(l.h.ops, op)
			l.h.mu.Unlock()
			<-slots
		})
	}
}

// Stop ends the load once every record sent has its answer (at most the
// delivery timeout), and closes the client.
func (l *KafkaLoad) Stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	l.wg.Wait()
	l.cl.Close()
	l.cancel = nil
}

// Acked counts the load's acknowledged records so far, those sent after
// since only when since is not zero.
func (l *KafkaLoad) Acked(since time.Time) int {
	n := 0
	for _, op := range l.h.Ops() {
		if op.Producer == l.w && op.Outcome == OK && !op.Start.Before(since) {
			n++
		}
	}
	return n
}

// Answers counts the Produce requests sent to broker node at or after
// since that it answered (with any error codes inside), and the batches it
// acknowledged at or after since.
func (l *KafkaLoad) Answers(node int32, since time.Time) (answered, acked int) {
	return l.seen.count(node, since)
}

// kafkaAnswers is a franz-go hook that notes which broker answered each
// Produce request and acknowledged each batch, and when.
type kafkaAnswers struct {
	mu       sync.Mutex // guards the fields below
	answered []nodeTime
	acked    []nodeTime
}

type nodeTime struct {
	node int32
	at   time.Time
}

// OnBrokerE2E implements kgo.HookBrokerE2E; key 0 is Produce.
func (a *kafkaAnswers) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != 0 || e2e.Err() != nil {
		return
	}
	sent := time.Now().Add(-e2e.DurationE2E())
	a.mu.Lock()
	a.answered = append(a.answered, nodeTime{meta.NodeID, sent})
	a.mu.Unlock()
}

// OnProduceBatchWritten implements kgo.HookProduceBatchWritten.
func (a *kafkaAnswers) OnProduceBatchWritten(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.ProduceBatchMetrics) {
	a.mu.Lock()
	a.acked = append(a.acked, nodeTime{meta.NodeID, time.Now()})
	a.mu.Unlock()
}

func (a *kafkaAnswers) count(node int32, since time.Time) (answered, acked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, nt := range a.answered {
		if nt.node == node && !nt.at.Before(since) {
			answered++
		}
	}
	for _, nt := range a.acked {
		if nt.node == node && !nt.at.Before(since) {
			acked++
		}
	}
	return answered, acked
}
