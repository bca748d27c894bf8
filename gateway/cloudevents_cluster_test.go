package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// post sends body with the headers h (Content-Type among them).
func (c client) post(path string, h http.Header, body []byte) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest("POST", c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// recordsByID fetches every partition of topic from the start and returns
// its records by their ce_id header, with their partitions.
func (c client) recordsByID(topic string, partitions int) (map[string]api.FetchedRecord, map[string]int) {
	c.t.Helper()
	recs, parts := map[string]api.FetchedRecord{}, map[string]int{}
	for p := range partitions {
		for _, r := range c.fetch(topic, p, "offset=earliest").Records {
			id := r.Headers["ce_id"]
			if _, dup := recs[id]; dup || id == "" {
				c.t.Fatalf("partition %d offset %d: ce_id %q (a second record, or none)", p, r.Offset, id)
			}
			recs[id], parts[id] = r, p
		}
	}
	return recs, parts
}

// valueBytes is a fetched record's value as bytes, whichever way it came.
func valueBytes(t *testing.T, r api.FetchedRecord) []byte {
	t.Helper()
	if r.ValueB64 != nil {
		b, err := base64.StdEncoding.DecodeString(*r.ValueB64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return r.Value
}

// Events sent by the CloudEvents SDK's HTTP client, in binary mode (its
// default) and in structured mode, and a batch, become records with the
// attributes as ce_* headers, partitionkey as key, the data as value and
// time as timestamp; pushed in binary mode, each one comes back to an SDK
// receiver as the event it was.
func TestCloudEventsProduceAndPushBack(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{})
	c := client{t: t, base: tc.URL}
	c.createTopic("ce", 3)
	path := "/v1/topics/ce/records"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sdk, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(tc.URL + path))
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context, e cloudevents.Event) {
		t.Helper()
		res := sdk.Send(ctx, e)
		var hr *cehttp.Result
		if !cloudevents.IsACK(res) || !errors.As(res, &hr) || hr.StatusCode != 200 {
			t.Fatalf("send %s: %v", e.ID(), res)
		}
	}
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	var sent []cloudevents.Event

	bin := cloudevents.NewEvent()
	bin.SetID("bin-1")
	bin.SetSource("https://example.com/orders")
	bin.SetType("com.example.order.created")
	bin.SetTime(at)
	bin.SetSubject("order 1")
	bin.SetDataSchema("https://example.com/order.json")
	bin.SetExtension("partitionkey", "user-1")
	bin.SetExtension("comexample", "x y")
	bin.SetExtension("count", 7)
	if err := bin.SetData(cloudevents.ApplicationJSON, map[string]any{"total": 42}); err != nil {
		t.Fatal(err)
	}
	send(ctx, bin)
	sent = append(sent, bin)

	text := cloudevents.NewEvent()
	text.SetID("str-1")
	text.SetSource("/orders")
	text.SetType("com.example.note")
	text.SetTime(at.Add(time.Second))
	if err := text.SetData(cloudevents.TextPlain, "hello world"); err != nil {
		t.Fatal(err)
	}
	send(cloudevents.WithEncodingStructured(ctx), text)
	sent = append(sent, text)

	raw := cloudevents.NewEvent()
	raw.SetID("str-2")
	raw.SetSource("/orders")
	raw.SetType("com.example.blob")
	raw.SetExtension("partitionkey", "user-2")
	if err := raw.SetData("application/octet-stream", []byte{0, 1, 2, 0xff}); err != nil {
		t.Fatal(err)
	}
	send(cloudevents.WithEncodingStructured(ctx), raw)
	sent = append(sent, raw)

	// A batch, by hand: in order, to the partition of its key.
	batch := `[
		{"specversion":"1.0","id":"batch-0","source":"/b","type":"t","partitionkey":"user-3","data":{"n": 0}},
		{"specversion":"1.0","id":"batch-1","source":"/b","type":"t","partitionkey":"user-3","time":"` + at.Format(time.RFC3339Nano) + `",
		 "datacontenttype":"application/json","data":"a JSON string"},
		{"specversion":"1.0","id":"batch-2","source":"/b","type":"t","partitionkey":"user-3","datacontenttype":"image/png","data_base64":"iVBORw0KGgo="}
	]`
	var batchEvents []cloudevents.Event
	if err := json.Unmarshal([]byte(batch), &batchEvents); err != nil {
		t.Fatal(err)
	}
	sent = append(sent, batchEvents...)
	status, _, b := c.do("POST", path+"?acks=all", "application/cloudevents-batch+json", []byte(batch))
	if status != 200 {
		t.Fatalf("batch: %d %s", status, b)
	}
	var pr api.ProduceResponse
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	keyed := int32(api.KeyPartition([]byte("user-3"), 3))
	if len(pr.Offsets) != 3 || pr.Offsets[0].Partition != keyed || pr.Offsets[1] != (api.RecordOffset{Partition: keyed, Offset: pr.Offsets[0].Offset + 1}) ||
		pr.Offsets[2] != (api.RecordOffset{Partition: keyed, Offset: pr.Offsets[0].Offset + 2}) {
		t.Fatalf("batch offsets %+v, want three in a row in partition %d", pr.Offsets, keyed)
	}

	// Binary mode by hand: header values percent-encoded and quoted, as
	// the binding allows; no data.
	h := http.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", "hand-1")
	h.Set("ce-source", "/hand")
	h.Set("ce-type", "t")
	h.Set("ce-subject", "Euro%20%E2%82%AC%20%F0%9F%98%80")
	h.Set("ce-comexample", `"a \"quoted\" value"`)
	before := time.Now().UnixMilli()
	if status, _, b := c.post(path, h, nil); status != 200 {
		t.Fatalf("binary by hand: %d %s", status, b)
	}
	after := time.Now().UnixMilli()

	recs, parts := c.recordsByID("ce", 3)
	if len(recs) != 7 {
		t.Fatalf("%d records: %v", len(recs), recs)
	}
	r := recs["bin-1"]
	wantHeaders := map[string]string{
		"ce_specversion": "1.0", "ce_id": "bin-1", "ce_source": "https://example.com/orders", "ce_type": "com.example.order.created",
		"ce_time": at.Format(time.RFC3339Nano), "ce_subject": "order 1", "ce_dataschema": "https://example.com/order.json",
		"ce_partitionkey": "user-1", "ce_comexample": "x y", "ce_count": "7", "ce_datacontenttype": "application/json",
	}
	if fmt.Sprint(r.Headers) != fmt.Sprint(wantHeaders) {
		t.Errorf("bin-1 headers %v\nwant          %v", r.Headers, wantHeaders)
	}
	if r.Key == nil || *r.Key != "user-1" || parts["bin-1"] != api.KeyPartition([]byte("user-1"), 3) || string(r.Value) != `{"total":42}` || r.Timestamp != at.UnixMilli() {
		t.Errorf("bin-1: key %v partition %d value %s timestamp %d (want %d)", r.Key, parts["bin-1"], r.Value, r.Timestamp, at.UnixMilli())
	}
	r = recs["str-1"]
	if r.Key != nil || string(valueBytes(t, r)) != "hello world" || r.Headers["ce_datacontenttype"] != "text/plain" || r.Timestamp != at.Add(time.Second).UnixMilli() ||
		r.Headers["ce_type"] != "com.example.note" || len(r.Headers) != 6 {
		t.Errorf("str-1: %+v, value %q", r, valueBytes(t, r))
	}
	r = recs["str-2"]
	if r.Key == nil || *r.Key != "user-2" || !bytes.Equal(valueBytes(t, r), []byte{0, 1, 2, 0xff}) || r.Headers["ce_partitionkey"] != "user-2" {
		t.Errorf("str-2: %+v, value %q", r, valueBytes(t, r))
	}
	if r := recs["batch-0"]; string(r.Value) != `{"n":0}` || r.Headers["ce_datacontenttype"] != "" || *r.Key != "user-3" {
		t.Errorf("batch-0: %+v, value %s", r, r.Value)
	}
	if r := recs["batch-1"]; string(r.Value) != `"a JSON string"` || r.Timestamp != at.UnixMilli() {
		t.Errorf("batch-1: %+v, value %s", r, r.Value)
	}
	if r := recs["batch-2"]; !bytes.HasPrefix(valueBytes(t, r), []byte("\x89PNG")) {
		t.Errorf("batch-2: %+v", r)
	}
	r = recs["hand-1"]
	if r.Headers["ce_subject"] != "Euro € 😀" || r.Headers["ce_comexample"] != `a "quoted" value` || r.Value != nil || r.ValueB64 != nil ||
		r.Timestamp < before || r.Timestamp > after {
		t.Errorf("hand-1: %+v (timestamp within %d..%d)", r, before, after)
	}

	// Pushed in binary mode to an SDK receiver: the same events.
	type got struct {
		ev  *cloudevents.Event
		raw http.Header
	}
	var mu sync.Mutex
	received := map[string]got{}
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(req)
		if err != nil {
			t.Errorf("a push the SDK does not read as an event: %v", err)
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		received[ev.ID()] = got{ev, req.Header.Clone()}
		mu.Unlock()
	}))
	defer ep.Close()
	c.json("POST", "/v1/push", api.PushConfig{Name: "ceback", Topics: []string{"ce"}, Endpoint: ep.URL, Format: api.PushFormatBinary}, nil)
	waitUntil(t, time.Minute, "every record pushed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == 7
	})
	mu.Lock()
	defer mu.Unlock()
	for _, want := range sent {
		g, ok := received[want.ID()]
		if !ok {
			t.Errorf("%s was not pushed", want.ID())
			continue
		}
		ev := g.ev
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", want.ID(), err)
		}
		wantCT := want.DataContentType()
		if wantCT == "" { // the JSON format's implied type, made explicit
			wantCT = cloudevents.ApplicationJSON
		}
		if ev.Source() != want.Source() || ev.Type() != want.Type() || ev.Subject() != want.Subject() || ev.DataSchema() != want.DataSchema() ||
			ev.DataContentType() != wantCT || !sameData(ev.Data(), want.Data(), strings.HasSuffix(wantCT, "json")) {
			t.Errorf("pushed %s:\n%s\nproduced:\n%s", want.ID(), ev, want)
		}
		if !want.Time().IsZero() && !ev.Time().Equal(want.Time()) {
			t.Errorf("%s: time %s, produced %s", want.ID(), ev.Time(), want.Time())
		}
		if ceExtensions(t, ev) != ceExtensions(t, &want) {
			t.Errorf("%s: extensions %s, produced %s", want.ID(), ceExtensions(t, ev), ceExtensions(t, &want))
		}
	}
	// The SDK does not percent-decode; a receiver that follows the binding
	// gets the subject back.
	if s, err := url.PathUnescape(received["hand-1"].raw.Get("ce-subject")); err != nil || s != "Euro € 😀" {
		t.Errorf("hand-1: ce-subject %q decodes to %q, %v", received["hand-1"].raw.Get("ce-subject"), s, err)
	}
}

