package push

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apijson"
	"github.com/sluice-io/sluice/recordbatch"
)

// Headers every delivery carries besides the webhook ones.
const (
	HeaderTopic     = "sluice-topic"
	HeaderPartition = "sluice-partition"
	HeaderOffset    = "sluice-offset"      // the (first) record's offset
	HeaderLast      = "sluice-offset-last" // a batch's last record's offset
	HeaderAttempt   = "sluice-attempt"     // 1 for the first try, counted across owners
	HeaderFence     = "sluice-fence"       // the partition grant's fence: only grows
)

// CloudEvents media types.
const (
	ContentTypeCloudEvent      = "application/cloudevents+json"
	ContentTypeCloudEventBatch = "application/cloudevents-batch+json"
	ceSpecVersion              = "1.0"
	// CEHeaderPrefix starts a record header that holds a CloudEvents
	// attribute (ce_type, ce_id, ...): what a CloudEvent produced to
	// Sluice becomes, and what a push in binary mode sends as ce-*.
	CEHeaderPrefix = "ce_"
)

// delivery is one request's worth of records of one partition.
type delivery struct {
	tp      api.TopicPartition
	recs    []*recordbatch.Record
	attempt int
	fence   int64
	id      string // webhook-id; default webhookID of the first record
}

// webhookID is stable across retries and owners: the subscription, the
// partition and the offset (the first, for a batch).
func webhookID(sub string, tp api.TopicPartition, offset int64) string {
	return sub + "." + tp.Topic + "." + strconv.Itoa(int(tp.Partition)) + "." + strconv.FormatInt(offset, 10)
}

// requestBuilder turns deliveries into signed requests for one
// subscription's settings. Its methods may run on many goroutines at once.
type requestBuilder struct {
	cfg     api.PushConfig
	cluster string
	sign    *signer
	// render is the record as the fetch API renders it (the json format).
	render func(*recordbatch.Record) api.FetchedRecord

	once     sync.Once
	endpoint *url.URL // cfg.Endpoint, parsed once; nil: unparsable (urlErr)
	urlErr   error
	// Header values every request of the subscription carries, shared by
	// all of them (nothing writes to a request's headers once built).
	userAgent, specVersion, defaultType []string
	sources                             sync.Map // topic → []string: ce-source
}

// Canonical header keys, set into requests' maps directly.
var (
	keyWebhookID        = http.CanonicalHeaderKey(HeaderWebhookID)
	keyWebhookTimestamp = http.CanonicalHeaderKey(HeaderWebhookTimestamp)
	keyWebhookSignature = http.CanonicalHeaderKey(HeaderWebhookSignature)
	keyTopic            = http.CanonicalHeaderKey(HeaderTopic)
	keyPartition        = http.CanonicalHeaderKey(HeaderPartition)
	keyOffset           = http.CanonicalHeaderKey(HeaderOffset)
	keyLast             = http.CanonicalHeaderKey(HeaderLast)
	keyAttempt          = http.CanonicalHeaderKey(HeaderAttempt)
	keyFence            = http.CanonicalHeaderKey(HeaderFence)
	keyCESpecVersion    = http.CanonicalHeaderKey("ce-specversion")
	keyCEID             = http.CanonicalHeaderKey("ce-id")
	keyCESource         = http.CanonicalHeaderKey("ce-source")
	keyCEType           = http.CanonicalHeaderKey("ce-type")
	keyCETime           = http.CanonicalHeaderKey("ce-time")
)

// Content types of the bodies the builder makes, as header values.
var (
	contentJSON       = []string{"application/json"}
	contentOctets     = []string{"application/octet-stream"}
	contentEvent      = []string{ContentTypeCloudEvent}
	contentEventBatch = []string{ContentTypeCloudEventBatch}
)

// requestHeaders is room for the headers of a request without extension
// attributes.
const requestHeaders = 16

