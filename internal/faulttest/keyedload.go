package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// KeyedOp is one produce request of a KeyedLoad: records of one key (so of
// one partition, which the gateway picks by the key's hash).
type KeyedOp struct {
	Producer   int
	Key        string
	Values     []string
	Start, End time.Time
	Outcome    Outcome
	Code       api.Code
	Err        string
	Partition  int32   // where the records landed (OK ops)
	Offsets    []int64 // OK ops
}

// KeyedOptions shape a KeyedLoad.
type KeyedOptions struct {
	// URLs are the gateways: producer i sends to URLs[i % len]. Default the
	// cluster's.
	URLs []string
	// Producers run concurrently, one request at a time. Default 2.
	Producers int
	// Keys is how many distinct keys there are ("k000".."k<Keys-1>").
	// Default 64.
	Keys int
	// MaxRecords per request (1..MaxRecords). Default 3.
	MaxRecords int
	// Timeout is the gateway's timeout_ms. Default 3 s.
	Timeout time.Duration
	// Pause between two requests of a producer. Default 10 ms.
	Pause time.Duration
}

// KeyedLoad writes keyed records acks=all: producers between Start and
// Stop, and ProduceUntilOK.
type KeyedLoad struct {
	c     *Cluster
	topic string
	o     KeyedOptions
	http  *http.Client

	mu     sync.Mutex // guards the fields below
	ops    []*KeyedOp
	cancel context.CancelFunc // of the running producers, nil when none run
	wg     *sync.WaitGroup
	nextW  int // the next producer number
	seq0   int // the next value of ProduceUntilOK's producer 0
}

// NewKeyedLoad returns a load with no producers running; Stop runs at
// cleanup.
func (c *Cluster) NewKeyedLoad(topic string, o KeyedOptions) *KeyedLoad {
	if len(o.URLs) == 0 {
		o.URLs = []string{c.URL}
	}
	if o.Producers == 0 {
		o.Producers = 2
	}
	if o.Keys == 0 {
		o.Keys = 64
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 3
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	if o.Pause == 0 {
		o.Pause = 10 * time.Millisecond
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	c.T.Cleanup(tr.CloseIdleConnections)
	l := &KeyedLoad{c: c, topic: topic, o: o, http: &http.Client{Transport: tr, Timeout: o.Timeout + 5*time.Second}, nextW: 1}
	c.T.Cleanup(l.Stop)
	return l
}

// StartKeyedLoad is NewKeyedLoad and Start.
func (c *Cluster) StartKeyedLoad(topic string, o KeyedOptions) *KeyedLoad {
	l := c.NewKeyedLoad(topic, o)
	l.Start()
	return l
}

// Start starts the producers (after a Stop: new ones, with new numbers);
// their random choices come from the cluster's seed, so call it from the
// test's goroutine.
func (l *KeyedLoad) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	l.mu.Lock()
	if l.cancel != nil {
		l.mu.Unlock()
		cancel()
		return
	}
	l.cancel, l.wg = cancel, wg
	first := l.nextW
	l.nextW += l.o.Producers
	l.mu.Unlock()
	for i := range l.o.Producers {
		rng := l.c.NewRand()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(ctx, first+i, l.o.URLs[i%len(l.o.URLs)], rng)
		}()
	}
	l.c.Logf("keyed load started: %d producers, %d keys, acks=all, via %v", l.o.Producers, l.o.Keys, l.o.URLs)
}

func (l *KeyedLoad) run(ctx context.Context, w int, base string, rng *rand.Rand) {
	seq := 0
	for ctx.Err() == nil {
		op := &KeyedOp{Producer: w, Key: fmt.Sprintf("k%03d", rng.IntN(l.o.Keys))}
		for range 1 + rng.IntN(l.o.MaxRecords) {
			op.Values = append(op.Values, fmt.Sprintf("w%d-%06d", w, seq))
			seq++
		}
		l.Produce(base, op)
		select {
		case <-ctx.Done():
		case <-time.After(l.o.Pause):
		}
	}
}

// Produce sends op's records through the gateway at base, acks=all, and
// records the op. It is not tied to Stop: an op in flight finishes, so that
// its outcome is known.
func (l *KeyedLoad) Produce(base string, op *KeyedOp) {
	op.Start = time.Now()
	defer func() {
		op.End = time.Now()
		l.mu.Lock()
		l.ops = append(l.ops, op)
		l.mu.Unlock()
	}()
	key, _ := json.Marshal(op.Key)
	recs := make([]api.ProduceRecord, len(op.Values))
	for i, v := range op.Values {
		val, _ := json.Marshal(v)
		recs[i] = api.ProduceRecord{Key: key, Value: val}
	}
	u := fmt.Sprintf("%s/v1/topics/%s/records?acks=all&timeout_ms=%d", base, l.topic, l.o.Timeout.Milliseconds())
	var pr api.ProduceResponse
	status, code, errText := doJSON(context.Background(), l.http, http.MethodPost, u, api.ProduceRequest{Records: recs}, &pr)
	op.Outcome, op.Code, op.Err = Unknown, code, fmt.Sprintf("%d %s %s", status, code, errText)
	switch {
	case status == http.StatusOK && len(pr.Offsets) == len(op.Values):
		op.Partition = pr.Offsets[0].Partition
		for _, o := range pr.Offsets {
			if o.Partition != op.Partition || o.Offset < 0 {
				op.Err = fmt.Sprintf("200 with offsets that do not fit one key: %+v", pr.Offsets)
				return
			}
			op.Offsets = append(op.Offsets, o.Offset)
		}
		op.Outcome, op.Err = OK, ""
	case slices.Contains(notWritten, code):
		op.Outcome = Failed
	}
}

// ProduceUntilOK writes n acknowledged records with random keys through
// the gateway at base, one per request, each attempt with a fresh value,
// within timeout in all (a quiet, fully acknowledged log to read back).
func (l *KeyedLoad) ProduceUntilOK(base string, rng *rand.Rand, n int, timeout time.Duration) {
	l.c.T.Helper()
	deadline := time.Now().Add(timeout)
	for ok := 0; ok < n; {
		if time.Now().After(deadline) {
			l.c.T.Fatalf("only %d of %d keyed records were acknowledged within %v", ok, n, timeout)
		}
		l.mu.Lock()
		v := fmt.Sprintf("w0-%06d", l.seq0)
		l.seq0++
		l.mu.Unlock()
		op := &KeyedOp{Producer: 0, Key: fmt.Sprintf("k%03d", rng.IntN(l.o.Keys)), Values: []string{v}}
		l.Produce(base, op)
		if op.Outcome == OK {
			ok++
		}
	}
}

// Stop ends the producers and waits for the requests in flight.
func (l *KeyedLoad) Stop() {
	l.mu.Lock()
	cancel, wg := l.cancel, l.wg
	l.cancel, l.wg = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		wg.Wait()
	}
}

// Ops returns the ops so far.
func (l *KeyedLoad) Ops() []*KeyedOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// Acked counts the records acknowledged so far.
func (l *KeyedLoad) Acked() int {
	n := 0
	for _, op := range l.Ops() {
		if op.Outcome == OK {
			n += len(op.Values)
		}
	}
	return n
}
