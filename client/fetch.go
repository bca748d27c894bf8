package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Offset names where a read starts: Earliest, Latest or an offset (At). The
// empty Offset means Earliest. The server validates it; anything else is
// INVALID_OFFSET.
type Offset string

// Offsets with a name.
const (
	// Earliest is the partition's log start offset: everything still retained.
	Earliest Offset = "earliest"
	// Latest is the high watermark: only records produced from now on.
	Latest Offset = "latest"
)

// At is the offset n.
func At(n int64) Offset { return Offset(strconv.FormatInt(n, 10)) }

// FetchOptions bound a fetch. Zero fields take the server's defaults.
type FetchOptions struct {
	// MaxRecords is the most records to return (1 to 10000). Default 500.
	// Batch fetches ignore it.
	MaxRecords int
	// MaxBytes is the most bytes of batches to read from the leader (1 to
	// 64 MiB), but always at least one batch. Default 1 MiB.
	MaxBytes int64
	// MaxWait is how long the leader may wait for a first record when there
	// is none at the offset yet (a long poll; at most 30 s). Default 0:
	// answer at once. The client waits this long on top of its own
	// per-attempt timeout.
	MaxWait time.Duration
}

func (o FetchOptions) query(from Offset) url.Values {
	q := url.Values{}
	if from != "" {
		q.Set("offset", string(from))
	}
	if o.MaxRecords > 0 {
		q.Set("max_records", strconv.Itoa(o.MaxRecords))
	}
	if o.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(o.MaxBytes, 10))
	}
	if o.MaxWait > 0 {
		q.Set("max_wait_ms", strconv.FormatInt(max(1, o.MaxWait.Milliseconds()), 10))
	}
	return q
}

func partitionPath(topic string, partition int32, leaf string) string {
	return "/v1/topics/" + escape(topic) + "/partitions/" + strconv.Itoa(int(partition)) + "/" + leaf
}

// Fetch reads committed records of one partition from offset from on,
// decoded to JSON (GET .../partitions/{p}/records). It blocks up to
// opts.MaxWait when there is nothing to read yet, then returns what there is,
// possibly no records. Continue from the answer's NextOffset.
//
// Errors: UNKNOWN_TOPIC, UNKNOWN_PARTITION, INVALID_OFFSET,
// OFFSET_OUT_OF_RANGE (below the log start or past the log end). Retried on
// every retriable failure.
func (c *Client) Fetch(ctx context.Context, topic string, partition int32, from Offset, opts FetchOptions) (api.FetchResponse, error) {
	var out api.FetchResponse
	err := c.doJSON(ctx, &request{
		method: http.MethodGet, path: partitionPath(topic, partition, "records"),
		query: opts.query(from), extra: opts.MaxWait,
	}, &out)
	return out, err
}

// Batches is a raw fetch: the leader's stored bytes, relayed undecoded.
type Batches struct {
	// Data is whole Kafka RecordBatch v2 batches back to back, compressed as
	// stored; empty when there was nothing to read. The first batch may
	// begin before the offset asked for.
	Data []byte
	// NextOffset is the offset to ask for next.
	NextOffset int64
	// HighWatermark and LogStartOffset are the partition's when the fetch
	// was answered.
	HighWatermark  int64
	LogStartOffset int64
}

// Records decodes Data, checking every batch's CRC, and returns the records
// at or after offset from (those a batch holds before it are dropped).
// CORRUPT_RECORD when a batch fails its checks.
func (b Batches) Records(from int64) ([]recordbatch.Record, error) {
	var out []recordbatch.Record
	_, err := recordbatch.Scan(b.Data, false, func(_ recordbatch.Header, batch []byte) error {
		_, recs, err := recordbatch.Decode(batch)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Offset >= from {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

// FetchBatches reads raw record batches of one partition from offset from on
// (GET .../partitions/{p}/batches), the cheapest way to read. Blocking,
// errors and retries are as for Fetch; opts.MaxRecords is not used.
func (c *Client) FetchBatches(ctx context.Context, topic string, partition int32, from Offset, opts FetchOptions) (Batches, error) {
	opts.MaxRecords = 0
	resp, err := c.do(ctx, &request{
		method: http.MethodGet, path: partitionPath(topic, partition, "batches"),
		query: opts.query(from), extra: opts.MaxWait,
	})
	if err != nil {
		return Batches{}, err
	}
	out := Batches{Data: resp.body}
	for _, h := range []struct {
		name string
		dst  *int64
	}{
		{api.HeaderNextOffset, &out.NextOffset},
		{api.HeaderHighWatermark, &out.HighWatermark},
		{api.HeaderLogStartOffset, &out.LogStartOffset},
	} {
		n, err := strconv.ParseInt(resp.header.Get(h.name), 10, 64)
		if err != nil {
			return Batches{}, fmt.Errorf("client: batch fetch answer: header %s %q is not an offset", h.name, resp.header.Get(h.name))
		}
		*h.dst = n
	}
	return out, nil
}

// Offsets answers ListOffsets: an offset and the partition's positions as
// its leader reports them (the Offsets schema of openapi.yaml).
type Offsets struct {
	// Offset is what the query resolved to; -1 when no committed record is
	// at or after a timestamp asked for.
	Offset           int64 `json:"offset"`
	LogStartOffset   int64 `json:"log_start_offset"`
	LocalStartOffset int64 `json:"local_start_offset"`
	RemoteEndOffset  int64 `json:"remote_end_offset"`
	HighWatermark    int64 `json:"high_watermark"`
	LogEndOffset     int64 `json:"log_end_offset"`
}

// ListOffsets resolves Earliest (the log start offset) or Latest (the high
// watermark) on the partition's leader and returns it with the partition's
// positions (GET .../partitions/{p}/offsets?at=). An offset number is
// INVALID_OFFSET here: for a time, use OffsetForTime. Retried on every
// retriable failure.
func (c *Client) ListOffsets(ctx context.Context, topic string, partition int32, at Offset) (Offsets, error) {
	if at != Earliest && at != Latest {
		return Offsets{}, &Error{Code: api.CodeInvalidOffset, Message: fmt.Sprintf("list offsets at %q: want earliest or latest", at)}
	}
	return c.listOffsets(ctx, topic, partition, string(at))
}

// OffsetForTime returns the offset of the first committed record whose
// timestamp is at or after t (-1 in Offset when every record is older), with
// the partition's positions. Retried on every retriable failure.
func (c *Client) OffsetForTime(ctx context.Context, topic string, partition int32, t time.Time) (Offsets, error) {
	return c.listOffsets(ctx, topic, partition, strconv.FormatInt(t.UnixMilli(), 10))
}

func (c *Client) listOffsets(ctx context.Context, topic string, partition int32, at string) (Offsets, error) {
	var out Offsets
	err := c.getJSON(ctx, partitionPath(topic, partition, "offsets"), url.Values{"at": {at}}, &out)
	return out, err
}