func (b *requestBuilder) prepare() {
	u, err := url.Parse(b.cfg.Endpoint)
	if err == nil {
		u.Host = strings.TrimSuffix(u.Host, ":") // an empty port, as http.NewRequest drops it
	}
	b.endpoint, b.urlErr = u, err
	b.userAgent = []string{"sluice-push/1"}
	b.specVersion = []string{ceSpecVersion}
	b.defaultType = []string{ceHeaderValue(b.cfg.Type)}
}

// source is ce-source of topic's records (the header value).
func (b *requestBuilder) source(topic string) string {
	if v, ok := b.sources.Load(topic); ok {
		return v.(string)
	}
	s := "sluice://" + b.cluster + "/topics/" + topic
	b.sources.Store(topic, s)
	return s
}

// headers fills a request's header map, each value a one-element slice of
// one backing array.
type headers struct {
	h    http.Header
	vals []string
}

func newHeaders(n int) headers {
	return headers{h: make(http.Header, n), vals: make([]string, 0, n)}
}

// set sets the canonical key k to v.
func (h *headers) set(k, v string) {
	if len(h.vals) == cap(h.vals) {
		h.vals = make([]string, 0, 4)
	}
	h.vals = append(h.vals, v)
	n := len(h.vals)
	h.h[k] = h.vals[n-1 : n : n]
}

