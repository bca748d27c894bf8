package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"sort"

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
	var req api.ProduceRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, producerFields{}, api.Errorf(api.CodeInvalidRequest, "body is not a JSON produce request: %v", err)
	}
	if dec.More() {
		return nil, producerFields{}, api.Errorf(api.CodeInvalidRequest, "body has data after the JSON object")
	}
	if len(req.Records) == 0 {
		return nil, producerFields{}, api.Errorf(api.CodeInvalidRequest, `body has no "records"`)
	}
	out := make([]pendingRecord, len(req.Records))
	for i := range req.Records {
		pr, err := convertRecord(&req.Records[i], i)
		if err != nil {
			return nil, producerFields{}, err
		}
		out[i] = pr
	}
	return out, producerFields{id: req.ProducerID, epoch: req.ProducerEpoch, sequences: req.Sequences}, nil
}

// parseNDJSON reads one record object per line; blank lines are skipped.
func parseNDJSON(body []byte) ([]pendingRecord, error) {
	out := make([]pendingRecord, 0, bytes.Count(body, []byte{'\n'})+1)
	line := 0
	for len(body) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		var rec api.ProduceRecord
		if err := json.Unmarshal(l, &rec); err != nil {
			return nil, api.Errorf(api.CodeInvalidRecord, "line %d is not a JSON record object: %v", line, err)
		}
		pr, err := convertRecord(&rec, len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	if len(out) == 0 {
		return nil, api.Errorf(api.CodeInvalidRequest, "body has no records")
	}
	return out, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// convertRecord turns a JSON record into bytes: a string key is its UTF-8
// bytes, any other JSON key its JSON text; a value is its JSON text; *_b64
// fields carry raw bytes.
func convertRecord(rec *api.ProduceRecord, i int) (pendingRecord, error) {
	pr := pendingRecord{partition: -1, timestamp: rec.Timestamp}
	if rec.Partition != nil {
		pr.partition = *rec.Partition
		if pr.partition < 0 {
			return pr, api.Errorf(api.CodeInvalidRecord, "record %d: partition %d is negative", i, pr.partition)
		}
	}
	if rec.Timestamp < 0 {
		return pr, api.Errorf(api.CodeInvalidRecord, "record %d: negative timestamp", i)
	}
	switch {
	case rec.KeyB64 != nil:
		k, err := base64.StdEncoding.DecodeString(*rec.KeyB64)
		if err != nil {
			return pr, api.Errorf(api.CodeInvalidRecord, "record %d: key_b64 is not base64: %v", i, err)
		}
		pr.key = k
	case isNull(rec.Key):
	case rec.Key[0] == '"':
		var s string
		if err := json.Unmarshal(rec.Key, &s); err != nil {
			return pr, api.Errorf(api.CodeInvalidRecord, "record %d: bad key: %v", i, err)
		}
		pr.key = []byte(s)
	default:
		pr.key = compactJSON(rec.Key)
	}
	switch {
	case rec.ValueB64 != nil:
		v, err := base64.StdEncoding.DecodeString(*rec.ValueB64)
		if err != nil {
			return pr, api.Errorf(api.CodeInvalidRecord, "record %d: value_b64 is not base64: %v", i, err)
		}
		pr.value = v
	case isNull(rec.Value):
	default:
		pr.value = compactJSON(rec.Value)
	}
	if len(rec.Headers) > 0 {
		keys := make([]string, 0, len(rec.Headers))
		for k := range rec.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pr.headers = append(pr.headers, api.Header{Key: k, Value: []byte(rec.Headers[k])})
		}
	}
	return pr, nil
}

// compactJSON drops insignificant white space, so a value comes back the way
// any JSON encoder would write it, whatever the producer's indentation.
func compactJSON(raw json.RawMessage) []byte {
	if bytes.IndexAny(raw, " \t\r\n") < 0 {
		return raw
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// size is what max.message.bytes limits: key, value and headers.
func (p *pendingRecord) size() int {
	n := len(p.key) + len(p.value)
	for _, h := range p.headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
