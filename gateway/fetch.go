package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/recordbatch"
)

// Fetch parameter bounds.
const (
	defaultMaxRecords = 500
	maxMaxRecords     = 10_000
	defaultMaxBytes   = 1 << 20
	maxMaxBytes       = 64 << 20
	maxWait           = 30 * time.Second
)

// fetchParams are the query parameters shared by the fetch routes.
type fetchParams struct {
	topic      string
	partition  int32
	offsetSpec string // "earliest", "latest" or a number
	maxRecords int
	maxBytes   int64
	wait       time.Duration
}

// parseFetchParams reads the path and query of a fetch route. The offset
// defaults to "earliest".
func (g *Gateway) parseFetchParams(r *http.Request) (fetchParams, error) {
	fp := fetchParams{topic: chi.URLParam(r, "topic")}
	n, err := strconv.ParseInt(chi.URLParam(r, "partition"), 10, 32)
	if err != nil || n < 0 {
		return fp, api.Errorf(api.CodeUnknownPartition, "partition %q is not a partition number", chi.URLParam(r, "partition"))
	}
	fp.partition = int32(n)
	if _, _, err := g.view.Current().Leader(fp.topic, fp.partition); err != nil && !api.Lookup(api.Classify(err).Code).Retriable {
		return fp, err
	}
	q, err := parseFetchQuery(r.URL.Query())
	if err != nil {
		return fp, err
	}
	q.topic, q.partition = fp.topic, fp.partition
	return q, nil
}

// retriableRead: reads are idempotent, so any retriable failure is retried,
// except REMOTE_CORRUPT: every retry would fetch the same damaged objects
// from the store again, so the client gets it at once and backs off; and
// THROTTLED, which the client must wait off (the caller's quota).
func retriableRead(err error) bool {
	if brokerapi.NotSent(err) {
		return true
	}
	e := api.Classify(err)
	return e.Retriable() && e.Code != api.CodeRemoteCorrupt && e.Code != api.CodeThrottled
}

// resolveOffset turns "earliest"/"latest"/N into a number, asking the leader.
func (g *Gateway) resolveOffset(ctx context.Context, topic string, p int32, spec string) (int64, error) {
	if n, err := strconv.ParseInt(spec, 10, 64); err == nil {
		return n, nil
	}
	res, err := g.listOffsets(ctx, topic, p, spec)
	return res.Offset, err
}

// listOffsets asks the partition's leader (following leader changes) for
// the offset at "earliest", "latest" or a timestamp in ms.
func (g *Gateway) listOffsets(ctx context.Context, topic string, p int32, at string) (brokerapi.OffsetsResult, error) {
	return retry(ctx, retriableRead, func() (brokerapi.OffsetsResult, error) {
		addr, _, err := g.view.Current().Leader(topic, p)
		if err != nil {
			return brokerapi.OffsetsResult{}, err
		}
		return g.brokers.ListOffsets(ctx, addr, topic, p, at)
	})
}

// fetchFrom fetches raw batches from the partition's leader.
func (g *Gateway) fetchFrom(ctx context.Context, topic string, p int32, fp brokerapi.FetchParams) (*brokerapi.FetchResponse, error) {
	return retry(ctx, retriableRead, func() (*brokerapi.FetchResponse, error) {
		addr, _, err := g.view.Current().Leader(topic, p)
		if err != nil {
			return nil, err
		}
		return g.brokers.Fetch(ctx, addr, topic, p, fp)
	})
}

// maxEmptyReads bounds how many fetches one request makes past batches that
// hold no record at or after its offset.
const maxEmptyReads = 64

// fetchRecords fetches and decodes up to maxRecords records from offset.
// Batches that compaction emptied (or whose records all precede offset)
// are read past, so an answer without records means the reader is at the
// HW (or waited max_wait there), not that a gap stopped it.
func (g *Gateway) fetchRecords(ctx context.Context, fp fetchParams, offset int64) (api.FetchResponse, error) {
	var debt time.Duration
	for i := 0; ; i++ {
		res, err := g.fetchRecordsOnce(ctx, fp, offset)
		debt = max(debt, res.Throttle)
		res.Throttle = debt
		if err != nil || len(res.Records) > 0 || res.NextOffset <= offset || res.NextOffset >= res.HighWatermark || i == maxEmptyReads {
			return res, err
		}
		offset = res.NextOffset
	}
}

