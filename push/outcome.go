package push

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// verdict is what an answer (or its absence) says.
type verdict int

const (
	// delivered: 2xx.
	delivered verdict = iota
	// refused: a record-level answer (400, 413, 415, 422 and the other
	// 4xx not listed below). It counts as an attempt against the record.
	refused
	// unreachable: no answer (refused connection, timeout, reset), 5xx,
	// 3xx (redirects are not followed), and 401, 403, 404, 405, 408 and
	// 425, which say the endpoint (its address, credentials or health),
	// not the record, is wrong. It counts against the record only when
	// another request of the subscription succeeded since this record's
	// previous try; otherwise it is an outage.
	unreachable
	// throttled: 429, or 503 with Retry-After. The subscription waits
	// (Retry-After, capped, or its backoff) and counts no attempt.
	throttled
	// gone: 410. The subscription is disabled; offsets stay.
	gone
)

func (v verdict) String() string {
	return [...]string{"delivered", "refused", "unreachable", "throttled", "gone"}[v]
}

// excerptBytes bounds the response body a delivery log entry or a
// dead-letter header keeps.
const excerptBytes = 4 << 10

// maxAnswerBytes bounds the answer read for a batch's partial failures.
const maxAnswerBytes = 1 << 20

// excerptBufs holds *[]byte of excerptBytes, to read answers into.
var excerptBufs = sync.Pool{New: func() any { b := make([]byte, excerptBytes); return &b }}

// outcome is one request's result.
type outcome struct {
	verdict    verdict
	status     int           // 0 without an answer
	retryAfter time.Duration // throttled: the wait asked for (0: none)
	excerpt    string        // the start of the answer's body, or the error
	// failed lists the offsets a 2xx batch answer reported as failed
	// (batchItemFailures); nil when all were taken.
	failed map[int64]bool
	took   time.Duration
}

// judge reads an answer (resp, or err when there was none) into an
// outcome. It reads at most maxAnswerBytes of the body and closes it.
func judge(resp *http.Response, err error, now time.Time, batch bool) outcome {
	if err != nil {
		return outcome{verdict: unreachable, excerpt: truncate(err.Error())}
	}
	defer resp.Body.Close()
	var body []byte
	if batch && resp.StatusCode/100 == 2 {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	} else {
		bp := excerptBufs.Get().(*[]byte)
		defer excerptBufs.Put(bp)
		n, _ := io.ReadFull(resp.Body, *bp) // a short answer ends early; any error is an answer cut short, judged by its status
		body = (*bp)[:n]
	}
	o := outcome{status: resp.StatusCode, excerpt: truncate(string(body))}
	switch s := resp.StatusCode; {
	case s/100 == 2:
		o.verdict = delivered
		if batch {
			o.failed = batchFailures(body)
		}
	case s == http.StatusGone:
		o.verdict = gone
	case s == http.StatusTooManyRequests:
		o.verdict = throttled
		o.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	case s == http.StatusServiceUnavailable:
		o.verdict = unreachable
		if d := parseRetryAfter(resp.Header.Get("Retry-After"), now); d > 0 {
			o.verdict, o.retryAfter = throttled, d
		}
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound,
		s == http.StatusMethodNotAllowed, s == http.StatusRequestTimeout, s == http.StatusTooEarly:
		o.verdict = unreachable
	case s/100 == 4:
		o.verdict = refused
	default: // 1xx left over, 3xx, 5xx
		o.verdict = unreachable
	}
	return o
}

// parseRetryAfter reads Retry-After: delay seconds or an HTTP date. 0 when
// absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// batchFailures reads Lambda's partial batch answer,
// {"batchItemFailures":[{"itemIdentifier":"<offset>"}]}. An answer of any
// other shape (or none) acknowledges the whole batch.
func batchFailures(body []byte) map[int64]bool {
	var ans struct {
		BatchItemFailures []struct {
			ItemIdentifier json.RawMessage `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if len(body) == 0 || json.Unmarshal(body, &ans) != nil || len(ans.BatchItemFailures) == 0 {
		return nil
	}
	out := map[int64]bool{}
	for _, f := range ans.BatchItemFailures {
		id := strings.Trim(string(f.ItemIdentifier), `"`)
		if n, err := strconv.ParseInt(id, 10, 64); err == nil {
			out[n] = true
		}
	}
	return out
}

func truncate(s string) string {
	if len(s) <= excerptBytes {
		return s
	}
	return s[:excerptBytes]
}

// errOf renders an outcome as the error a log line or a status shows.
func (o outcome) errOf() error {
	if o.status == 0 {
		return errors.New(o.excerpt)
	}
	return fmt.Errorf("HTTP %d: %s", o.status, o.excerpt)
}
