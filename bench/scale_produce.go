package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/client"
)

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

func (tp topicPartition) String() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }

// producers are acks=all producers, one per partition, each sending one
// record at a time without the client's retries and sending again at once
// after a failure (20 ms later), so that every failure is seen and the
// longest gap between two acknowledgements of a partition is the stall a
// producer there lived through.
type producers struct {
	parts  []topicPartition
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex     // guards the fields below
	sentAck  []time.Time    // per producer: when its latest acknowledged produce was sent
	answered []time.Time    // per producer: when that produce was answered; zero before the first
	stall    time.Duration  // the longest gap between two acknowledgements of one producer
	stallOf  topicPartition // where it was
	longest  time.Duration  // the longest single produce, answered or failed
	acked    int            // acknowledged produces
	errs     map[string]int // failed produces by status and code
	logged   int            // failures printed as progress (the first 8)
	done     *produceResult // the result, once stopped
}

// produceResult is what the producers lived through.
type produceResult struct {
	stall   time.Duration
	stallOf topicPartition
	open    bool // the stall had not ended when the producers stopped
	longest time.Duration
	acked   int
	errs    map[string]int
}

func startProducers(ctx context.Context, cl *client.Client, parts []topicPartition) *producers {
	ctx, cancel := context.WithCancel(ctx)
	p := &producers{parts: parts, cancel: cancel, sentAck: make([]time.Time, len(parts)),
		answered: make([]time.Time, len(parts)), errs: map[string]int{}}
	for i, tp := range parts {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.run(ctx, cl, i, tp)
		}()
	}
	return p
}

func (p *producers) run(ctx context.Context, cl *client.Client, i int, tp topicPartition) {
	opts := client.ProduceOptions{Acks: client.AcksAll, Partition: client.Partition(tp.partition)}
	for n := 0; ctx.Err() == nil; n++ {
		sent := time.Now()
		_, err := cl.Produce(ctx, tp.topic, []client.Record{{JSON: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}}, opts)
		now := time.Now()
		if ctx.Err() != nil {
			return // stopped: this produce's end is not the cluster's doing
		}
		p.record(i, tp, sent, now, err)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func (p *producers) record(i int, tp topicPartition, sent, now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.longest = max(p.longest, now.Sub(sent))
	if err != nil {
		p.errs[produceErrorCode(err)]++
		if p.logged++; p.logged <= 8 {
			progressf("acks=all produce to %s sent %s, failed after %s: %v", tp, sent.Format("15:04:05.000"), secs(now.Sub(sent)), err)
		}
		return
	}
	p.acked++
	if prev := p.answered[i]; !prev.IsZero() && now.Sub(prev) > p.stall {
		p.stall, p.stallOf = now.Sub(prev), tp
	}
	p.sentAck[i], p.answered[i] = sent, now
}

// produceErrorCode is a failed produce's HTTP status and stable code, or
// "no answer" when the gateway did not answer.
func produceErrorCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return fmt.Sprintf("%d %s", ce.Status, ce.Code)
	}
	var te *client.TransportError
	if errors.As(err, &te) {
		return "no answer"
	}
	return err.Error()
}

// waitAcked waits until every producer had a produce sent at or after
// after acknowledged, or fails at deadline.
func (p *producers) waitAcked(ctx context.Context, after, deadline time.Time) error {
	began := time.Now()
	for {
		p.mu.Lock()
		var waiting []string
		for i, t := range p.sentAck {
			if t.Before(after) {
				waiting = append(waiting, p.parts[i].String())
			}
		}
		p.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no produce to %s acknowledged within %s", strings.Join(waiting, ", "), deadline.Sub(began).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop ends the producers (once) and returns what they lived through; a
// producer still without an acknowledgement counts its gap up to now as
// an open stall.
func (p *producers) stop() produceResult {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return *p.done
	}
	now := time.Now()
	r := produceResult{stall: p.stall, stallOf: p.stallOf, longest: p.longest, acked: p.acked, errs: p.errs}
	for i, t := range p.answered {
		if !t.IsZero() && now.Sub(t) > r.stall {
			r.stall, r.stallOf, r.open = now.Sub(t), p.parts[i], true
		}
	}
	p.done = &r
	return r
}

// String is the cell of the result: the longest stall, then the rest.
func (r produceResult) String() string {
	var b strings.Builder
	if r.open {
		b.WriteString("≥ ")
	}
	fmt.Fprintf(&b, "%s (%s); longest single produce %s s; %d acknowledged; ", secs(r.stall), r.stallOf, secs(r.longest), r.acked)
	if len(r.errs) == 0 {
		b.WriteString("no errors")
		return b.String()
	}
	b.WriteString("errors: " + countsText(r.errs))
	return b.String()
}

// countsText is "a ×2, b ×1": each key and its count, keys in order.
func countsText(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
