package gateway

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"

	"github.com/sluice-io/sluice/api"
)

// Media types a produce accepts.
const (
	mediaJSON   = "application/json"
	mediaNDJSON = "application/x-ndjson"
	mediaOctet  = "application/octet-stream"
)

// pendingRecord is one record of a produce request, before it has a partition.
type pendingRecord struct {
	partition int32 // -1 when the request did not name one
	key       []byte
	value     []byte
	headers   []api.Header
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

// parseJSONBody reads {"records":[...]} bodies.
func parseJSONBody(body []byte) ([]pendingRecord, producerFields, error) {
	s := &scanner{b: body}
	var pf producerFields
	recs := getPending(len(body)/128 + 1)
	intInto := func(name string, lo, hi int64) *int64 {
		n := s.intField(name, lo, hi)
		return &n
	}
	s.object(func(key []byte) {
		switch string(key) {
		case "records":
			if s.peek() == 'n' {
				s.literal("null")
				return
			}
			if s.peek() != '[' {
				s.expect('[')
				return
			}
			s.list(']', func() { recs = append(recs, s.record(len(recs))) })
		case "producer_id":
			pf.id = intInto("producer_id", 1, 1<<62)
		case "producer_epoch":
			e := int16(*intInto("producer_epoch", 0, 1<<15-1))
			pf.epoch = &e
		case "sequences":
			v := s.value(0)
			if s.err == nil && json.Unmarshal(v, &pf.sequences) != nil {
				s.err = api.Errorf(api.CodeInvalidRequest, `"sequences" must map partition numbers to integers`)
			}
		default:
			s.value(0)
		}
	})
	s.end()
	if s.err != nil {
		return nil, pf, s.err
	}
	if len(recs) == 0 {
		return nil, pf, api.Errorf(api.CodeInvalidRequest, `body has no "records"`)
	}
	return recs, pf, nil
}

// parseNDJSON reads one record object per line; blank lines are skipped.
func parseNDJSON(body []byte) ([]pendingRecord, error) {
	out := getPending(bytes.Count(body, []byte{'\n'}) + 1)
	line := 0
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
		s := &scanner{b: l}
		pr := s.record(len(out))
		s.end()
		if s.err != nil {
			return nil, api.Errorf(api.CodeInvalidRecord, "line %d: %s", line, api.Classify(s.err).Message)
		}
		out = append(out, pr)
	}
	if len(out) == 0 {
		return nil, api.Errorf(api.CodeInvalidRequest, "body has no records")
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
