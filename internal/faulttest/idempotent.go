package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/tcpproxy"
)

// Idempotent producers of the public API (POST /v1/producers, then produce
// bodies with producer_id, producer_epoch and sequences) that retry every
// request, byte for byte, until it is acknowledged: whatever happened to an
// earlier attempt (an answer lost on the way, a timeout, a leader that died
// after appending), the broker must store the records once.

// IdemAttempt is one send of an IdemRequest.
type IdemAttempt struct {
	Start, End time.Time
	// Result is "ok", "no answer" (the connection ended without a
	// response: a dropped answer), "timeout", or the error code.
	Result  string
	Err     string
	Offsets []int64 // for ok
	// Conn is the producer's end of the connection ("127.0.0.1:port").
	Conn string
	// Dropped is the first bytes of the answer the GatewayProxy dropped
	// (IdemOptions.Proxy), for "no answer" attempts: what the gateway said.
	Dropped string
}

// IdemRequest is one produce request of an idempotent producer: records
// with consecutive sequences to one partition, sent until acknowledged.
type IdemRequest struct {
	Producer  int // the producer's number in the load (values "i<Producer>-p<P>-<seq>")
	ID        int64
	Partition int32
	FirstSeq  int32
	Values    []string
	Attempts  []IdemAttempt
	OK        bool    // acknowledged in the end
	Offsets   []int64 // as finally acknowledged
}

func (r *IdemRequest) String() string {
	var rs []string
	for _, a := range r.Attempts {
		s := a.Result
		if a.Result == "ok" {
			s += fmt.Sprint(a.Offsets)
		}
		rs = append(rs, s+"@"+a.Start.Format("15:04:05.000"))
	}
	return fmt.Sprintf("i%d (id %d) p%d seq %d..%d: %s", r.Producer, r.ID, r.Partition, r.FirstSeq, r.FirstSeq+int32(len(r.Values))-1, strings.Join(rs, ", "))
}

// IdemOptions shape an IdemLoad.
type IdemOptions struct {
	// URL is the gateway base URL the producers send to (a GatewayProxy's,
	// to break their link). Default the cluster's URL. Producer ids are
	// always asked for on the cluster's URL.
	URL string
	// Producers run concurrently, each one request at a time. Default 4.
	Producers int
	// Partitions each request picks one of at random. Required.
	Partitions []int32
	// MaxRecords per request (1..MaxRecords). Default 3.
	MaxRecords int
	// Pad makes every value Pad bytes longer: bigger records fill a disk
	// sooner. Default 0.
	Pad int
	// Timeout is the gateway's timeout_ms; an attempt gives up 3 s after
	// it. Default 2 s.
	Timeout time.Duration
	// RequestBound is how long one request is retried before its producer
	// gives up (and stops: its later sequences could not follow). Default 25 s.
	RequestBound time.Duration
	// Proxy, if set, is the GatewayProxy URL leads through: each attempt
	// left without an answer asks it what the dropped answer said.
	Proxy *tcpproxy.Proxy
	// OnAttempt, if set, is called by the producer after each attempt,
	// before it decides what to do next (the producer waits for it).
	OnAttempt func(r *IdemRequest, a IdemAttempt)
}

// IdemLoad is a running set of idempotent producers.
type IdemLoad struct {
	c      *Cluster
	topic  string
	o      IdemOptions
	http   *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // guards reqs
	reqs []*IdemRequest
}

// StartIdempotentLoad gets a producer id per producer and starts them
// writing acks=all until Stop (also run at cleanup). Their random choices
// come from the cluster's seed.
func (c *Cluster) StartIdempotentLoad(topic string, o IdemOptions) *IdemLoad {
	c.T.Helper()
	if o.URL == "" {
		o.URL = c.URL
	}
	if o.Producers == 0 {
		o.Producers = 4
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 3
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.RequestBound == 0 {
		o.RequestBound = 25 * time.Second
	}
	if len(o.Partitions) == 0 {
		c.T.Fatal("IdemOptions.Partitions is empty")
	}
	// One connection per request: each is its own draw of DropResponses,
	// and no request is retried by net/http behind the producer's back.
	tr := &http.Transport{DisableKeepAlives: true}
	c.T.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	l := &IdemLoad{c: c, topic: topic, o: o, http: &http.Client{Transport: tr, Timeout: o.Timeout + 3*time.Second}, cancel: cancel}
	for i := 1; i <= o.Producers; i++ {
		id := c.InitProducer()
		rng := c.NewRand()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(ctx, i, id, rng)
		}()
	}
	c.T.Cleanup(l.Stop)
	c.Logf("idempotent load started: %d producers, partitions %v, via %s", o.Producers, o.Partitions, o.URL)
	return l
}

