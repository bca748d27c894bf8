package gateway

import (
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// wantBadRequest checks that a refused query got a 400 from the table.
func wantBadRequest(t *testing.T, what string, err error) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || api.Lookup(ae.Code).Status != 400 {
		t.Fatalf("%s: refused with %v, want a 400 code", what, err)
	}
}

// FuzzQueryParams runs every query parser on the same query: each either
// refuses it with a 400 or returns values within the bounds documented in
// openapi.yaml.
func FuzzQueryParams(f *testing.F) {
	for _, s := range []string{
		"", "offset=0", "offset=earliest&max_records=10000&max_bytes=67108864&max_wait_ms=30000",
		"offset=-1", "offset=latest&max_wait_ms=30001", "max_records=0", "max_bytes=9223372036854775808",
		"acks=0&timeout_ms=300000", "acks=all", "acks=-1", "acks=2", "timeout_ms=0",
		"key=&partition=3", "key=k%00&partition=-1", "partition=2147483648",
		"at=1700000000000", "at=earliest", "at=yesterday",
		"credit=1099511627776&format=binary", "credit=-1", "format=xml",
		"topics=a,,b,%20c&session_timeout_ms=300000&instance_id=i&credit=5", "session_timeout_ms=300001",
		"cursor=" + string(make([]byte, 10)), "max_records=1&max_records=2", "offset=%zz", "a=1;b=2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// ParseQuery keeps what it could parse on error, as net/http does.
		q, _ := url.ParseQuery(raw)

		if fp, err := parseFetchQuery(q); err != nil {
			wantBadRequest(t, "fetch", err)
		} else {
			if fp.offsetSpec != "earliest" && fp.offsetSpec != "latest" {
				if n, err := strconv.ParseInt(fp.offsetSpec, 10, 64); err != nil || n < 0 {
					t.Fatalf("offset %q accepted", fp.offsetSpec)
				}
			}
			checkBounds(t, fp.maxRecords, fp.maxBytes, fp.wait)
		}
		if pp, err := parsePollQuery(q); err != nil {
			wantBadRequest(t, "poll", err)
		} else {
			checkBounds(t, pp.maxRecords, pp.maxBytes, pp.wait)
			if len(pp.cursor) > api.MaxCursorLen {
				t.Fatalf("cursor of %d bytes accepted", len(pp.cursor))
			}
		}
		if pp, err := parseProduceQuery(q); err != nil {
			wantBadRequest(t, "produce", err)
		} else if (pp.acks != "all" && pp.acks != "1" && pp.acks != "0") || pp.timeout < time.Millisecond || pp.timeout > 300*time.Second {
			t.Fatalf("produce params %+v accepted", pp)
		}
		if oq, err := parseOctetQuery(q); err != nil {
			wantBadRequest(t, "octet", err)
		} else if oq.partition < -1 || (oq.key == nil) == q.Has("key") {
			t.Fatalf("octet params %+v accepted from %v", oq, q)
		}
		if at, err := parseOffsetsAt(q); err != nil {
			wantBadRequest(t, "at", err)
		} else if _, err := strconv.ParseInt(at, 10, 64); err != nil && at != "earliest" && at != "latest" {
			t.Fatalf("at=%q accepted", at)
		}
		if sq, err := parseStreamQuery(q); err != nil {
			wantBadRequest(t, "stream", err)
		} else if sq.credit < 0 || sq.credit > maxCredit {
			t.Fatalf("credit %d accepted", sq.credit)
		}
		if req, credit, err := parseGroupWSQuery(q); err != nil {
			wantBadRequest(t, "group ws", err)
		} else {
			if credit < 0 || credit > maxCredit || req.SessionTimeoutMs < 0 || req.SessionTimeoutMs > 300_000 {
				t.Fatalf("group ws credit %d, session %d accepted", credit, req.SessionTimeoutMs)
			}
			for _, tp := range req.Topics {
				if tp == "" {
					t.Fatal("an empty topic name accepted")
				}
			}
		}
	})
}

func checkBounds(t *testing.T, maxRecords int, maxBytes int64, wait time.Duration) {
	t.Helper()
	if maxRecords < 1 || maxRecords > maxMaxRecords || maxBytes < 1 || maxBytes > maxMaxBytes || wait < 0 || wait > maxWait {
		t.Fatalf("bounds %d records, %d bytes, %v accepted", maxRecords, maxBytes, wait)
	}
}
