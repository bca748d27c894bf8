package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Outcome is what a producer can conclude from one produce request.
type Outcome int

const (
	// OK: answered 200 with an offset for every record.
	OK Outcome = iota
	// Failed: answered with an error that proves nothing was written.
	Failed
	// Unknown: anything else (timeouts, lost connections, errors after the
	// write may have happened): the records may or may not be stored.
	Unknown
)

func (o Outcome) String() string { return [...]string{"ok", "failed", "unknown"}[o] }

// notWritten are the codes that prove a produce wrote nothing: the ones the
// gateway itself retries as failing before the write (gateway/produce.go,
// retriableBeforeWrite). The gateway answers with the last attempt's error
// only after every attempt failed that way, so the whole request wrote
// nothing. Every other code, INTERNAL and BROKER_UNAVAILABLE included, may
// come after the leader appended.
var notWritten = []api.Code{
	api.CodeNotLeader, api.CodeLeaderNotAvailable, api.CodeNotEnoughReplicas,
	api.CodeUnknownTopic, api.CodeUnknownPartition,
}

// Op is one produce request and what came of it.
type Op struct {
	Producer  int
	Values    []string
	Partition int32 // the partition asked for
	Acks      string
	Start     time.Time
	End       time.Time
	Outcome   Outcome
	Code      api.Code // the error code, "" for OK and transport failures
	Err       string   // the error text, for failed and unknown ops
	Offsets   []int64  // where the records landed, for OK ops
	// AtLeastOnce marks a producer that retries without idempotence (a
	// Kafka producer with idempotence off): its values may be stored more
	// than once, each acknowledged one where it was acknowledged. Default
	// false: exactly once.
	AtLeastOnce bool
}

func (op *Op) String() string {
	s := fmt.Sprintf("w%d %s p%d acks=%s %s", op.Producer, op.Values, op.Partition, op.Acks, op.Outcome)
	if op.Outcome == OK {
		s += fmt.Sprintf(" at %v", op.Offsets)
	} else {
		s += " " + op.Err
	}
	return s + fmt.Sprintf(" [%s..%s]", op.Start.Format("15:04:05.000"), op.End.Format("15:04:05.000"))
}

// History records every produce request made against one topic.
type History struct {
	c     *Cluster
	Topic string
	// Pad makes every value Pad bytes longer (set it before producing):
	// bigger records fill segments faster.
	Pad  int
	http *http.Client

	mu           sync.Mutex // guards the fields below
	ops          []*Op
	nextProducer int
	seq          map[int]int // next value number per producer
}

// NewHistory starts an empty history of produces to topic.
func NewHistory(c *Cluster, topic string) *History {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	c.T.Cleanup(tr.CloseIdleConnections)
	return &History{c: c, Topic: topic, http: &http.Client{Transport: tr}, seq: map[int]int{}, nextProducer: 1}
}

// NewProducer returns a fresh producer number (values of producer w are
// "w<w>-<n>").
func (h *History) NewProducer() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.nextProducer
	h.nextProducer++
	return w
}

// values returns n fresh values of producer w.
func (h *History) values(w, n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, n)
	pad := strings.Repeat("x", h.Pad)
	for i := range out {
		out[i] = fmt.Sprintf("w%d-%06d%s", w, h.seq[w], pad)
		h.seq[w]++
	}
	return out
}

// Produce sends n fresh values of producer w to partition p in one request
// (so in one batch) and records the op. timeout is the gateway's timeout_ms;
// the request itself gives up 5 s after it.
func (h *History) Produce(ctx context.Context, w int, p int32, n int, acks string, timeout time.Duration) *Op {
	op := &Op{Producer: w, Values: h.values(w, n), Partition: p, Acks: acks, Start: time.Now()}
	h.do(ctx, op, timeout)
	op.End = time.Now()
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
	return op
}