// InitProducer is POST /v1/producers: a new producer id (epoch 0).
func (c *Cluster) InitProducer() api.ProducerIdentity {
	c.T.Helper()
	resp, err := c.http.Post(c.URL+"/v1/producers", "application/json", strings.NewReader("{}"))
	if err != nil {
		c.T.Fatalf("POST /v1/producers: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var id api.ProducerIdentity
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &id) != nil || id.ProducerID <= 0 {
		c.T.Fatalf("POST /v1/producers: %d %s", resp.StatusCode, b)
	}
	return id
}

func (l *IdemLoad) run(ctx context.Context, w int, id api.ProducerIdentity, rng *rand.Rand) {
	next := map[int32]int32{}
	pad := strings.Repeat("x", l.o.Pad)
	for ctx.Err() == nil {
		p := l.o.Partitions[rng.IntN(len(l.o.Partitions))]
		n := 1 + rng.IntN(l.o.MaxRecords)
		r := &IdemRequest{Producer: w, ID: id.ProducerID, Partition: p, FirstSeq: next[p]}
		for i := range n {
			r.Values = append(r.Values, fmt.Sprintf("i%d-p%d-%06d%s", w, p, int(next[p])+i, pad))
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
		// Not tied to ctx: Stop lets the request finish, so that every
		// request ends acknowledged (or its producer gives up).
		if !l.send(r, id) {
			l.c.Logf("idempotent producer i%d gives up: %s", w, r)
			return
		}
		next[p] += int32(n)
	}
}

// send retries r until it is acknowledged or RequestBound passes.
func (l *IdemLoad) send(r *IdemRequest, id api.ProducerIdentity) bool {
	recs := make([]api.ProduceRecord, len(r.Values))
	for i, v := range r.Values {
		val, _ := json.Marshal(v)
		part := r.Partition
		recs[i] = api.ProduceRecord{Value: val, Partition: &part}
	}
	pid, epoch := id.ProducerID, id.ProducerEpoch
	body, _ := json.Marshal(api.ProduceRequest{Records: recs, ProducerID: &pid, ProducerEpoch: &epoch,
		Sequences: map[string]int32{fmt.Sprint(r.Partition): r.FirstSeq}})
	url := fmt.Sprintf("%s/v1/topics/%s/records?acks=all&timeout_ms=%d", l.o.URL, l.topic, l.o.Timeout.Milliseconds())
	deadline := time.Now().Add(l.o.RequestBound)
	backoff := 20 * time.Millisecond
	for {
		a := l.attempt(url, body, len(r.Values), r.Partition)
		l.mu.Lock()
		r.Attempts = append(r.Attempts, a)
		if a.Result == "ok" {
			r.OK, r.Offsets = true, a.Offsets
		}
		l.mu.Unlock()
		if l.o.OnAttempt != nil {
			l.o.OnAttempt(r, a)
		}
		if a.Result == "ok" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 300*time.Millisecond)
	}
}

func (l *IdemLoad) attempt(url string, body []byte, n int, p int32) (a IdemAttempt) {
	a.Start = time.Now()
	defer func() { a.End = time.Now() }()
	// GotConn runs in this goroutine, before Do returns.
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { a.Conn = ci.Conn.LocalAddr().String() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		a.Result, a.Err = "bad request", err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.http.Do(req)
	if err != nil {
		a.Err = err.Error()
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			a.Result = "timeout"
		} else {
			a.Result = "no answer"
			if l.o.Proxy != nil && a.Conn != "" {
				// The proxy noted the answer before it closed the
				// connection; take it now, before the port is reused.
				a.Dropped, _ = l.o.Proxy.TakeDroppedAnswer(a.Conn)
			}
		}
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.Result, a.Err = "no answer", fmt.Sprintf("%d, body cut short: %v", resp.StatusCode, err)
		return a
	}
	var pr api.ProduceResponse
	jerr := json.Unmarshal(b, &pr)
	if resp.StatusCode == http.StatusOK && jerr == nil && len(pr.Offsets) == n {
		for _, o := range pr.Offsets {
			if o.Offset < 0 || o.Partition != p {
				a.Result, a.Err = "bad answer", string(bytes.TrimSpace(b))
				return a
			}
			a.Offsets = append(a.Offsets, o.Offset)
		}
		a.Result = "ok"
		return a
	}
	code := resp.Header.Get(api.HeaderErrorCode)
	if code == "" && jerr == nil && pr.Error != nil {
		code = string(pr.Error.Code)
	}
	if code == "" {
		code = fmt.Sprintf("HTTP %d", resp.StatusCode)
	}
	a.Result, a.Err = code, string(bytes.TrimSpace(b))
	return a
}

// Stop ends the load: no new request starts, and the ones in flight are
// retried to their end (bounded by RequestBound).
func (l *IdemLoad) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Acked counts the requests acknowledged so far.
func (l *IdemLoad) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if r.OK {
			n++
		}
	}
	return n
}

