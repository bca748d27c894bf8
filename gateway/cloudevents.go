package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/push"
	"github.com/sluice-io/sluice/recordbatch"
)

// CloudEvents in produce requests, as the CloudEvents HTTP binding (1.0)
// sends them: one event in JSON (structured mode), a JSON array of them
// (batched mode), or the data as the body with the attributes in ce-*
// headers (binary mode). Each event is one record:
//
//   - every context attribute becomes the header ce_<name> (push.CEHeaderPrefix,
//     the prefix a push in binary mode reads back), its value the
//     attribute's string form: ce_specversion, ce_id, ce_source, ce_type,
//     ce_time, ce_subject, ce_datacontenttype, ce_dataschema and each
//     extension;
//   - partitionkey (the partitioning extension) is also the record's key;
//   - the data is the value: data_base64 decoded; data as its compact JSON
//     text when datacontenttype is JSON (*/json, */*+json) or absent,
//     which the JSON format says means application/json, so a JSON string
//     is kept with its quotes, as the binding's binary mode would carry it;
//     with any other datacontenttype data must be a string, and its
//     characters are the value (the JSON format's "encoded content
//     string"). An event without data has a null value;
//   - time, when given, is the record's timestamp (a time before 1970,
//     which a record cannot carry, leaves it to the gateway's clock); a
//     time that is not RFC 3339 is refused, as is any attribute the
//     specification's rules make invalid, since the event pushed back
//     would be one no CloudEvents receiver reads.
//
// The JSON forms are scanned by the produce body scanner (jsonscan.go),
// within the same limits and memory charges as a JSON produce; a binary
// event is a body like application/octet-stream's, within max.message.bytes.

// ceSpecVersion is the one specversion accepted.
const ceSpecVersion = "1.0"

// maxAttributeName is the longest attribute name the specification allows.
const maxAttributeName = 20

