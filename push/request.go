package push

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
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
// subscription's settings.
type requestBuilder struct {
	cfg     api.PushConfig
	cluster string
	sign    *signer
	// render is the record as the fetch API renders it (the json format).
	render func(*recordbatch.Record) api.FetchedRecord
}

// build makes the request for d, signed at now.
func (b *requestBuilder) build(ctx context.Context, d *delivery, now time.Time) (*http.Request, error) {
	first := d.recs[0]
	var body []byte
	h := http.Header{}
	var err error
	switch {
	case len(d.recs) > 1 || b.cfg.Batch.MaxRecords > 1:
		body, err = b.batchBody(d, h)
	case b.cfg.Format == api.PushFormatBinary:
		body = first.Value
		b.binaryHeaders(d.tp, first, h)
	case b.cfg.Format == api.PushFormatStructured:
		body, err = json.Marshal(b.event(d.tp, first))
		h.Set("Content-Type", ContentTypeCloudEvent)
	case b.cfg.Format == api.PushFormatJSON:
		body, err = json.Marshal(api.GroupRecord{Topic: d.tp.Topic, Partition: d.tp.Partition, FetchedRecord: b.render(first)})
		h.Set("Content-Type", "application/json")
	default: // raw
		body = first.Value
		h.Set("Content-Type", "application/octet-stream")
	}
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	id := d.id
	if id == "" {
		id = webhookID(b.cfg.Name, d.tp, first.Offset)
	}
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderWebhookSignature, b.sign.sign(id, now, body))
	req.Header.Set(HeaderTopic, d.tp.Topic)
	req.Header.Set(HeaderPartition, strconv.Itoa(int(d.tp.Partition)))
	req.Header.Set(HeaderOffset, strconv.FormatInt(first.Offset, 10))
	if len(d.recs) > 1 {
		req.Header.Set(HeaderLast, strconv.FormatInt(d.recs[len(d.recs)-1].Offset, 10))
	}
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.attempt))
	req.Header.Set(HeaderFence, strconv.FormatInt(d.fence, 10))
	req.Header.Set("User-Agent", "sluice-push/1")
	return req, nil
}

func (b *requestBuilder) batchBody(d *delivery, h http.Header) ([]byte, error) {
	if b.cfg.Format == api.PushFormatJSON {
		out := make([]api.GroupRecord, len(d.recs))
		for i, r := range d.recs {
			out[i] = api.GroupRecord{Topic: d.tp.Topic, Partition: d.tp.Partition, FetchedRecord: b.render(r)}
		}
		h.Set("Content-Type", "application/json")
		return json.Marshal(out)
	}
	out := make([]map[string]any, len(d.recs))
	for i, r := range d.recs {
		out[i] = b.event(d.tp, r)
	}
	h.Set("Content-Type", ContentTypeCloudEventBatch)
	return json.Marshal(out)
}

// attributes are a record's CloudEvents context attributes: those its
// ce_* headers carry (a CloudEvent produced to Sluice), the rest derived.
type attributes struct {
	id, source, typ, time, contentType string
	// ext are extension attributes (and subject, dataschema), by name.
	ext map[string]string
}

func (b *requestBuilder) attributes(tp api.TopicPartition, r *recordbatch.Record) attributes {
	a := attributes{ext: map[string]string{}}
	for _, hd := range r.Headers {
		name, isCE := strings.CutPrefix(strings.ToLower(hd.Key), CEHeaderPrefix)
		v := string(hd.Value)
		switch {
		case !isCE:
			if strings.EqualFold(hd.Key, "content-type") && a.contentType == "" {
				a.contentType = v
			} else if validAttributeName(name) && !reservedAttribute(name) {
				a.ext[name] = v
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
			a.ext[name] = v
		}
	}
	if a.id == "" {
		a.id = tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) + "-" + strconv.FormatInt(r.Offset, 10)
	}
	if a.source == "" {
		a.source = "sluice://" + b.cluster + "/topics/" + tp.Topic
	}
	if a.typ == "" {
		a.typ = b.cfg.Type
	}
	if a.time == "" {
		a.time = time.UnixMilli(r.Timestamp).UTC().Format(time.RFC3339Nano)
	}
	if a.contentType == "" && r.Value != nil {
		if json.Valid(r.Value) {
			a.contentType = "application/json"
		} else {
			a.contentType = "application/octet-stream"
		}
	}
	if _, ok := a.ext["partitionkey"]; !ok && r.Key != nil && utf8.Valid(r.Key) {
		a.ext["partitionkey"] = string(r.Key)
	}
	return a
}

// binaryHeaders: CloudEvents' HTTP binary mode.
func (b *requestBuilder) binaryHeaders(tp api.TopicPartition, r *recordbatch.Record, h http.Header) {
	a := b.attributes(tp, r)
	h.Set("ce-specversion", ceSpecVersion)
	h.Set("ce-id", ceHeaderValue(a.id))
	h.Set("ce-source", ceHeaderValue(a.source))
	h.Set("ce-type", ceHeaderValue(a.typ))
	h.Set("ce-time", ceHeaderValue(a.time))
	if a.contentType != "" {
		h.Set("Content-Type", a.contentType)
	}
	for name, v := range a.ext {
		h.Set("ce-"+name, ceHeaderValue(v))
	}
}

// event is the structured-mode JSON of a record.
func (b *requestBuilder) event(tp api.TopicPartition, r *recordbatch.Record) map[string]any {
	a := b.attributes(tp, r)
	ev := map[string]any{"specversion": ceSpecVersion, "id": a.id, "source": a.source, "type": a.typ, "time": a.time}
	for name, v := range a.ext {
		ev[name] = v
	}
	if r.Value != nil {
		ev["datacontenttype"] = a.contentType
		if isJSONType(a.contentType) && json.Valid(r.Value) {
			ev["data"] = json.RawMessage(r.Value)
		} else {
			ev["data_base64"] = base64.StdEncoding.EncodeToString(r.Value)
		}
	}
	return ev
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