// AckedSince counts the requests to partition p acknowledged by an attempt
// that started at or after t.
func (l *IdemLoad) AckedSince(p int32, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if r.Partition == p && r.OK && !r.Attempts[len(r.Attempts)-1].Start.Before(t) {
			n++
		}
	}
	return n
}

// Requests returns the requests so far (shared: read their fields after
// Stop, or use Acked).
func (l *IdemLoad) Requests() []*IdemRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// IdemReport is what IdemLoad.Check found. Counts of records unless said
// otherwise.
type IdemReport struct {
	Requests, Attempts int // requests, and sends of them
	Unfinished         int // requests never acknowledged
	Results            map[string]int
	// AnswersLost counts attempts that ended without an answer; RetriedOK
	// counts requests acknowledged after at least one such attempt.
	AnswersLost, RetriedOK int
	// LostAcks counts lost answers that were acknowledgments (200, as the
	// proxy saw them): the records were written, and the retry had to be
	// recognised as a duplicate. LostAcksSame counts those whose request was
	// finally acknowledged with the same offsets.
	LostAcks, LostAcksSame int
	Records                int
	Missing                int // sent (and in the end acknowledged), not stored
	Duplicates             int // extra copies of a value
	Moved                  int // stored at another offset than finally acknowledged
	OutOfOrder             int // a producer's values in a partition not in sequence order
	Phantoms               int // stored, never sent
	ReadErrors             int // partitions not readable densely from 0 to the HW
	Stored                 map[int32]int64
	Problems               []string
}

// Violations counts what must never happen.
func (r *IdemReport) Violations() int {
	return r.Unfinished + r.Missing + r.Duplicates + r.Moved + r.OutOfOrder + r.Phantoms + r.ReadErrors
}