func (g *Gateway) fetchRecordsOnce(ctx context.Context, fp fetchParams, offset int64) (api.FetchResponse, error) {
	res := api.FetchResponse{Records: []api.FetchedRecord{}, NextOffset: offset}
	raw, fr, err := g.fetchRaw(ctx, fp, offset)
	if err != nil {
		return res, err
	}
	res, err = renderFetched(fp, offset, raw, fr.NextOffset, fr.HighWatermark)
	res.Throttle = fr.Throttle
	return res, err
}

// fetchRaw fetches the raw batches at offset within fp's bounds, read
// whole; fr's body is closed (its positions and throttle stay readable).
func (g *Gateway) fetchRaw(ctx context.Context, fp fetchParams, offset int64) ([]byte, *brokerapi.FetchResponse, error) {
	fr, err := g.fetchFrom(ctx, fp.topic, fp.partition, brokerapi.FetchParams{
		Offset: offset, MaxBytes: fp.maxBytes, MaxWait: fp.wait, MaxRecords: int64(fp.maxRecords), LeaderEpoch: -1,
	})
	if err != nil {
		return nil, nil, err
	}
	defer fr.Body.Close()
	raw := make([]byte, fr.Size)
	if _, err := io.ReadFull(fr.Body, raw); err != nil {
		return nil, nil, api.Errorf(api.CodeBrokerUnavailable, "fetch body cut short: %v", err)
	}
	return raw, fr, nil
}

// renderFetched decodes the raw batches a fetch at offset returned (with
// the broker's next offset and HW) into an answer within fp's bounds.
func renderFetched(fp fetchParams, offset int64, raw []byte, next, hw int64) (api.FetchResponse, error) {
	res := api.FetchResponse{Records: []api.FetchedRecord{}, HighWatermark: hw}
	var err error
	res.NextOffset, err = decodeFetched(fp, offset, raw, next, func(r *recordbatch.Record) {
		res.Records = append(res.Records, toFetched(r))
	})
	return res, err
}

// decodeFetched decodes the raw batches a fetch at offset returned, handing
// take each record at or after offset within fp's bounds, and returns the
// offset after the last record taken (or the broker's next offset).
func decodeFetched(fp fetchParams, offset int64, raw []byte, next int64, take func(*recordbatch.Record)) (int64, error) {
	nextOffset := max(next, offset)
	taken := 0
	full := true
	// max_bytes bounds what the broker sends, which may be compressed; it
	// bounds what this answer decodes and renders too: once the records
	// taken hold max_bytes, the next batch is left for the next fetch. (One
	// batch decodes whole, and a batch decodes to at most
	// recordbatch.MaxUncompressedSize.)
	var decoded int64
	err := scanFetched(raw, func(h recordbatch.Header, b []byte) error { // Decode checks each CRC
		if !full {
			return nil
		}
		if decoded >= fp.maxBytes && taken > 0 {
			full = false
			nextOffset = max(h.BaseOffset, offset)
			return nil
		}
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			return err
		}
		for i := range recs {
			if recs[i].Offset < offset {
				continue
			}
			if taken == fp.maxRecords || (decoded >= fp.maxBytes && taken > 0) {
				full = false
				nextOffset = recs[i].Offset
				return nil
			}
			decoded += recordSize(&recs[i])
			take(&recs[i])
			taken++
		}
		return nil
	})
	return nextOffset, err
}