// validAttributeName: lower-case ASCII letters and digits, 1 to 20 of them.
func validAttributeName(name []byte) bool {
	if len(name) == 0 || len(name) > maxAttributeName {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ceHeaderName is the record header of attribute name; the specification's
// own attributes do not allocate.
func ceHeaderName(name []byte) string {
	switch string(name) {
	case "specversion":
		return push.CEHeaderPrefix + "specversion"
	case "id":
		return push.CEHeaderPrefix + "id"
	case "source":
		return push.CEHeaderPrefix + "source"
	case "type":
		return push.CEHeaderPrefix + "type"
	case "time":
		return push.CEHeaderPrefix + "time"
	case "subject":
		return push.CEHeaderPrefix + "subject"
	case "datacontenttype":
		return push.CEHeaderPrefix + "datacontenttype"
	case "dataschema":
		return push.CEHeaderPrefix + "dataschema"
	case "partitionkey":
		return push.CEHeaderPrefix + "partitionkey"
	}
	return push.CEHeaderPrefix + string(name)
}

// stringAttribute reports whether the specification types name as a
// string (a JSON string in structured mode); extensions may also be
// integers and booleans.
func stringAttribute(name []byte) bool {
	switch string(name) {
	case "specversion", "id", "source", "type", "time", "subject", "datacontenttype", "dataschema":
		return true
	}
	return false
}

// ceContext is what an event's attributes decide beyond their headers.
type ceContext struct {
	index int // in its batch; -1 for an event on its own
	hs    []recordbatch.RecordHeader
	// The attributes checked or used, nil when absent.
	specversion, id, source, typ, time, subject, contentType, dataschema, partitionKey []byte
}

// failEvent is an INVALID_RECORD error about the event.
func (c *ceContext) failEvent(format string, args ...any) error {
	if c.index < 0 {
		return api.Errorf(api.CodeInvalidRecord, "event: "+format, args...)
	}
	return api.Errorf(api.CodeInvalidRecord, "event %d: "+format, append([]any{c.index}, args...)...)
}

// add records attribute name with value v, within lim's header bound.
func (c *ceContext) add(name, v []byte, lim *parseLimits) error {
	if len(c.hs) == lim.maxHeaders {
		return c.failEvent("more than %d attributes, one header each (%s)", lim.maxHeaders, api.LimitMaxHeadersPerRecord)
	}
	k := ceHeaderName(name)
	c.hs = append(c.hs, recordbatch.RecordHeader{Key: k, Value: v})
	switch string(name) {
	case "specversion":
		c.specversion = v
	case "id":
		c.id = v
	case "source":
		c.source = v
	case "type":
		c.typ = v
	case "time":
		c.time = v
	case "subject":
		c.subject = v
	case "datacontenttype":
		c.contentType = v
	case "dataschema":
		c.dataschema = v
	case "partitionkey":
		c.partitionKey = v
	}
	return nil
}

// check applies the specification's rules to the attributes and returns
// the record's timestamp (0: the gateway's clock). The headers are sorted
// by name, and an attribute given twice is refused.
func (c *ceContext) check() (int64, error) {
	switch {
	case c.specversion == nil:
		return 0, c.failEvent(`missing required attribute "specversion"`)
	case string(c.specversion) != ceSpecVersion:
		return 0, c.failEvent(`specversion %q is not supported (want %q)`, c.specversion, ceSpecVersion)
	}
	for _, a := range []struct {
		name string
		v    []byte
	}{{"id", c.id}, {"source", c.source}, {"type", c.typ}} {
		if a.v == nil {
			return 0, c.failEvent("missing required attribute %q", a.name)
		}
		if len(a.v) == 0 {
			return 0, c.failEvent("attribute %q must not be empty", a.name)
		}
	}
	if _, err := url.Parse(string(c.source)); err != nil {
		return 0, c.failEvent("source %q is not a URI-reference", c.source)
	}
	if c.subject != nil && len(c.subject) == 0 {
		return 0, c.failEvent(`attribute "subject" must not be empty`)
	}
	if c.dataschema != nil {
		if u, err := url.Parse(string(c.dataschema)); err != nil || !u.IsAbs() {
			return 0, c.failEvent("dataschema %q is not an absolute URI", c.dataschema)
		}
	}
	if c.contentType != nil {
		if _, _, err := mime.ParseMediaType(string(c.contentType)); err != nil {
			return 0, c.failEvent("datacontenttype %q is not a media type: %v", c.contentType, err)
		}
	}
	var ts int64
	if c.time != nil {
		t, err := time.Parse(time.RFC3339Nano, string(c.time))
		if err != nil {
			return 0, c.failEvent("time %q is not an RFC 3339 timestamp", c.time)
		}
		ts = max(t.UnixMilli(), 0)
	}
	if len(c.hs) > 1 {
		slices.SortFunc(c.hs, func(a, b recordbatch.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
		for j := 1; j < len(c.hs); j++ {
			if c.hs[j-1].Key == c.hs[j].Key {
				return 0, c.failEvent("attribute %q appears twice", strings.TrimPrefix(c.hs[j].Key, push.CEHeaderPrefix))
			}
		}
	}
	return ts, nil
}

// jsonMediaType reports whether a datacontenttype declares JSON data, as
// the JSON format defines it: */json or */*+json, parameters aside; an
// absent one means application/json.
func jsonMediaType(ct []byte) bool {
	if ct == nil {
		return true
	}
	mt, _, err := mime.ParseMediaType(string(ct))
	if err != nil {
		return false
	}
	_, sub, _ := strings.Cut(mt, "/")
	return sub == "json" || strings.HasSuffix(sub, "+json")
}

// parseCloudEvent reads a structured-mode body: one event object.
func parseCloudEvent(body []byte, lim *parseLimits) ([]pendingRecord, error) {
	s := &scanner{b: body, lim: lim}
	s.ws()
	if s.peek() != '{' {
		return nil, api.Errorf(api.CodeInvalidRequest, "a %s body is one JSON object, an event", mediaCloudEvent)
	}
	s.charge(recordCost)
	pr := s.cloudEvent(-1)
	s.end()
	if s.err == nil {
		s.err = lim.settle()
	}
	if s.err != nil {
		return nil, s.err
	}
	return append(getPending(1), pr), nil
}

// parseCloudEventBatch reads a batched-mode body: an array of event
// objects, each one record, in order.
func parseCloudEventBatch(body []byte, lim *parseLimits) ([]pendingRecord, error) {
	s := &scanner{b: body, lim: lim}
	s.ws()
	if s.peek() != '[' {
		return nil, api.Errorf(api.CodeInvalidRequest, "a %s body is a JSON array of events", mediaCloudEventBatch)
	}
	recs := getPending(min(len(body)/128+1, lim.maxRecords))
	s.list(']', func() {
		if len(recs) == lim.maxRecords {
			s.err = api.Errorf(api.CodeTooManyRecords, "more than %d records (%s)", lim.maxRecords, api.LimitMaxRecordsPerRequest)
			return
		}
		if s.peek() != '{' {
			s.err = api.Errorf(api.CodeInvalidRecord, "event %d is not a JSON object", len(recs))
			return
		}
		s.charge(recordCost)
		recs = append(recs, s.cloudEvent(len(recs)))
	})
	s.end()
	if s.err == nil {
		s.err = lim.settle()
	}
	if s.err != nil {
		putPending(recs)
		return nil, s.err
	}
	if len(recs) == 0 {
		putPending(recs)
		return nil, api.Errorf(api.CodeInvalidRequest, "the batch has no events")
	}
	return recs, nil
}

// Booleans of extension attributes, as their headers hold them.
var (
	ceTrue  = []byte("true")
	ceFalse = []byte("false")
)

// cloudEvent scans one event object in the JSON format at the cursor, the
// index-th of its batch (-1: on its own).
func (s *scanner) cloudEvent(index int) pendingRecord {
	pr := pendingRecord{partition: -1}
	c := ceContext{index: index}
	var data, dataB64 []byte
	var haveData, haveB64, seenData, seenB64 bool
	fail := func(err error) {
		if s.err == nil {
			s.err = err
		}
	}
	s.object(func(name []byte) {
		switch string(name) {
		case "data":
			if seenData {
				fail(c.failEvent(`"data" appears twice`))
				return
			}
			seenData, haveData = true, true
			data = s.fieldValue()
			return
		case "data_base64":
			if seenB64 {
				fail(c.failEvent(`"data_base64" appears twice`))
				return
			}
			seenB64 = true
			if p := s.peek(); p != '"' && p != 'n' {
				fail(c.failEvent("data_base64 must be a string"))
				return
			}
			dataB64, haveB64 = s.b64Field()
			return
		}
		if !validAttributeName(name) {
			fail(c.failEvent("attribute name %q is not 1 to %d lower-case letters and digits", name, maxAttributeName))
			return
		}
		var v []byte
		switch p := s.peek(); {
		case p == 'n':
			s.literal("null") // the JSON format's unset attribute
			return
		case p == '"':
			raw, escaped := s.str()
			v = s.text(raw, escaped)
		case stringAttribute(name):
			fail(c.failEvent("attribute %q must be a string", name))
			return
		case p == 't':
			s.literal("true")
			v = ceTrue
		case p == 'f':
			s.literal("false")
			v = ceFalse
		case p == '-' || isDigit(p):
			raw := s.value(0)
			if s.err != nil {
				return
			}
			n, err := strconv.ParseInt(string(raw), 10, 32)
			if err != nil {
				fail(c.failEvent("attribute %q: %s is not an integer from -2147483648 to 2147483647", name, raw))
				return
			}
			v = strconv.AppendInt(nil, n, 10)
			s.charge(int64(len(v)))
		default:
			fail(c.failEvent("attribute %q must be a string, an integer or a boolean", name))
			return
		}
		if s.err != nil {
			return
		}
		if err := c.add(name, v, s.lim); err != nil {
			fail(err)
			return
		}
		s.charge(headerCost + int64(len(name)+len(push.CEHeaderPrefix)))
	})
	if s.err != nil {
		return pr
	}
	ts, err := c.check()
	if err != nil {
		fail(err)
		return pr
	}
	switch {
	case haveData && haveB64:
		fail(c.failEvent("has both data and data_base64"))
		return pr
	case haveB64:
		out := make([]byte, base64.StdEncoding.DecodedLen(len(dataB64)))
		s.charge(int64(len(out)))
		n, err := base64.StdEncoding.Decode(out, dataB64)
		if err != nil {
			fail(c.failEvent("data_base64 is not base64: %v", err))
			return pr
		}
		pr.value = out[:n]
	case haveData && jsonMediaType(c.contentType):
		pr.value = data
	case haveData:
		if len(data) == 0 || data[0] != '"' {
			fail(c.failEvent("data must be a string when datacontenttype %q is not JSON (send bytes as data_base64)", c.contentType))
			return pr
		}
		inner := data[1 : len(data)-1]
		pr.value = s.text(inner, bytes.IndexByte(inner, '\\') >= 0)
	}
	pr.headers, pr.key, pr.timestamp = c.hs, c.partitionKey, ts
	return pr
}

// ceHeaderPrefix starts a binary-mode attribute's HTTP header.
const ceHeaderPrefix = "ce-"

// isBinaryCloudEvent reports whether a request carries CloudEvents
// attributes in headers. A web page on another origin cannot send such
// headers without the gateway's leave (a CORS preflight), so, like a JSON
// media type, they keep cross-site forms out.
func isBinaryCloudEvent(h http.Header) bool {
	for k := range h {
		if len(k) > len(ceHeaderPrefix) && strings.EqualFold(k[:len(ceHeaderPrefix)], ceHeaderPrefix) {
			return true
		}
	}
	return false
}

// binaryCloudEvent reads a binary-mode event's attributes from its
// headers (Content-Type is datacontenttype) into a record without its
// value, charging lim for what it keeps (once, at the end: the headers
// are already in memory, within the HTTP server's header limit, and
// max.headers.per.record bounds the table).
func binaryCloudEvent(h http.Header, lim *parseLimits) (pendingRecord, error) {
	pr := pendingRecord{partition: -1}
	c := ceContext{index: -1}
	// In header order, so the first bad one named is the same every time.
	names := make([]string, 0, len(h))
	for k := range h {
		if len(k) > len(ceHeaderPrefix) && strings.EqualFold(k[:len(ceHeaderPrefix)], ceHeaderPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		name := []byte(strings.ToLower(k[len(ceHeaderPrefix):]))
		if !validAttributeName(name) {
			return pr, c.failEvent("header %s: attribute name %q is not 1 to %d lower-case letters and digits", k, name, maxAttributeName)
		}
		if string(name) == "datacontenttype" {
			return pr, c.failEvent("header %s: in binary mode datacontenttype is the Content-Type", k)
		}
		vs := h[k]
		if len(vs) > 1 {
			return pr, c.failEvent("header %s appears %d times", k, len(vs))
		}
		v, err := decodeCEHeader(vs[0])
		if err != nil {
			return pr, c.failEvent("header %s: %v", k, err)
		}
		if err := c.add(name, v, lim); err != nil {
			return pr, err
		}
		lim.owed += headerCost + int64(len(name)+len(push.CEHeaderPrefix)+len(v))
	}
	if ct := h.Values("Content-Type"); len(ct) > 0 {
		if len(ct) > 1 {
			return pr, c.failEvent("header Content-Type appears %d times", len(ct))
		}
		if err := c.add([]byte("datacontenttype"), []byte(ct[0]), lim); err != nil {
			return pr, err
		}
		lim.owed += headerCost + int64(len(push.CEHeaderPrefix+"datacontenttype")+len(ct[0]))
	}
	ts, err := c.check()
	if err != nil {
		return pr, err
	}
	if err := lim.settle(); err != nil {
		return pr, err
	}
	pr.headers, pr.key, pr.timestamp = c.hs, c.partitionKey, ts
	return pr, nil
}

// decodeCEHeader decodes a binary-mode header value as the binding says:
// a double-quoted string is unquoted (backslash escapes included), then
// percent-encoded bytes are decoded once; the result must be UTF-8.
func decodeCEHeader(v string) ([]byte, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		in := v[1 : len(v)-1]
		for i := 0; i < len(in); i++ {
			switch c := in[i]; c {
			case '\\':
				if i+1 == len(in) {
					return nil, errBadQuoted
				}
				i++
				b.WriteByte(in[i])
			case '"':
				return nil, errBadQuoted
			default:
				b.WriteByte(c)
			}
		}
		v = b.String()
	}
	if strings.IndexByte(v, '%') < 0 {
		if !utf8.ValidString(v) {
			return nil, errNotUTF8
		}
		return []byte(v), nil
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) || !isHex(v[i+1]) || !isHex(v[i+2]) {
			return nil, errBadPercent
		}
		out = append(out, unhex(v[i+1])<<4|unhex(v[i+2]))
		i += 2
	}
	if !utf8.Valid(out) {
		return nil, errNotUTF8
	}
	return out, nil
}

var (
	errBadQuoted  = errors.New("a malformed quoted string")
	errBadPercent = errors.New("a % not followed by two hexadecimal digits")
	errNotUTF8    = errors.New("not UTF-8 once percent-decoded")
)

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