// ceExtensions renders an event's extension attributes in their
// canonical string forms, sorted.
func ceExtensions(t *testing.T, e *cloudevents.Event) string {
	t.Helper()
	var out []string
	for k, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k+"="+s)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// sameData compares event data, JSON data as compact JSON (the record
// keeps it compact).
func sameData(a, b []byte, isJSON bool) bool {
	if isJSON {
		var ca, cb bytes.Buffer
		if json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil {
			return bytes.Equal(ca.Bytes(), cb.Bytes())
		}
	}
	return bytes.Equal(a, b)
}

// Bad events are refused with stable codes, before anything is written;
// the limits of a JSON produce bound CloudEvents too.
func TestCloudEventsRefused(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{TuneGateway: func(o *gateway.Options) {
		o.MaxBodyBytes = 64 << 10
		o.Limits.MaxRecordsPerRequest = 5
		o.Limits.MaxHeadersPerRecord = 8
	}})
	c := client{t: t, base: tc.URL}
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "ce", Partitions: 1, Configs: map[string]string{"max.message.bytes": "4096"}}, nil)
	path := "/v1/topics/ce/records"
	ev := func(extra string) string {
		return `{"specversion":"1.0","id":"e1","source":"/s","type":"t"` + extra + `}`
	}
	binary := func(change func(http.Header)) http.Header {
		h := http.Header{}
		h.Set("ce-specversion", "1.0")
		h.Set("ce-id", "e1")
		h.Set("ce-source", "/s")
		h.Set("ce-type", "t")
		h.Set("Content-Type", "text/plain")
		change(h)
		return h
	}
	structured := func(ctype string) http.Header { return http.Header{"Content-Type": {ctype}} }
	const one, many = "application/cloudevents+json", "application/cloudevents-batch+json"
	batch := func(n int) []byte {
		var evs []string
		for range n {
			evs = append(evs, ev(""))
		}
		return []byte("[" + strings.Join(evs, ",") + "]")
	}
	future := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name   string
		h      http.Header
		body   []byte
		status int
		code   api.Code
		says   string
	}{
		{"structured, no id", structured(one), []byte(`{"specversion":"1.0","source":"/s","type":"t"}`), 400, api.CodeInvalidRecord, `"id"`},
		{"structured, specversion 0.3", structured(one), []byte(`{"specversion":"0.3","id":"e1","source":"/s","type":"t"}`), 400, api.CodeInvalidRecord, "specversion"},
		{"structured, a bad attribute name", structured(one), []byte(ev(`,"Bad-Name":"x"`)), 400, api.CodeInvalidRecord, `"Bad-Name"`},
		{"structured, data_base64 not base64", structured(one), []byte(ev(`,"data_base64":"not base64!"`)), 400, api.CodeInvalidRecord, "data_base64"},
		{"structured, a bad time", structured(one), []byte(ev(`,"time":"2026-13-01T00:00:00Z"`)), 400, api.CodeInvalidRecord, "time"},
		{"structured, a time past the topic's window", structured(one), []byte(ev(`,"time":"` + future + `"`)), 400, api.CodeInvalidTimestamp, "ahead"},
		{"structured, more attributes than headers", structured(one), []byte(ev(`,"a":"1","b":"2","c":"3","d":"4","e":"5"`)), 400, api.CodeInvalidRecord, api.LimitMaxHeadersPerRecord},
		{"structured, a record past max.message.bytes", structured(one), []byte(ev(`,"data":"` + strings.Repeat("x", 5000) + `"`)), 413, api.CodeRecordTooLarge, "max.message.bytes"},
		{"structured, a body past max.request.bytes", structured(one), []byte(ev(`,"data":"` + strings.Repeat("x", 70<<10) + `"`)), 413, api.CodeRequestTooLarge, "body"},
		{"batch, one bad event", structured(many), []byte(`[` + ev("") + `,{"specversion":"1.0","id":"e2","type":"t"}]`), 400, api.CodeInvalidRecord, `event 1: missing required attribute "source"`},
		{"batch, past max.records.per.request", structured(many), batch(6), 413, api.CodeTooManyRecords, api.LimitMaxRecordsPerRequest},
		{"binary, no id", binary(func(h http.Header) { h.Del("ce-id") }), []byte("x"), 400, api.CodeInvalidRecord, `"id"`},
		{"binary, no specversion", binary(func(h http.Header) { h.Del("ce-specversion") }), []byte("x"), 400, api.CodeInvalidRecord, `"specversion"`},
		{"binary, specversion 0.3", binary(func(h http.Header) { h.Set("ce-specversion", "0.3") }), []byte("x"), 400, api.CodeInvalidRecord, "specversion"},
		{"binary, a bad attribute name", binary(func(h http.Header) { h.Set("ce-my-ext", "x") }), []byte("x"), 400, api.CodeInvalidRecord, `"my-ext"`},
		{"binary, a name past 20 characters", binary(func(h http.Header) { h.Set("ce-abcdefghijklmnopqrstu", "x") }), []byte("x"), 400, api.CodeInvalidRecord, "abcdefghijklmnopqrstu"},
		{"binary, a bad percent-encoding", binary(func(h http.Header) { h.Set("ce-subject", "100%") }), []byte("x"), 400, api.CodeInvalidRecord, "Ce-Subject"},
		{"binary, a body past max.message.bytes", binary(func(http.Header) {}), bytes.Repeat([]byte("x"), 5000), 413, api.CodeRecordTooLarge, "4096"},
		{"no media type, no ce-* header", http.Header{}, []byte(ev("")), 415, api.CodeUnsupportedMediaType, "application/cloudevents+json"},
		{"text/plain, no ce-* header", structured("text/plain"), []byte(ev("")), 415, api.CodeUnsupportedMediaType, "application/cloudevents-batch+json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, b := c.post(path, tt.h, tt.body)
			wantError(t, status, h, b, tt.status, tt.code)
			var eb api.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || !strings.Contains(eb.Error.Message, tt.says) {
				t.Fatalf("message %q does not say %s", eb.Error.Message, tt.says)
			}
		})
	}
	if res := c.fetch("ce", 0, "offset=earliest"); res.HighWatermark != 0 || len(res.Records) != 0 {
		t.Fatalf("refused events were written: hw %d, %d records", res.HighWatermark, len(res.Records))
	}
	// At the limits: five events, eight attributes, a record of 4096 bytes.
	if status, _, b := c.post(path, structured(many), batch(5)); status != 200 {
		t.Fatalf("a batch of max.records.per.request events: %d %s", status, b)
	}
	if status, _, b := c.post(path, structured(one), []byte(ev(`,"a":"1","b":"2","c":"3","d":"4"`))); status != 200 {
		t.Fatalf("max.headers.per.record attributes: %d %s", status, b)
	}
	h := binary(func(h http.Header) { h.Del("Content-Type") })
	size := 4096 - len("ce_specversion1.0ce_ide1ce_source/sce_typet")
	if status, _, b := c.post(path, h, bytes.Repeat([]byte("x"), size)); status != 200 {
		t.Fatalf("a binary event of max.message.bytes: %d %s", status, b)
	}
	status, rh, b := c.post(path, h, bytes.Repeat([]byte("x"), size+1))
	wantError(t, status, rh, b, 413, api.CodeRecordTooLarge)
	if res := c.fetch("ce", 0, "offset=earliest"); res.HighWatermark != 7 {
		t.Fatalf("hw %d after 7 accepted events", res.HighWatermark)
	}
}