// recordSize is a decoded record's key, value and headers in bytes.
func recordSize(r *recordbatch.Record) int64 {
	n := int64(len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// scanFetched calls fn for each batch of raw, a broker's fetch answer, and
// fails when raw is not whole batches back to back. A broker answers whole
// batches only (a local read stops at a batch boundary, a cold read is
// checked against its index), so bytes left over are a torn batch or one
// whose header does not parse: the fetch fails with CORRUPT_RECORD rather
// than answer nothing, or step past the batch, at the broker's next offset.
func scanFetched(raw []byte, fn func(h recordbatch.Header, b []byte) error) error {
	n, err := recordbatch.Scan(raw, false, fn)
	if err != nil || n == len(raw) {
		return err
	}
	_, err = recordbatch.Verify(raw[n:])
	return api.Errorf(api.CodeCorruptRecord, "fetched bytes %d to %d are not a whole batch: %v", n, len(raw), err)
}

// toFetched renders a record for JSON: JSON values inline, other bytes as base64.
func toFetched(r *recordbatch.Record) api.FetchedRecord {
	fr := api.FetchedRecord{Offset: r.Offset, Timestamp: r.Timestamp}
	if r.Key != nil {
		if utf8.Valid(r.Key) {
			s := string(r.Key)
			fr.Key = &s
		} else {
			s := base64.StdEncoding.EncodeToString(r.Key)
			fr.KeyB64 = &s
		}
	}
	if r.Value != nil {
		if validJSON(r.Value) {
			fr.Value = json.RawMessage(r.Value)
		} else {
			s := base64.StdEncoding.EncodeToString(r.Value)
			fr.ValueB64 = &s
		}
	}
	if len(r.Headers) > 0 {
		fr.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			fr.Headers[h.Key] = string(h.Value)
		}
	}
	return fr
}

// fetchRetryBudget is what a fetch may spend on retries beyond its long poll.
const fetchRetryBudget = 30 * time.Second

// startFetch parses a fetch request and resolves its offset. The context
// bounds the whole request: the long poll plus 30 s for retries.
func (g *Gateway) startFetch(r *http.Request) (context.Context, context.CancelFunc, fetchParams, int64, error) {
	fp, err := g.parseFetchParams(r)
	if err != nil {
		return nil, nil, fp, 0, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), fp.wait+fetchRetryBudget)
	offset, err := g.resolveOffset(ctx, fp.topic, fp.partition, fp.offsetSpec)
	if err != nil {
		cancel()
		return nil, nil, fp, 0, err
	}
	return ctx, cancel, fp, offset, nil
}

// handleFetchRecords is GET .../records: decoded records as JSON, long-polling
// up to max_wait_ms when there is nothing new.
func (g *Gateway) handleFetchRecords(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, fp, offset, err := g.startFetch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer cancel()
	g.setWriteDeadline(w, fp.wait+fetchRetryBudget)
	g.metrics.fetchRequests.WithLabelValues("records").Inc()
	res, err := g.fetchRecords(ctx, fp, offset)
	if err != nil {
		g.setWriteDeadline(w, 0)
		apihttp.WriteError(w, err)
		return
	}
	setDebt(w.Header(), res.Throttle)
	bp := getBuf(0)
	*bp = renderFetchResponse(*bp, &res)
	g.writeRenderedWithin(w, http.StatusOK, bp, nil)
}

// handleFetchBatches is GET .../batches: raw RecordBatch v2 bytes relayed from
// the leader (which sent them with sendfile) without decoding: on plain TCP
// both ways, moved from the broker's socket to the client's with splice
// (the SpliceFetcher's body meets net/http's ReadFrom, which splices; the
// ResponseWriter is never wrapped).
func (g *Gateway) handleFetchBatches(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, fp, offset, err := g.startFetch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer cancel()
	g.setWriteDeadline(w, fp.wait+fetchRetryBudget)
	fr, err := retry(ctx, retriableRead, func() (*brokerapi.FetchResponse, error) {
		addr, _, err := g.view.Current().Leader(fp.topic, fp.partition)
		if err != nil {
			return nil, err
		}
		return g.splice.Fetch(ctx, addr, fp.topic, fp.partition, brokerapi.FetchParams{
			Offset: offset, MaxBytes: fp.maxBytes, MaxWait: fp.wait, LeaderEpoch: -1,
		})
	})
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer fr.Body.Close()
	g.setWriteDeadline(w, 0) // the poll is over: the body within the write timeout
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeBatches)
	h.Set("Content-Length", strconv.FormatInt(fr.Size, 10))
	h.Set(api.HeaderNextOffset, strconv.FormatInt(max(fr.NextOffset, offset), 10))
	h.Set(api.HeaderHighWatermark, strconv.FormatInt(fr.HighWatermark, 10))
	h.Set(api.HeaderLogStartOffset, strconv.FormatInt(fr.LogStartOffset, 10))
	setDebt(h, fr.Throttle)
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, fr.Body) // Body is Size bytes; its WriteTo splices
}

// handleListOffsets is GET .../offsets?at=earliest|latest|<timestamp ms>.
func (g *Gateway) handleListOffsets(w http.ResponseWriter, r *http.Request) {
	fp, err := g.parseFetchParams(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	at, err := parseOffsetsAt(r.URL.Query())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := g.listOffsets(ctx, fp.topic, fp.partition, at)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}
