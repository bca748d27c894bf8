package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
)

// Record is one record to produce.
type Record struct {
	// Key is nil for a null key, which the partitioner does not hash (an
	// empty key is hashed like any other). Valid UTF-8 travels as the JSON
	// "key" string, other bytes as "key_b64"; both are stored byte for byte.
	Key []byte
	// Value is the value's bytes, sent as "value_b64" and stored byte for
	// byte; nil (with JSON nil) is a null value. Set at most one of Value and JSON.
	Value []byte
	// JSON is the value as JSON, sent as "value": the server stores its
	// compacted text and a fetch returns it inline. It must be valid JSON.
	JSON json.RawMessage
	// Headers are string headers, stored sorted by name.
	Headers map[string]string
	// Partition, when not nil, is the partition to write to; it must exist.
	// Nil leaves the choice to ProduceOptions.Partition, then the partitioner
	// (murmur2 of the key, else one partition per request, round-robin).
	Partition *int32
	// Timestamp is the record's time; zero means the gateway's clock.
	Timestamp time.Time
}

// Partition returns a pointer to p, for Record.Partition and ProduceOptions.Partition.
func Partition(p int32) *int32 { return &p }

// Acks says how many replicas must have the records before a produce is answered.
type Acks string

// Acks values.
const (
	// AcksAll answers once every in-sync replica has the records (the
	// default): acknowledged records survive the loss of the leader.
	AcksAll Acks = "all"
	// AcksLeader answers once the leader appended them.
	AcksLeader Acks = "1"
	// AcksNone answers before anything is written; every offset is -1 and
	// no failure is ever reported.
	AcksNone Acks = "0"
)

// ProduceOptions tune a produce. The zero value is acks=all, the server's
// partitioner and the server's 30 s timeout.
type ProduceOptions struct {
	// Acks default AcksAll ("-1" means the same).
	Acks Acks
	// Partition, when not nil, is where records without their own Partition go.
	Partition *int32
	// Timeout is how long the gateway may spend writing, retries and
	// replication included (timeout_ms, 1 ms to 300 s). Zero: the gateway's
	// 30 s. The client waits this long on top of its own per-attempt timeout.
	Timeout time.Duration
}

func (o ProduceOptions) query() (url.Values, error) {
	q := url.Values{}
	switch o.Acks {
	case "", AcksAll, "-1": // -1 is Kafka's spelling of all; the server takes it too
	case AcksLeader, AcksNone:
		q.Set("acks", string(o.Acks))
	default:
		return nil, fmt.Errorf("client: acks %q: want %q, %q or %q", o.Acks, AcksAll, AcksLeader, AcksNone)
	}
	if o.Timeout > 0 {
		q.Set("timeout_ms", strconv.FormatInt(max(1, o.Timeout.Milliseconds()), 10))
	}
	return q, nil
}

// Produce writes records to topic (POST /v1/topics/{topic}/records, a JSON
// body) and returns where each landed, in request order.
//
// Each partition's share of the request is written as one batch, entirely or
// not at all. When some partitions failed and others were written, Produce
// returns both the offsets (the failed records with offset -1 and their
// partition's error code) and the first failure's *Error.
//
// A produce without a producer id is retried only when the failure proves
// nothing was written (NOT_LEADER, NOT_ENOUGH_REPLICAS, a refused
// connection, ...) and no partition of it was written. After
// REQUEST_TIMED_OUT, BROKER_UNAVAILABLE or a lost answer the records may or
// may not be in the log; sending them again may write them twice. Use a
// Producer to make such retries safe.
func (c *Client) Produce(ctx context.Context, topic string, records []Record, opts ProduceOptions) ([]api.RecordOffset, error) {
	wire, err := wireRecords(records, opts.Partition)
	if err != nil {
		return nil, err
	}
	body, err := jsonBody(api.ProduceRequest{Records: wire})
	if err != nil {
		return nil, err
	}
	req, err := c.produceRequest(topic, body, opts)
	if err != nil {
		return nil, err
	}
	req.retryIf = func(resp *response, err error) bool {
		return provesUnapplied(err) && !anyWritten(resp)
	}
	return c.sendProduce(ctx, req, len(records))
}

// produceRequest is the request of a JSON produce body.
func (c *Client) produceRequest(topic string, body []byte, opts ProduceOptions) (*request, error) {
	q, err := opts.query()
	if err != nil {
		return nil, err
	}
	return &request{
		method: http.MethodPost, path: "/v1/topics/" + escape(topic) + "/records", query: q,
		body: body, ctype: "application/json", extra: opts.Timeout,
	}, nil
}

// sendProduce runs a produce request and decodes its offsets, those of a
// partial failure included.
func (c *Client) sendProduce(ctx context.Context, req *request, n int) ([]api.RecordOffset, error) {
	resp, err := c.do(ctx, req)
	if resp == nil {
		return nil, err
	}
	var pr api.ProduceResponse
	if jerr := json.Unmarshal(resp.body, &pr); jerr != nil && err == nil {
		return nil, fmt.Errorf("client: produce: decoding the answer: %w", jerr)
	}
	if err == nil && len(pr.Offsets) != n {
		return nil, fmt.Errorf("client: produce: %d offsets for %d records", len(pr.Offsets), n)
	}
	if len(pr.Offsets) == 0 {
		pr.Offsets = nil // an error before anything was sent lists no offsets
	}
	return pr.Offsets, err
}

// anyWritten reports whether a failed produce's answer lists a written record.
func anyWritten(resp *response) bool {
	if resp == nil {
		return false
	}
	var pr api.ProduceResponse
	if json.Unmarshal(resp.body, &pr) != nil {
		return false
	}
	for _, o := range pr.Offsets {
		if o.Offset >= 0 {
			return true
		}
	}
	return false
}

// wireRecords converts records to the JSON produce shape.
func wireRecords(records []Record, partition *int32) ([]api.ProduceRecord, error) {
	if len(records) == 0 {
		return nil, errors.New("client: produce: no records")
	}
	out := make([]api.ProduceRecord, len(records))
	for i := range records {
		w, err := records[i].wire(partition)
		if err != nil {
			return nil, fmt.Errorf("client: record %d: %w", i, err)
		}
		out[i] = w
	}
	return out, nil
}

func (r *Record) wire(partition *int32) (api.ProduceRecord, error) {
	w := api.ProduceRecord{Headers: r.Headers, Partition: r.Partition}
	if w.Partition == nil {
		w.Partition = partition
	}
	if w.Partition != nil && *w.Partition < 0 {
		return w, fmt.Errorf("partition %d is negative", *w.Partition)
	}
	if r.Key != nil {
		if utf8.Valid(r.Key) {
			k, _ := json.Marshal(string(r.Key))
			w.Key = k
		} else {
			s := base64.StdEncoding.EncodeToString(r.Key)
			w.KeyB64 = &s
		}
	}
	switch {
	case r.JSON != nil && r.Value != nil:
		return w, errors.New("both Value and JSON are set")
	case r.JSON != nil:
		if !json.Valid(r.JSON) {
			return w, errors.New("JSON is not valid JSON")
		}
		w.Value = r.JSON
	case r.Value != nil:
		s := base64.StdEncoding.EncodeToString(r.Value)
		w.ValueB64 = &s
	}
	if !r.Timestamp.IsZero() {
		ms := r.Timestamp.UnixMilli()
		if ms <= 0 {
			return w, fmt.Errorf("timestamp %v is not after the Unix epoch", r.Timestamp)
		}
		w.Timestamp = ms
	}
	return w, nil
}