func (r *IdemReport) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *IdemReport) String() string {
	var res []string
	for k, n := range r.Results {
		res = append(res, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(res)
	var stored []string
	for p, hw := range r.Stored {
		stored = append(stored, fmt.Sprintf("p%d=%d", p, hw))
	}
	sort.Strings(stored)
	s := fmt.Sprintf("requests %d (unfinished %d), attempts %d (retries %d: %s), answers lost %d (acknowledgments %d, retried to the same offsets %d), requests acknowledged after a lost answer %d; "+
		"records %d: missing %d, duplicates %d, moved %d, out of order %d, phantoms %d, read errors %d; stored %s",
		r.Requests, r.Unfinished, r.Attempts, r.Attempts-r.Requests, strings.Join(res, " "), r.AnswersLost, r.LostAcks, r.LostAcksSame, r.RetriedOK,
		r.Records, r.Missing, r.Duplicates, r.Moved, r.OutOfOrder, r.Phantoms, r.ReadErrors, strings.Join(stored, " "))
	for _, p := range r.Problems {
		s += "\n  VIOLATION: " + p
	}
	return s
}

// droppedAck returns the offsets of a's answer if the proxy dropped it and
// it was an acknowledgment (offsets nil if its body was not in the bytes
// the proxy kept).
func droppedAck(a IdemAttempt) ([]int64, bool) {
	if !strings.HasPrefix(a.Dropped, "HTTP/1.1 200 ") {
		return nil, false
	}
	_, body, _ := strings.Cut(a.Dropped, "\r\n\r\n")
	var pr api.ProduceResponse
	if json.Unmarshal([]byte(body), &pr) != nil {
		return nil, true // an acknowledgment whose body did not come in the same read
	}
	offs := make([]int64, len(pr.Offsets))
	for i, o := range pr.Offsets {
		offs[i] = o.Offset
	}
	return offs, true
}

// Check reads the partitions from offset 0 to their HWs through the
// gateway (offsets must be dense) and checks that every value sent is
// stored exactly once, at the offset its request was finally acknowledged
// with, and that each producer's values in a partition are stored in
// sequence order with none skipped. Call it after Stop, once the
// partitions settled.
func (l *IdemLoad) Check(partitions []int32) *IdemReport {
	r := &IdemReport{Results: map[string]int{}, Stored: map[int32]int64{}}
	where := map[string][]Stored{}
	var all []Stored
	for _, p := range partitions {
		recs, hw, err := l.c.ReadPartition(l.topic, p)
		if err != nil {
			r.ReadErrors++
			r.problem("%v", err)
		}
		r.Stored[p] = hw
		all = append(all, recs...)
		for _, s := range recs {
			where[s.Value] = append(where[s.Value], s)
		}
	}
	sent := map[string]bool{}
	for _, q := range l.Requests() {
		r.Requests++
		r.Attempts += len(q.Attempts)
		lost := false
		for _, a := range q.Attempts {
			r.Results[a.Result]++
			if a.Result != "no answer" {
				continue
			}
			r.AnswersLost++
			lost = true
			offs, ok := droppedAck(a)
			if !ok {
				continue
			}
			r.LostAcks++
			switch {
			case !q.OK || offs == nil: // unfinished (counted below), or the body was not in the read
			case slices.Equal(offs, q.Offsets):
				r.LostAcksSame++
			default:
				r.Moved += len(q.Values)
				r.problem("a lost answer acknowledged %v, the request was finally acknowledged with %v (%s)", offs, q.Offsets, q)
			}
		}
		if lost && q.OK {
			r.RetriedOK++
		}
		if !q.OK {
			r.Unfinished++
			r.problem("request never acknowledged: %s", q)
		}
		for i, v := range q.Values {
			r.Records++
			sent[v] = true
			got := where[v]
			switch {
			case len(got) == 0:
				r.Missing++
				r.problem("%s is not stored (%s)", v, q)
			case q.OK && (got[0].Partition != q.Partition || got[0].Offset != q.Offsets[i]):
				r.Moved++
				r.problem("%s acknowledged at p%d/%d is stored at p%d/%d (%s)", v, q.Partition, q.Offsets[i], got[0].Partition, got[0].Offset, q)
			}
		}
	}
	for v, got := range where {
		if len(got) > 1 {
			r.Duplicates += len(got) - 1
			r.problem("%s is stored %d times: %v", v, len(got), got)
		}
		if !sent[v] {
			r.Phantoms++
			r.problem("%s is stored at p%d/%d but was never sent", v, got[0].Partition, got[0].Offset)
		}
	}
	// Order: in offset order, producer w's values in partition p must be
	// its sequences 0, 1, 2, ... (a retry appended after later records, or
	// a lost batch, breaks it).
	type key struct {
		w int
		p int32
	}
	want := map[key]int{}
	for _, s := range all { // ReadPartition returns each partition in offset order
		var w, p, seq int
		if _, err := fmt.Sscanf(s.Value, "i%d-p%d-%d", &w, &p, &seq); err != nil {
			continue // a phantom, counted above
		}
		k := key{w, int32(p)}
		if seq != want[k] {
			r.OutOfOrder++
			r.problem("p%d/%d holds %s where producer i%d's sequence %d was due", s.Partition, s.Offset, s.Value, w, want[k])
		}
		want[k] = seq + 1
	}
	return r
}
