package gateway

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// Query parameters of the public routes. Each route family has one parser,
// a pure function of the parsed query, so every bound is checked in one
// place, and FuzzQueryParams checks them all: any query either parses to
// values within their documented bounds or is refused with a 400.

// parseFetchQuery reads offset, max_records, max_bytes and max_wait_ms of
// a fetch route (records, batches, offsets, WebSocket). The offset
// defaults to "earliest".
func parseFetchQuery(q url.Values) (fetchParams, error) {
	var fp fetchParams
	fp.offsetSpec = q.Get("offset")
	switch fp.offsetSpec {
	case "":
		fp.offsetSpec = "earliest"
	case "earliest", "latest":
	default:
		if n, err := strconv.ParseInt(fp.offsetSpec, 10, 64); err != nil || n < 0 {
			return fp, api.Errorf(api.CodeInvalidOffset, "offset=%q: want a non-negative number, earliest or latest", fp.offsetSpec)
		}
	}
	var err error
	fp.maxRecords, fp.maxBytes, fp.wait, err = readBounds(q)
	return fp, err
}

// readBounds reads max_records, max_bytes and max_wait_ms, shared by the
// fetch routes and group polls.
func readBounds(q url.Values) (maxRecords int, maxBytes int64, wait time.Duration, err error) {
	mr, err := apihttp.QueryInt(q, "max_records", defaultMaxRecords, 1, maxMaxRecords)
	if err != nil {
		return 0, 0, 0, err
	}
	if maxBytes, err = apihttp.QueryInt(q, "max_bytes", defaultMaxBytes, 1, maxMaxBytes); err != nil {
		return 0, 0, 0, err
	}
	w, err := apihttp.QueryInt(q, "max_wait_ms", 0, 0, maxWait.Milliseconds())
	if err != nil {
		return 0, 0, 0, err
	}
	return int(mr), maxBytes, time.Duration(w) * time.Millisecond, nil
}

// parsePollQuery reads a group poll's parameters.
func parsePollQuery(q url.Values) (pollParams, error) {
	var pp pollParams
	var err error
	if pp.maxRecords, pp.maxBytes, pp.wait, err = readBounds(q); err != nil {
		return pp, err
	}
	pp.cursor = q.Get("cursor")
	if len(pp.cursor) > api.MaxCursorLen {
		return pp, api.Errorf(api.CodeInvalidRequest, "cursor longer than %d bytes", api.MaxCursorLen)
	}
	return pp, nil
}

// parseProduceQuery reads acks and timeout_ms of a produce request.
func parseProduceQuery(q url.Values) (produceParams, error) {
	pp := produceParams{acks: q.Get("acks"), timeout: defaultProduceTimeout}
	switch pp.acks {
	case "", "-1":
		pp.acks = "all"
	case "all", "1", "0":
	default:
		return pp, api.Errorf(api.CodeInvalidRequest, "acks=%q: want 0, 1 or all", pp.acks)
	}
	if s := q.Get("timeout_ms"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > 300_000 {
			return pp, api.Errorf(api.CodeInvalidRequest, "timeout_ms=%q: want 1 to 300000", s)
		}
		pp.timeout = time.Duration(n) * time.Millisecond
	}
	return pp, nil
}

// octetQuery is what an application/octet-stream produce takes from its
// query: the record's key (absent: a null key) and partition (-1: by key).
type octetQuery struct {
	key       []byte
	partition int32
}

func parseOctetQuery(q url.Values) (octetQuery, error) {
	oq := octetQuery{partition: -1}
	if q.Has("key") {
		oq.key = []byte(q.Get("key"))
	}
	if s := q.Get("partition"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return oq, api.Errorf(api.CodeInvalidRequest, "partition=%q is not a partition number", s)
		}
		oq.partition = int32(n)
	}
	return oq, nil
}

// parseOffsetsAt reads the at parameter of list offsets: earliest, latest
// (the default) or a timestamp in ms.
func parseOffsetsAt(q url.Values) (string, error) {
	at := q.Get("at")
	if at == "" {
		return "latest", nil
	}
	if at != "earliest" && at != "latest" {
		if _, err := strconv.ParseInt(at, 10, 64); err != nil {
			return "", api.Errorf(api.CodeInvalidOffset, "at=%q: want earliest, latest or a timestamp in ms", at)
		}
	}
	return at, nil
}

// streamQuery is a WebSocket stream's own parameters (beside the fetch
// parameters): its first credit and its frame format.
type streamQuery struct {
	credit int64
	binary bool
}

func parseStreamQuery(q url.Values) (streamQuery, error) {
	var sq streamQuery
	var err error
	if sq.credit, err = apihttp.QueryInt(q, "credit", 0, 0, maxCredit); err != nil {
		return sq, err
	}
	switch f := q.Get("format"); f {
	case "", "json":
	case "binary":
		sq.binary = true
	default:
		return sq, api.Errorf(api.CodeInvalidRequest, "format=%q: want json or binary", f)
	}
	return sq, nil
}

// parseGroupWSQuery reads a group WebSocket's join request and first
// credit. Topics are comma separated; blank names are skipped (the join
// validates the rest).
func parseGroupWSQuery(q url.Values) (api.JoinGroupRequest, int64, error) {
	req := api.JoinGroupRequest{InstanceID: q.Get("instance_id"), AutoOffsetReset: q.Get("auto_offset_reset"), Assignor: q.Get("assignor")}
	for _, t := range strings.Split(q.Get("topics"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			req.Topics = append(req.Topics, t)
		}
	}
	st, err := apihttp.QueryInt(q, "session_timeout_ms", 0, 0, 5*60*1000)
	if err != nil {
		return req, 0, err
	}
	req.SessionTimeoutMs = st
	credit, err := apihttp.QueryInt(q, "credit", 0, 0, maxCredit)
	return req, credit, err
}