func (h *History) do(ctx context.Context, op *Op, timeout time.Duration) {
	op.Outcome = Unknown
	recs := make([]api.ProduceRecord, len(op.Values))
	for i, v := range op.Values {
		val, _ := json.Marshal(v)
		part := op.Partition
		recs[i] = api.ProduceRecord{Value: val, Partition: &part}
	}
	body, _ := json.Marshal(api.ProduceRequest{Records: recs})
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/v1/topics/%s/records?acks=%s&timeout_ms=%d", h.c.URL, h.Topic, op.Acks, timeout.Milliseconds())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		op.Err = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		op.Err = "transport: " + err.Error()
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		op.Err = fmt.Sprintf("%d, body cut short: %v", resp.StatusCode, err)
		return
	}
	var pr api.ProduceResponse
	jerr := json.Unmarshal(b, &pr)
	if resp.StatusCode == http.StatusOK {
		if jerr != nil || len(pr.Offsets) != len(op.Values) {
			op.Err = fmt.Sprintf("200 with a body that does not fit the request: %s", bytes.TrimSpace(b))
			return
		}
		offs := make([]int64, len(pr.Offsets))
		for i, o := range pr.Offsets {
			if o.Offset < 0 || o.Partition != op.Partition {
				op.Err = fmt.Sprintf("200 without a usable offset: %s", bytes.TrimSpace(b))
				return
			}
			offs[i] = o.Offset
		}
		op.Outcome, op.Offsets = OK, offs
		return
	}
	op.Code = api.Code(resp.Header.Get(api.HeaderErrorCode))
	if op.Code == "" && jerr == nil && pr.Error != nil {
		op.Code = pr.Error.Code
	}
	op.Err = fmt.Sprintf("%d %s", resp.StatusCode, op.Code)
	if pr.Error != nil {
		op.Err += ": " + pr.Error.Message
	}
	if slices.Contains(notWritten, op.Code) {
		op.Outcome = Failed
	}
}

// Ops returns a copy of the ops recorded so far.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// LoadOptions shape a background load.
type LoadOptions struct {
	// Producers run concurrently, each one request at a time. Default 3.
	Producers int
	// Partitions each request picks one of at random. Required.
	Partitions []int32
	// Pinned gives producer i the partition Partitions[i % len] for all its
	// requests instead (a producer stuck on a leaderless partition then
	// does not hold back writes to the others).
	Pinned bool
	// Acks per request. Default "all".
	Acks string
	// MaxRecords per request (each request holds 1..MaxRecords). Default 3.
	MaxRecords int
	// Timeout is the gateway's timeout_ms. Default 3 s.
	Timeout time.Duration
	// Pause between two requests of a producer. Default 5 ms.
	Pause time.Duration
}

// Load is a running background load; Stop ends it.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	h      *History
	n      int
}

