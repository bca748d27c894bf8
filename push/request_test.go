package push

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// testRender is the fetch API's rendering, as far as these records need
// it: JSON values inline, other bytes as base64.
func testRender(r *recordbatch.Record) api.FetchedRecord {
	fr := api.FetchedRecord{Offset: r.Offset, Timestamp: r.Timestamp}
	if r.Key != nil {
		s := string(r.Key)
		fr.Key = &s
	}
	if r.Value != nil {
		if json.Valid(r.Value) {
			fr.Value = json.RawMessage(r.Value)
		} else {
			s := base64.StdEncoding.EncodeToString(r.Value)
			fr.ValueB64 = &s
		}
	}
	if len(r.Headers) > 0 {
		fr.Headers = map[string]string{}
		for _, h := range r.Headers {
			fr.Headers[h.Key] = string(h.Value)
		}
	}
	return fr
}

func hdrs(kv ...string) []recordbatch.RecordHeader {
	var h []recordbatch.RecordHeader
	for i := 0; i < len(kv); i += 2 {
		h = append(h, recordbatch.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return h
}

// requestCases are records with every kind of attribute a request is made
// from.
func requestCases() []recordbatch.Record {
	return []recordbatch.Record{
		{Offset: 0, Timestamp: 1700000000123, Value: []byte(`{"n":0}`)},
		{Offset: 1, Timestamp: 1700000000124, Key: []byte("user-1"), Value: []byte{0, 1, 0xff}},
		{Offset: 2, Timestamp: 1, Value: []byte("hello world"), Headers: hdrs("ce_id", "e-2", "ce_source", "/s <x>", "ce_type", "com.example.note",
			"ce_time", "2026-01-02T03:04:05Z", "ce_subject", "Euro € 😀 \"q\"", "ce_datacontenttype", "text/plain", "ce_specversion", "0.3")},
		{Offset: 3, Timestamp: 2, Value: []byte(`{ "a" : "<b>" }`), Headers: hdrs("Content-Type", "application/json", "traceparent", "00-ab-cd-01",
			"X-Bad", "not an attribute name", "ce_foo", "first", "ce_foo", "second")},
		{Offset: 4, Timestamp: 3, Key: []byte("k"), Headers: hdrs("ce_partitionkey", "pk")},
		{Offset: 5, Timestamp: 4, Key: []byte{0xff}, Value: []byte(`"a JSON string"`), Headers: hdrs("ce_data", "from a header")},
		{Offset: 6, Timestamp: 5, Value: []byte("not json"), Headers: hdrs("ce_data", "from a header", "ce_datacontenttype", "application/json")},
		{Offset: 7, Timestamp: 6, Value: []byte{}, Headers: hdrs("content-type", "text/x-empty")},
	}
}

// referenceEvent is the structured event of a record as the format
// defines it: a map of its attributes, its data inline when JSON, as
// base64 otherwise, as encoding/json writes it.
func referenceEvent(cluster, defaultType string, tp api.TopicPartition, r *recordbatch.Record) map[string]any {
	ev := map[string]any{"specversion": "1.0"}
	var id, source, typ, tm, ct string
	ext := map[string]string{}
	for _, hd := range r.Headers {
		name, isCE := strings.CutPrefix(strings.ToLower(hd.Key), "ce_")
		v := string(hd.Value)
		switch {
		case !isCE:
			if strings.EqualFold(hd.Key, "content-type") && ct == "" {
				ct = v
			} else if validAttributeName(name) && !reservedAttribute(name) {
				ext[name] = v
			}
		case name == "id":
			id = v
		case name == "source":
			source = v
		case name == "type":
			typ = v
		case name == "time":
			tm = v
		case name == "datacontenttype":
			ct = v
		case name == "specversion":
		case validAttributeName(name):
			ext[name] = v
		}
	}
	if id == "" {
		id = tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) + "-" + strconv.FormatInt(r.Offset, 10)
	}
	if source == "" {
		source = "sluice://" + cluster + "/topics/" + tp.Topic
	}
	if typ == "" {
		typ = defaultType
	}
	if tm == "" {
		tm = time.UnixMilli(r.Timestamp).UTC().Format(time.RFC3339Nano)
	}
	if ct == "" && r.Value != nil {
		ct = "application/octet-stream"
		if json.Valid(r.Value) {
			ct = "application/json"
		}
	}
	if _, ok := ext["partitionkey"]; !ok && r.Key != nil && utf8.Valid(r.Key) {
		ext["partitionkey"] = string(r.Key)
	}
	ev["id"], ev["source"], ev["type"], ev["time"] = id, source, typ, tm
	for k, v := range ext {
		ev[k] = v
	}
	if r.Value != nil {
		ev["datacontenttype"] = ct
		if isJSONType(ct) && json.Valid(r.Value) {
			ev["data"] = json.RawMessage(r.Value)
		} else {
			ev["data_base64"] = base64.StdEncoding.EncodeToString(r.Value)
		}
	}
	return ev
}

// decodeSame fails unless got and want decode to the same JSON value.
func decodeSame(t *testing.T, what string, got []byte, want any) {
	t.Helper()
	wb, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", what, err, got)
	}
	if err := json.Unmarshal(wb, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, wb)
	}
}