// build makes the request for d, signed at now.
func (b *requestBuilder) build(ctx context.Context, d *delivery, now time.Time) (*http.Request, error) {
	b.once.Do(b.prepare)
	if b.urlErr != nil {
		return nil, b.urlErr
	}
	first := d.recs[0]
	var body []byte
	h := newHeaders(requestHeaders)
	var err error
	switch {
	case len(d.recs) > 1 || b.cfg.Batch.MaxRecords > 1:
		body, err = b.batchBody(d, &h)
	case b.cfg.Format == api.PushFormatBinary:
		body = first.Value
		b.binaryHeaders(d.tp, first, &h)
	case b.cfg.Format == api.PushFormatStructured:
		body = b.appendEvent(make([]byte, 0, len(first.Value)*4/3+256), d.tp, first)
		h.h["Content-Type"] = contentEvent
	case b.cfg.Format == api.PushFormatJSON:
		body = b.appendJSON(make([]byte, 0, len(first.Value)+len(first.Key)+128), d.tp, first)
		h.h["Content-Type"] = contentJSON
	default: // raw
		body = first.Value
		h.h["Content-Type"] = contentOctets
	}
	if err != nil {
		return nil, err
	}
	id := d.id
	if id == "" {
		id = webhookID(b.cfg.Name, d.tp, first.Offset)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	h.set(keyWebhookID, id)
	h.set(keyWebhookTimestamp, ts)
	h.set(keyWebhookSignature, b.sign.signAt(id, ts, now, body))
	h.set(keyTopic, d.tp.Topic)
	h.set(keyPartition, strconv.Itoa(int(d.tp.Partition)))
	h.set(keyOffset, strconv.FormatInt(first.Offset, 10))
	if len(d.recs) > 1 {
		h.set(keyLast, strconv.FormatInt(d.recs[len(d.recs)-1].Offset, 10))
	}
	h.set(keyAttempt, strconv.Itoa(d.attempt))
	h.set(keyFence, strconv.FormatInt(d.fence, 10))
	h.h["User-Agent"] = b.userAgent
	return b.request(ctx, body, h.h), nil
}

// request is what http.NewRequestWithContext makes of a POST of body to
// the endpoint, without parsing the endpoint again.
func (b *requestBuilder) request(ctx context.Context, body []byte, h http.Header) *http.Request {
	u := *b.endpoint
	req := &http.Request{Method: http.MethodPost, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: u.Host,
		ContentLength: int64(len(body))}
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	} else {
		req.Body = http.NoBody
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req.WithContext(ctx)
}

func (b *requestBuilder) batchBody(d *delivery, h *headers) ([]byte, error) {
	n := 2
	for _, r := range d.recs {
		n += len(r.Value) + len(r.Key) + len(d.tp.Topic) + 96
	}
	if b.cfg.Format == api.PushFormatJSON {
		out := append(make([]byte, 0, n), '[')
		for i, r := range d.recs {
			if i > 0 {
				out = append(out, ',')
			}
			out = b.appendJSON(out, d.tp, r)
		}
		h.h["Content-Type"] = contentJSON
		return append(out, ']'), nil
	}
	out := append(make([]byte, 0, n*4/3+128*len(d.recs)), '[')
	for i, r := range d.recs {
		if i > 0 {
			out = append(out, ',')
		}
		out = b.appendEvent(out, d.tp, r)
	}
	h.h["Content-Type"] = contentEventBatch
	return append(out, ']'), nil
}

// appendJSON writes r as the fetch API renders a group's record.
func (b *requestBuilder) appendJSON(dst []byte, tp api.TopicPartition, r *recordbatch.Record) []byte {
	gr := api.GroupRecord{Topic: tp.Topic, Partition: tp.Partition, FetchedRecord: b.render(r)}
	return apijson.AppendGroupRecord(dst, &gr)
}

// attributes are a record's CloudEvents context attributes: those its
// ce_* headers carry (a CloudEvent produced to Sluice), the rest derived.
type attributes struct {
	id, source, typ, time, contentType string
	// valueJSON: the value was checked and is JSON (only when the content
	// type was derived from it).
	valueJSON bool
	// ext are extension attributes (and subject, dataschema), each name
	// once, the last a record header set.
	ext []attribute
}

type attribute struct{ name, value string }

// setExt sets extension attribute name, replacing an earlier value.
func (a *attributes) setExt(name, v string) {
	for i := range a.ext {
		if a.ext[i].name == name {
			a.ext[i].value = v
			return
		}
	}
	a.ext = append(a.ext, attribute{name, v})
}

func (a *attributes) hasExt(name string) bool {
	for i := range a.ext {
		if a.ext[i].name == name {
			return true
		}
	}
	return false
}

func (b *requestBuilder) attributes(tp api.TopicPartition, r *recordbatch.Record) attributes {
	var a attributes
	for _, hd := range r.Headers {
		name, isCE := strings.CutPrefix(strings.ToLower(hd.Key), CEHeaderPrefix)
		v := string(hd.Value)
		switch {
		case !isCE:
			if strings.EqualFold(hd.Key, "content-type") && a.contentType == "" {
				a.contentType = v
			} else if validAttributeName(name) && !reservedAttribute(name) {
				a.setExt(name, v)
			}
		case name == "id":
			a.id = v
		case name == "source":
			a.source = v
		case name == "type":
			a.typ = v
		case name == "time":
			a.time = v
		case name == "datacontenttype":
			a.contentType = v
		case name == "specversion":
		case validAttributeName(name):
			a.setExt(name, v)
		}
	}
	if a.id == "" {
		a.id = tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) + "-" + strconv.FormatInt(r.Offset, 10)
	}
	if a.source == "" {
		a.source = b.source(tp.Topic)
	}
	if a.typ == "" {
		a.typ = b.cfg.Type
	}
	if a.time == "" {
		var buf [40]byte
		a.time = string(time.UnixMilli(r.Timestamp).UTC().AppendFormat(buf[:0], time.RFC3339Nano))
	}
	if a.contentType == "" && r.Value != nil {
		if json.Valid(r.Value) {
			a.contentType, a.valueJSON = "application/json", true
		} else {
			a.contentType = "application/octet-stream"
		}
	}
	if !a.hasExt("partitionkey") && r.Key != nil && utf8.Valid(r.Key) {
		a.setExt("partitionkey", string(r.Key))
	}
	return a
}