// StartLoad starts producers writing unique values until Stop. Their random
// choices come from the cluster's seed.
func (h *History) StartLoad(o LoadOptions) *Load {
	if o.Producers == 0 {
		o.Producers = 3
	}
	if o.Acks == "" {
		o.Acks = "all"
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 3
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	if o.Pause == 0 {
		o.Pause = 5 * time.Millisecond
	}
	if len(o.Partitions) == 0 {
		h.c.T.Fatal("LoadOptions.Partitions is empty")
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel, h: h, n: len(h.Ops())}
	for i := range o.Producers {
		w := h.NewProducer()
		rng := h.c.NewRand()
		po := o
		if o.Pinned {
			po.Partitions = []int32{o.Partitions[i%len(o.Partitions)]}
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(ctx, w, rng, po)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.report(ctx)
	}()
	// Stop also runs at cleanup, so that no producer outlives the test.
	h.c.T.Cleanup(l.Stop)
	h.c.Logf("load started: %d producers, acks=%s, partitions %v (pinned %v)", o.Producers, o.Acks, o.Partitions, o.Pinned)
	return l
}

func (l *Load) run(ctx context.Context, w int, rng *rand.Rand, o LoadOptions) {
	for ctx.Err() == nil {
		p := o.Partitions[rng.IntN(len(o.Partitions))]
		// The request is not tied to ctx: Stop lets it finish, so that its
		// outcome is known (bounded by its own timeout).
		l.h.Produce(context.Background(), w, p, 1+rng.IntN(o.MaxRecords), o.Acks, o.Timeout)
		select {
		case <-ctx.Done():
		case <-time.After(o.Pause):
		}
	}
}

// report logs, once a second, what the requests that ended in that second
// came to: the load's availability over time.
func (l *Load) report(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	seen := l.n
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ops := l.h.Ops()
		var n [3]int
		codes := map[string]int{}
		for _, op := range ops[seen:] {
			n[op.Outcome]++
			if op.Outcome != OK {
				codes[string(op.Code)]++
			}
		}
		seen = len(ops)
		l.h.c.Logf("load: last second ok %d, failed %d, unknown %d %v", n[OK], n[Failed], n[Unknown], codes)
	}
}

// Stop ends the load and waits for the requests in flight (each is bounded
// by its timeout).
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// ---------------------------------------------------------------- checking

// Stored is one record read back from a partition.
type Stored struct {
	Partition int32
	Offset    int64
	Value     string
}

// ReadPartition reads partition p from offset 0 to its HW through the
// gateway. Offsets must be dense from 0 (there is no retention here).
func (c *Cluster) ReadPartition(topic string, p int32) (recs []Stored, hw int64, err error) {
	deadline := time.Now().Add(60 * time.Second)
	next := int64(0)
	for {
		if time.Now().After(deadline) {
			return recs, hw, fmt.Errorf("p%d: reading to the HW took over 60 s (at offset %d of %d)", p, next, hw)
		}
		var fr api.FetchResponse
		url := fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%d&max_records=5000", c.URL, topic, p, next)
		if err := c.getJSON(url, &fr, 15*time.Second); err != nil {
			c.Logf("read p%d at %d: %v (retrying)", p, next, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		hw = fr.HighWatermark
		for _, r := range fr.Records {
			if r.Offset != next {
				return recs, hw, fmt.Errorf("p%d: offset %d where %d was expected (gap or repeat)", p, r.Offset, next)
			}
			var v string
			if err := json.Unmarshal(r.Value, &v); err != nil {
				v = "<not a JSON string: " + string(r.Value) + ">"
			}
			recs = append(recs, Stored{Partition: p, Offset: r.Offset, Value: v})
			next++
		}
		if next >= hw {
			return recs, hw, nil
		}
		if len(fr.Records) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Report is the result of checking a history against the stored records.
// Counts of records unless said otherwise.
type Report struct {
	Ops, OpsOK, OpsFailed, OpsUnknown int            // requests
	Codes                             map[string]int // error codes of failed and unknown requests
	Acked                             int            // records of OK requests
	Lost                              int            // acknowledged (acks=all), not stored
	Moved                             int            // acknowledged (acks=all), stored at another offset
	// LostAcks1 counts acks=1 records not stored where they were
	// acknowledged: allowed when the leader fails before replicating them,
	// so not a violation here; tests that expect none check it.
	LostAcks1    int
	LostAcks1Ops []*Op // those records' requests

	Duplicates int // values stored more than once
	// Rewritten counts the extra copies of AtLeastOnce values: allowed.
	Rewritten                     int
	UnknownPresent, UnknownAbsent int
	FailedPresent                 int // "nothing was written", yet stored
	Phantoms                      int // stored, never sent
	Torn                          int // requests (one batch each) partly stored
	ReadErrors                    int // partitions that could not be read densely to the HW

	Stored   map[int32]int64 // HW per partition
	Problems []string        // the first violations, described
	Final    []Stored        // every record read back, for Consumer.Check
}

// Violations counts what must never happen.
func (r *Report) Violations() int {
	return r.Lost + r.Moved + r.Duplicates + r.FailedPresent + r.Phantoms + r.Torn + r.ReadErrors
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *Report) String() string {
	codes := make([]string, 0, len(r.Codes))
	for c, n := range r.Codes {
		codes = append(codes, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(codes)
	parts := make([]int32, 0, len(r.Stored))
	for p := range r.Stored {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var stored []string
	for _, p := range parts {
		stored = append(stored, fmt.Sprintf("p%d=%d", p, r.Stored[p]))
	}
	s := fmt.Sprintf("requests %d (ok %d, failed %d, unknown %d; codes %s); records acked %d, lost %d, moved %d, acks=1 lost %d, "+
		"duplicates %d (rewritten at least once %d), unknown-then-present %d, unknown-then-absent %d, failed-then-present %d, phantoms %d, torn batches %d, read errors %d; stored %s",
		r.Ops, r.OpsOK, r.OpsFailed, r.OpsUnknown, strings.Join(codes, " "), r.Acked, r.Lost, r.Moved, r.LostAcks1,
		r.Duplicates, r.Rewritten, r.UnknownPresent, r.UnknownAbsent, r.FailedPresent, r.Phantoms, r.Torn, r.ReadErrors, strings.Join(stored, " "))
	for _, p := range r.Problems {
		s += "\n  VIOLATION: " + p
	}
	return s
}

// Check reads the given partitions to their HWs and compares them with the
// history: every acknowledged value is stored exactly once, at the offset it
// was acknowledged with; no value is stored twice; offsets are dense; no
// value is stored that was never sent or whose request proved nothing was
// written; a request (one batch) is stored whole or not at all. Values of
// AtLeastOnce ops may be stored more than once, one copy where the value
// was acknowledged. Call it once
// the load has stopped and the partitions have settled.
func (h *History) Check(partitions []int32) *Report {
	h.c.T.Helper()
	r := &Report{Codes: map[string]int{}, Stored: map[int32]int64{}}
	where := map[string][]Stored{}
	for _, p := range partitions {
		recs, hw, err := h.c.ReadPartition(h.Topic, p)
		if err != nil {
			r.ReadErrors++
			r.problem("%v", err)
		}
		r.Stored[p] = hw
		r.Final = append(r.Final, recs...)
		for _, s := range recs {
			where[s.Value] = append(where[s.Value], s)
		}
	}
	sent := map[string]bool{}
	atLeastOnce := map[string]bool{}
	for _, op := range h.Ops() {
		r.Ops++
		switch op.Outcome {
		case OK:
			r.OpsOK++
		case Failed:
			r.OpsFailed++
			r.Codes[string(op.Code)]++
		case Unknown:
			r.OpsUnknown++
			code := string(op.Code)
			if code == "" {
				code = "transport"
			}
			r.Codes[code]++
		}
		present := 0
		for i, v := range op.Values {
			sent[v] = true
			atLeastOnce[v] = op.AtLeastOnce
			got := where[v]
			if len(got) > 0 {
				present++
			}
			switch op.Outcome {
			case OK:
				r.Acked++
				want := Stored{Partition: op.Partition, Offset: op.Offsets[i], Value: v}
				if op.Acks != "all" && (len(got) == 0 || got[0].Partition != want.Partition || got[0].Offset != want.Offset) {
					r.LostAcks1++
					if len(r.LostAcks1Ops) == 0 || r.LostAcks1Ops[len(r.LostAcks1Ops)-1] != op {
						r.LostAcks1Ops = append(r.LostAcks1Ops, op)
					}
					continue
				}
				switch {
				case op.AtLeastOnce && len(got) > 0:
					if !slices.Contains(got, want) {
						r.Moved++
						r.problem("acknowledged %s at p%d/%d is stored only at %v (%s)", v, want.Partition, want.Offset, got, op)
					}
				case len(got) == 0:
					r.Lost++
					r.problem("acknowledged %s at p%d/%d is not stored (%s)", v, want.Partition, want.Offset, op)
				case got[0].Partition != want.Partition || got[0].Offset != want.Offset:
					r.Moved++
					r.problem("acknowledged %s at p%d/%d is stored at p%d/%d (%s)", v, want.Partition, want.Offset, got[0].Partition, got[0].Offset, op)
				}
			case Failed:
				if len(got) > 0 {
					r.FailedPresent++
					r.problem("%s is stored at p%d/%d though its request failed with %s (%s)", v, got[0].Partition, got[0].Offset, op.Code, op)
				}
			case Unknown:
				if len(got) > 0 {
					r.UnknownPresent++
				} else {
					r.UnknownAbsent++
				}
			}
		}
		if present != 0 && present != len(op.Values) {
			r.Torn++
			r.problem("request %s is stored in part: %d of %d records", op, present, len(op.Values))
		}
	}
	for v, got := range where {
		if len(got) > 1 && atLeastOnce[v] {
			r.Rewritten += len(got) - 1
		} else if len(got) > 1 {
			r.Duplicates += len(got) - 1
			r.problem("%s is stored %d times: %v", v, len(got), got)
		}
		if !sent[v] {
			r.Phantoms++
			r.problem("%s is stored at p%d/%d but was never sent", v, got[0].Partition, got[0].Offset)
		}
	}
	return r
}