func testBuilder(t testing.TB, cfg api.PushConfig) *requestBuilder {
	t.Helper()
	sign, err := newSigner([]Secret{{Key: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Endpoint, cfg.Type = "fn", "http://127.0.0.1:9/hook?x=1", "sluice.record"
	if cfg.Batch.MaxRecords == 0 {
		cfg.Batch.MaxRecords = 1
	}
	return &requestBuilder{cfg: cfg, cluster: "c1", sign: sign, render: testRender}
}

func buildBody(t *testing.T, b *requestBuilder, d *delivery) (*http.Request, []byte) {
	t.Helper()
	req, err := b.build(context.Background(), d, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != int64(len(body)) {
		t.Fatalf("Content-Length %d for a body of %d bytes", req.ContentLength, len(body))
	}
	rb, _ := req.GetBody()
	again, _ := io.ReadAll(rb)
	if !bytes.Equal(again, body) {
		t.Fatalf("GetBody reads %q, the body is %q", again, body)
	}
	if req.Method != http.MethodPost || req.URL.String() != b.cfg.Endpoint || req.Host != "127.0.0.1:9" {
		t.Fatalf("request %s %s host %s", req.Method, req.URL, req.Host)
	}
	if got, want := req.Header.Get(HeaderWebhookSignature), b.sign.sign(req.Header.Get(HeaderWebhookID), time.Unix(1700000000, 0), body); got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
	return req, body
}

// Structured events, and batches of events, are the JSON of the map the
// format defines, and the official SDK reads a structured event and the
// same record in binary mode as the same event.
func TestStructuredEventsAndBatches(t *testing.T) {
	tp := api.TopicPartition{Topic: "orders", Partition: 3}
	recs := requestCases()
	structured := testBuilder(t, api.PushConfig{Format: api.PushFormatStructured})
	binary := testBuilder(t, api.PushConfig{Format: api.PushFormatBinary})
	var all []any
	var ptrs []*recordbatch.Record
	for i := range recs {
		r := &recs[i]
		ptrs = append(ptrs, r)
		want := referenceEvent("c1", "sluice.record", tp, r)
		all = append(all, want)
		sreq, body := buildBody(t, structured, &delivery{tp: tp, recs: []*recordbatch.Record{r}, attempt: 1})
		decodeSame(t, "structured offset "+strconv.FormatInt(r.Offset, 10), body, want)
		if ct := sreq.Header.Get("Content-Type"); ct != ContentTypeCloudEvent {
			t.Fatalf("structured Content-Type %q", ct)
		}
		if _, dup := want["data_base64"]; dup && want["data"] != nil {
			continue // data from a header beside data_base64: not an event the SDK reads
		}
		sreq.Body = io.NopCloser(bytes.NewReader(body))
		sev, err := cehttp.NewEventFromHTTPRequest(sreq)
		if err != nil {
			t.Fatalf("offset %d: the SDK does not read the structured event: %v", r.Offset, err)
		}
		breq, bbody := buildBody(t, binary, &delivery{tp: tp, recs: []*recordbatch.Record{r}, attempt: 1})
		breq.Body = io.NopCloser(bytes.NewReader(bbody))
		bev, err := cehttp.NewEventFromHTTPRequest(breq)
		if err != nil {
			t.Fatalf("offset %d: the SDK does not read the binary event: %v", r.Offset, err)
		}
		if err := sev.Validate(); err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if sev.ID() != bev.ID() || sev.Source() != bev.Source() || sev.Type() != bev.Type() || !sev.Time().Equal(bev.Time()) ||
			sev.DataContentType() != bev.DataContentType() || !bytes.Equal(sev.Data(), bev.Data()) ||
			(r.Offset != 2 && r.Offset != 5 && !reflect.DeepEqual(sev.Extensions(), bev.Extensions())) {
			// (binary mode percent-encodes offset 2's subject; offset 5's ce_data is data in a structured event, an extension in binary mode)
			t.Fatalf("offset %d: structured\n%s\nbinary\n%s", r.Offset, sev, bev)
		}
	}
	batch := testBuilder(t, api.PushConfig{Format: api.PushFormatStructured, Batch: api.PushBatch{MaxRecords: 10}})
	req, body := buildBody(t, batch, &delivery{tp: tp, recs: ptrs, attempt: 2, fence: 7})
	decodeSame(t, "structured batch", body, all)
	if req.Header.Get("Content-Type") != ContentTypeCloudEventBatch || req.Header.Get(HeaderLast) != "7" ||
		req.Header.Get(HeaderAttempt) != "2" || req.Header.Get(HeaderFence) != "7" {
		t.Fatalf("batch headers %v", req.Header)
	}
}

// The json format is a record as a group poll renders it, one or a batch.
func TestJSONBodies(t *testing.T) {
	tp := api.TopicPartition{Topic: "t<1>", Partition: 0}
	recs := requestCases()
	var want []api.GroupRecord
	var ptrs []*recordbatch.Record
	one := testBuilder(t, api.PushConfig{Format: api.PushFormatJSON})
	for i := range recs {
		gr := api.GroupRecord{Topic: tp.Topic, Partition: tp.Partition, FetchedRecord: testRender(&recs[i])}
		want = append(want, gr)
		ptrs = append(ptrs, &recs[i])
		_, body := buildBody(t, one, &delivery{tp: tp, recs: ptrs[i : i+1], attempt: 1})
		decodeSame(t, "json offset "+strconv.Itoa(i), body, gr)
	}
	batch := testBuilder(t, api.PushConfig{Format: api.PushFormatJSON, Batch: api.PushBatch{MaxRecords: 100}})
	req, body := buildBody(t, batch, &delivery{tp: tp, recs: ptrs, attempt: 1})
	decodeSame(t, "json batch", body, want)
	// A batch of one is an array too.
	_, body = buildBody(t, batch, &delivery{tp: tp, recs: ptrs[:1], attempt: 1})
	decodeSame(t, "json batch of one", body, want[:1])
	if req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("Content-Type %q", req.Header.Get("Content-Type"))
	}
}

// Binary mode's headers: the attributes as ce-*, percent-encoded where
// HTTP cannot carry them, the content type of the value; and the
// delivery's headers on every format.
func TestBinaryHeaders(t *testing.T) {
	tp := api.TopicPartition{Topic: "orders", Partition: 12}
	recs := requestCases()
	b := testBuilder(t, api.PushConfig{Format: api.PushFormatBinary})
	for _, c := range []struct {
		rec  int
		want map[string]string
	}{
		{0, map[string]string{"ce-id": "orders-12-0", "ce-source": "sluice://c1/topics/orders", "ce-type": "sluice.record",
			"ce-time": "2023-11-14T22:13:20.123Z", "ce-specversion": "1.0", "Content-Type": "application/json"}},
		{1, map[string]string{"Content-Type": "application/octet-stream", "ce-partitionkey": "user-1"}},
		{2, map[string]string{"ce-id": "e-2", "ce-source": "/s <x>", "ce-type": "com.example.note", "ce-time": "2026-01-02T03:04:05Z",
			"ce-subject": "Euro %E2%82%AC %F0%9F%98%80 %22q%22", "Content-Type": "text/plain", "ce-specversion": "1.0"}},
		{3, map[string]string{"Content-Type": "application/json", "ce-traceparent": "00-ab-cd-01", "ce-foo": "second", "ce-x-bad": ""}},
		{4, map[string]string{"Content-Type": "", "ce-partitionkey": "pk"}},
		{7, map[string]string{"Content-Type": "text/x-empty"}},
	} {
		r := &recs[c.rec]
		req, body := buildBody(t, b, &delivery{tp: tp, recs: []*recordbatch.Record{r}, attempt: 3, fence: 9})
		if !bytes.Equal(body, r.Value) {
			t.Fatalf("offset %d: body %q, value %q", r.Offset, body, r.Value)
		}
		for k, v := range c.want {
			if got := req.Header.Get(k); got != v {
				t.Errorf("offset %d: %s %q, want %q", r.Offset, k, got, v)
			}
		}
		for k, v := range map[string]string{HeaderWebhookID: "fn.orders.12." + strconv.FormatInt(r.Offset, 10), HeaderWebhookTimestamp: "1700000000",
			HeaderTopic: "orders", HeaderPartition: "12", HeaderOffset: strconv.FormatInt(r.Offset, 10), HeaderAttempt: "3", HeaderFence: "9",
			"User-Agent": "sluice-push/1", HeaderLast: ""} {
			if got := req.Header.Get(k); got != v {
				t.Errorf("offset %d: %s %q, want %q", r.Offset, k, got, v)
			}
		}
		for k, v := range req.Header {
			if len(v) != 1 {
				t.Errorf("offset %d: %s has %d values", r.Offset, k, len(v))
			}
		}
	}
	raw := testBuilder(t, api.PushConfig{Format: api.PushFormatRaw})
	req, body := buildBody(t, raw, &delivery{tp: tp, recs: []*recordbatch.Record{&recs[1]}, attempt: 1})
	if !bytes.Equal(body, recs[1].Value) || req.Header.Get("Content-Type") != "application/octet-stream" || req.Header.Get("ce-id") != "" {
		t.Fatalf("raw: %q %v", body, req.Header)
	}
	// A tombstone: no body at all.
	req, body = buildBody(t, b, &delivery{tp: tp, recs: []*recordbatch.Record{&recs[4]}, attempt: 1})
	if len(body) != 0 || req.Body != http.NoBody {
		t.Fatalf("tombstone body %q (%T)", body, req.Body)
	}
}

// BenchmarkBuild is the cost of a request: one record in binary mode (the
// default) and a batch of 100 in json: go test -bench Build ./push.
func BenchmarkBuild(b *testing.B) {
	tp := api.TopicPartition{Topic: "bench-push", Partition: 3}
	val := []byte(`"` + strings.Repeat("x", 98) + `"`)
	recs := make([]*recordbatch.Record, 100)
	for i := range recs {
		recs[i] = &recordbatch.Record{Offset: int64(1000 + i), Timestamp: 1700000000000 + int64(i), Value: val}
	}
	for _, c := range []struct {
		name string
		cfg  api.PushConfig
		n    int
	}{
		{"binary-1", api.PushConfig{Format: api.PushFormatBinary}, 1},
		{"structured-1", api.PushConfig{Format: api.PushFormatStructured}, 1},
		{"json-100", api.PushConfig{Format: api.PushFormatJSON, Batch: api.PushBatch{MaxRecords: 100}}, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			bl := testBuilder(b, c.cfg)
			d := &delivery{tp: tp, recs: recs[:c.n], attempt: 1, fence: 4}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bl.build(ctx, d, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