// binaryHeaders: CloudEvents' HTTP binary mode.
func (b *requestBuilder) binaryHeaders(tp api.TopicPartition, r *recordbatch.Record, h *headers) {
	a := b.attributes(tp, r)
	h.h[keyCESpecVersion] = b.specVersion
	h.set(keyCEID, ceHeaderValue(a.id))
	h.set(keyCESource, ceHeaderValue(a.source))
	if a.typ == b.cfg.Type {
		h.h[keyCEType] = b.defaultType
	} else {
		h.set(keyCEType, ceHeaderValue(a.typ))
	}
	h.set(keyCETime, ceHeaderValue(a.time))
	switch a.contentType {
	case "":
	case "application/json":
		h.h["Content-Type"] = contentJSON
	case "application/octet-stream":
		h.h["Content-Type"] = contentOctets
	default:
		h.set("Content-Type", a.contentType)
	}
	for _, e := range a.ext {
		h.set(http.CanonicalHeaderKey("ce-"+e.name), ceHeaderValue(e.value))
	}
}

// eventField is one member of a structured event: a string, or raw JSON.
type eventField struct {
	name, str string
	raw       []byte // non-nil: the member's JSON as is
}

// appendEvent writes the structured-mode JSON of a record: the object
// json.Marshal makes of its attributes as a map (members sorted by name,
// strings escaped alike), with JSON data copied as stored.
func (b *requestBuilder) appendEvent(dst []byte, tp api.TopicPartition, r *recordbatch.Record) []byte {
	a := b.attributes(tp, r)
	var buf [16]eventField
	ev := buf[:0]
	set := func(f eventField) {
		for i := range ev {
			if ev[i].name == f.name {
				ev[i] = f
				return
			}
		}
		ev = append(ev, f)
	}
	ev = append(ev, eventField{name: "specversion", str: ceSpecVersion}, eventField{name: "id", str: a.id},
		eventField{name: "source", str: a.source}, eventField{name: "type", str: a.typ}, eventField{name: "time", str: a.time})
	for _, e := range a.ext {
		set(eventField{name: e.name, str: e.value})
	}
	if r.Value != nil {
		set(eventField{name: "datacontenttype", str: a.contentType})
		if isJSONType(a.contentType) && (a.valueJSON || json.Valid(r.Value)) {
			set(eventField{name: "data", raw: r.Value})
		} else {
			set(eventField{name: "data_base64", str: base64.StdEncoding.EncodeToString(r.Value)})
		}
	}
	slices.SortFunc(ev, func(x, y eventField) int { return strings.Compare(x.name, y.name) })
	dst = append(dst, '{')
	for i := range ev {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = apijson.AppendString(dst, ev[i].name)
		dst = append(dst, ':')
		if ev[i].raw != nil {
			dst = append(dst, ev[i].raw...)
		} else {
			dst = apijson.AppendString(dst, ev[i].str)
		}
	}
	return append(dst, '}')
}

// isJSONType: CloudEvents' rule, */json or */*+json.
func isJSONType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	_, sub, ok := strings.Cut(mt, "/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// validAttributeName: CloudEvents attribute names are lower-case letters
// and digits, at most 20 of them.
func validAttributeName(name string) bool {
	if name == "" || len(name) > 20 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func reservedAttribute(name string) bool {
	switch name {
	case "id", "source", "type", "time", "specversion", "datacontenttype", "data", "data_base64":
		return true
	}
	return false
}

// ceHeaderValue percent-encodes what the binary mode's header values may
// not carry as is: anything outside printable ASCII, '"', '%', and a space
// at either end (HTTP trims it). Spaces inside stay as they are: the
// binding asks for them encoded too, but the CloudEvents Go SDK does not
// decode them, and HTTP carries them intact.
func ceHeaderValue(s string) string {
	esc := func(i int) bool {
		c := s[i]
		return c < 0x20 || c > 0x7e || c == '"' || c == '%' || (c == ' ' && (i == 0 || i == len(s)-1))
	}
	ok := true
	for i := 0; i < len(s); i++ {
		if esc(i) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if esc(i) {
			fmt.Fprintf(&sb, "%%%02X", c)
		} else {
			sb.WriteByte(c)
		}
	}
	return sb.String()
}
