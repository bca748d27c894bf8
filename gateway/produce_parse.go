package gateway

import (
	"bytes"
	"mime"
	"net/http"
	"strconv"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/push"
	"github.com/sluice-io/sluice/recordbatch"
)

// Media types a produce accepts (and CloudEvents in binary mode, by their
// ce-* headers: cloudevents.go).
const (
	mediaJSON            = "application/json"
	mediaNDJSON          = "application/x-ndjson"
	mediaOctet           = "application/octet-stream"
	mediaCloudEvent      = push.ContentTypeCloudEvent      // one CloudEvent, structured mode
	mediaCloudEventBatch = push.ContentTypeCloudEventBatch // CloudEvents, batched mode
)

// pendingRecord is one record of a produce request, before it has a partition.
type pendingRecord struct {
	partition int32 // -1 when the request did not name one
	key       []byte
	value     []byte
	headers   []recordbatch.RecordHeader
	timestamp int64
}

// producerFields are the idempotent-producer fields of a JSON body.
type producerFields struct {
	id        *int64
	epoch     *int16
	sequences map[string]int32
}

func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// Top-level fields of a JSON produce body, as bits of the set of those seen.
const (
	bodyRecords = 1 << iota
	bodyProducerID
	bodyProducerEpoch
	bodySequences
)

// parseJSONBody reads {"records":[...]} bodies within lim.
func parseJSONBody(body []byte, lim *parseLimits) ([]pendingRecord, producerFields, error) {
	s := &scanner{b: body, lim: lim}
	var pf producerFields
	recs := getPending(min(len(body)/128+1, lim.maxRecords))
	intInto := func(name string, lo, hi int64) *int64 {
		n := s.intField(name, lo, hi)
		return &n
	}
	var seen uint8
	s.object(func(key []byte) {
		var f uint8
		switch string(key) {
		case "records":
			f = bodyRecords
		case "producer_id":
			f = bodyProducerID
		case "producer_epoch":
			f = bodyProducerEpoch
		case "sequences":
			f = bodySequences
		default:
			s.err = api.Errorf(api.CodeInvalidRequest, "unknown field %q (a body has records, producer_id, producer_epoch, sequences)", key)
			return
		}
		if seen&f != 0 {
			s.err = api.Errorf(api.CodeInvalidRequest, "field %q appears twice", key)
			return
		}
		seen |= f
		switch f {
		case bodyRecords:
			if s.peek() == 'n' {
				s.literal("null")
				return
			}
			if s.peek() != '[' {
				s.expect('[')
				return
			}
			s.list(']', func() {
				if len(recs) == lim.maxRecords {
					s.err = api.Errorf(api.CodeTooManyRecords, "more than %d records (%s)", lim.maxRecords, api.LimitMaxRecordsPerRequest)
					return
				}
				s.charge(recordCost)
				recs = append(recs, s.record(len(recs)))
			})
		case bodyProducerID:
			pf.id = intInto("producer_id", 1, 1<<62)
		case bodyProducerEpoch:
			e := int16(*intInto("producer_epoch", 0, 1<<15-1))
			pf.epoch = &e
		case bodySequences:
			pf.sequences = s.sequences()
		}
	})
	s.end()
	if s.err == nil {
		s.err = lim.settle()
	}
	if s.err != nil {
		putPending(recs)
		return nil, pf, s.err
	}
	if len(recs) == 0 {
		putPending(recs)
		return nil, pf, api.Errorf(api.CodeInvalidRequest, `body has no "records"`)
	}
	return recs, pf, nil
}

// sequences scans the "sequences" object (or null): partition numbers, as
// strings, to int32 sequence numbers, at most one per partition of the topic.
func (s *scanner) sequences() map[string]int32 {
	bad := func() {
		if s.err == nil {
			s.err = api.Errorf(api.CodeInvalidRequest, `"sequences" must map partition numbers to integers`)
		}
	}
	switch s.peek() {
	case 'n':
		s.literal("null")
		return nil
	case '{':
	default:
		bad()
		return nil
	}
	seqs := map[string]int32{}
	s.object(func(name []byte) {
		if len(seqs) == s.lim.maxSequences {
			s.err = api.Errorf(api.CodeInvalidRequest, `"sequences" has more than %d entries, one per partition of the topic`, s.lim.maxSequences)
			return
		}
		k := string(s.text(name, false))
		if _, dup := seqs[k]; dup {
			s.err = api.Errorf(api.CodeInvalidRequest, `"sequences" names partition %q twice`, k)
			return
		}
		v := s.value(0)
		if s.err != nil {
			return
		}
		n, err := strconv.ParseInt(string(v), 10, 32)
		if err != nil {
			bad()
			return
		}
		seqs[k] = int32(n)
	})
	return seqs
}

// parseNDJSON reads one record object per line within lim; blank lines are
// skipped.
func parseNDJSON(body []byte, lim *parseLimits) ([]pendingRecord, error) {
	out := getPending(min(len(body)/128+1, lim.maxRecords))
	line := 0
	fail := func(err error) ([]pendingRecord, error) {
		putPending(out)
		return nil, err
	}
	for len(body) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if len(out) == lim.maxRecords {
			return fail(api.Errorf(api.CodeTooManyRecords, "more than %d records (%s)", lim.maxRecords, api.LimitMaxRecordsPerRequest))
		}
		s := scanner{b: l, lim: lim}
		s.charge(recordCost)
		pr := s.record(len(out))
		s.end()
		if s.err != nil {
			e := api.Classify(s.err)
			if e.Code == api.CodeInvalidRequest || e.Code == api.CodeInvalidRecord {
				e = api.Errorf(api.CodeInvalidRecord, "line %d: %s", line, e.Message)
			}
			return fail(e)
		}
		out = append(out, pr)
	}
	if err := lim.settle(); err != nil {
		return fail(err)
	}
	if len(out) == 0 {
		return fail(api.Errorf(api.CodeInvalidRequest, "body has no records"))
	}
	return out, nil
}

// size is what max.message.bytes limits: key, value and headers.
func (p *pendingRecord) size() int {
	n := len(p.key) + len(p.value)
	for _, h := range p.headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
