package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

func ceLimits() *parseLimits {
	return &parseLimits{maxRecords: 100, maxHeaders: 20, mem: &reservation{b: &memBudget{limit: 64 << 20}}}
}

// headerString renders a record's headers as name=value pairs in order.
func headerString(hs []recordbatch.RecordHeader) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", h.Key, h.Value)
	}
	return b.String()
}

const ceMin = `"specversion":"1.0","id":"e1","source":"/src","type":"t"`
const ceMinHeaders = "ce_id=e1 ce_source=/src ce_specversion=1.0 ce_type=t"

func TestParseCloudEvent(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	tests := []struct {
		name    string
		body    string
		headers string
		key     *string
		value   *string // nil: a null value
		ts      int64
	}{
		{"minimal", `{` + ceMin + `}`, ceMinHeaders, nil, nil, 0},
		{"every attribute",
			`{` + ceMin + `,"time":"2026-01-02T03:04:05.678Z","subject":"s 1","datacontenttype":"application/json","dataschema":"https://example.com/s.json",` +
				`"partitionkey":"user-1","comexample":"x","num":-5,"flag":true,"off":false,"unset":null,"data":{"a": [1, 2]}}`,
			"ce_comexample=x ce_datacontenttype=application/json ce_dataschema=https://example.com/s.json ce_flag=true ce_id=e1 ce_num=-5 ce_off=false " +
				"ce_partitionkey=user-1 ce_source=/src ce_specversion=1.0 ce_subject=s 1 ce_time=2026-01-02T03:04:05.678Z ce_type=t",
			ptr("user-1"), ptr(`{"a":[1,2]}`), at.UnixMilli()},
		{"a JSON string without datacontenttype keeps its quotes", `{` + ceMin + `,"data":"hi"}`, ceMinHeaders, nil, ptr(`"hi"`), 0},
		{"a JSON string of a +json type keeps its quotes", `{` + ceMin + `,"datacontenttype":"application/vnd.x+json; charset=utf-8","data":"hi"}`,
			"ce_datacontenttype=application/vnd.x+json; charset=utf-8 " + ceMinHeaders, nil, ptr(`"hi"`), 0},
		{"a string of another type is its characters", `{` + ceMin + `,"datacontenttype":"application/xml","data":"<much wow=\"xml\"/>\u00e9"}`,
			"ce_datacontenttype=application/xml " + ceMinHeaders, nil, ptr(`<much wow="xml"/>é`), 0},
		{"data_base64", `{` + ceMin + `,"datacontenttype":"application/octet-stream","data_base64":"AAEC/w=="}`,
			"ce_datacontenttype=application/octet-stream " + ceMinHeaders, nil, ptr("\x00\x01\x02\xff"), 0},
		{"null data is the JSON null", `{` + ceMin + `,"data":null}`, ceMinHeaders, nil, ptr("null"), 0},
		{"null data_base64 is no data", `{` + ceMin + `,"data_base64":null}`, ceMinHeaders, nil, nil, 0},
		{"an escaped member name", `{"specversion":"1.0","\u0069d":"e1","source":"/src","type":"t"}`, ceMinHeaders, nil, nil, 0},
		{"a time before 1970 leaves the timestamp to the clock", `{` + ceMin + `,"time":"1969-07-20T20:17:40Z"}`,
			"ce_id=e1 ce_source=/src ce_specversion=1.0 ce_time=1969-07-20T20:17:40Z ce_type=t", nil, nil, 0},
		{"a numeric partitionkey", `{` + ceMin + `,"partitionkey":42}`, "ce_id=e1 ce_partitionkey=42 ce_source=/src ce_specversion=1.0 ce_type=t", ptr("42"), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := parseCloudEvent([]byte(tt.body), ceLimits())
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			r := recs[0]
			if got := headerString(r.headers); got != tt.headers {
				t.Errorf("headers %q\nwant    %q", got, tt.headers)
			}
			if (r.key == nil) != (tt.key == nil) || tt.key != nil && string(r.key) != *tt.key {
				t.Errorf("key %q, want %v", r.key, tt.key)
			}
			if (r.value == nil) != (tt.value == nil) || tt.value != nil && string(r.value) != *tt.value {
				t.Errorf("value %q (nil %t), want %v", r.value, r.value == nil, tt.value)
			}
			if r.timestamp != tt.ts || r.partition != -1 {
				t.Errorf("timestamp %d partition %d, want %d -1", r.timestamp, r.partition, tt.ts)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestParseCloudEventRefused(t *testing.T) {
	tests := []struct {
		name, body string
		code       api.Code
		says       string // in the message
	}{
		{"not an object", `[{` + ceMin + `}]`, api.CodeInvalidRequest, "one JSON object"},
		{"bad JSON", `{` + ceMin + `,}`, api.CodeInvalidRequest, "invalid JSON"},
		{"data after the event", `{` + ceMin + `} {}`, api.CodeInvalidRequest, "after the JSON value"},
		{"no specversion", `{"id":"e1","source":"/src","type":"t"}`, api.CodeInvalidRecord, `"specversion"`},
		{"specversion 0.3", `{"specversion":"0.3","id":"e1","source":"/src","type":"t"}`, api.CodeInvalidRecord, `specversion "0.3"`},
		{"specversion a number", `{"specversion":1.0,"id":"e1","source":"/src","type":"t"}`, api.CodeInvalidRecord, `"specversion" must be a string`},
		{"no id", `{"specversion":"1.0","source":"/src","type":"t"}`, api.CodeInvalidRecord, `"id"`},
		{"null id", `{"specversion":"1.0","id":null,"source":"/src","type":"t"}`, api.CodeInvalidRecord, `"id"`},
		{"empty id", `{"specversion":"1.0","id":"","source":"/src","type":"t"}`, api.CodeInvalidRecord, `"id" must not be empty`},
		{"no source", `{"specversion":"1.0","id":"e1","type":"t"}`, api.CodeInvalidRecord, `"source"`},
		{"no type", `{"specversion":"1.0","id":"e1","source":"/src"}`, api.CodeInvalidRecord, `"type"`},
		{"source not a URI-reference", `{` + strings.Replace(ceMin, `"/src"`, `"%zz"`, 1) + `}`, api.CodeInvalidRecord, "source"},
		{"upper-case attribute", `{` + ceMin + `,"MyExt":"x"}`, api.CodeInvalidRecord, `"MyExt"`},
		{"underscore in a name", `{` + ceMin + `,"my_ext":"x"}`, api.CodeInvalidRecord, `"my_ext"`},
		{"21-character name", `{` + ceMin + `,"abcdefghijklmnopqrstu":"x"}`, api.CodeInvalidRecord, "abcdefghijklmnopqrstu"},
		{"attribute twice", `{` + ceMin + `,"id":"e2"}`, api.CodeInvalidRecord, `"id" appears twice`},
		{"extension an object", `{` + ceMin + `,"ext":{}}`, api.CodeInvalidRecord, `"ext" must be a string, an integer or a boolean`},
		{"extension a fraction", `{` + ceMin + `,"ext":1.5}`, api.CodeInvalidRecord, "integer"},
		{"extension past int32", `{` + ceMin + `,"ext":2147483648}`, api.CodeInvalidRecord, "integer"},
		{"time not RFC 3339", `{` + ceMin + `,"time":"yesterday"}`, api.CodeInvalidRecord, `time "yesterday"`},
		{"empty subject", `{` + ceMin + `,"subject":""}`, api.CodeInvalidRecord, "subject"},
		{"relative dataschema", `{` + ceMin + `,"dataschema":"/s.json"}`, api.CodeInvalidRecord, "dataschema"},
		{"bad datacontenttype", `{` + ceMin + `,"datacontenttype":"not a type"}`, api.CodeInvalidRecord, "datacontenttype"},
		{"data_base64 not base64", `{` + ceMin + `,"data_base64":"@@@"}`, api.CodeInvalidRecord, "data_base64 is not base64"},
		{"data_base64 not a string", `{` + ceMin + `,"data_base64":12}`, api.CodeInvalidRecord, "data_base64 must be a string"},
		{"data and data_base64", `{` + ceMin + `,"data":1,"data_base64":"AA=="}`, api.CodeInvalidRecord, "both data and data_base64"},
		{"data twice", `{` + ceMin + `,"data":1,"data":2}`, api.CodeInvalidRecord, `"data" appears twice`},
		{"non-string data of a non-JSON type", `{` + ceMin + `,"datacontenttype":"text/plain","data":{"a":1}}`, api.CodeInvalidRecord, "data must be a string"},
		{"too many attributes", `{` + ceMin + extensions(17) + `}`, api.CodeInvalidRecord, api.LimitMaxHeadersPerRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseCloudEvent([]byte(tt.body), ceLimits())
			e := api.Classify(err)
			if err == nil || e.Code != tt.code || !strings.Contains(e.Message, tt.says) {
				t.Fatalf("got %v, want %s saying %s", err, tt.code, tt.says)
			}
		})
	}
	// At the header bound exactly: 4 required attributes and 16 extensions.
	if _, err := parseCloudEvent([]byte(`{`+ceMin+extensions(16)+`}`), ceLimits()); err != nil {
		t.Fatalf("20 attributes, max.headers.per.record 20: %v", err)
	}
}

// extensions is n extension members, each with a leading comma.
func extensions(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `,"x%d":"v"`, i)
	}
	return b.String()
}

func TestParseCloudEventBatch(t *testing.T) {
	ev := func(id string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/s","type":"t","data":"` + id + `"}`
	}
	recs, err := parseCloudEventBatch([]byte("[\n "+ev("a")+",\n "+ev("b")+", "+ev("c")+"\n]"), ceLimits())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, string(r.value))
	}
	if got := strings.Join(ids, " "); got != `"a" "b" "c"` {
		t.Fatalf("values in order %s", got)
	}
	tests := []struct {
		name, body string
		limit      int
		code       api.Code
		says       string
	}{
		{"an object", ev("a"), 100, api.CodeInvalidRequest, "JSON array"},
		{"empty", `[]`, 100, api.CodeInvalidRequest, "no events"},
		{"not an object", `[` + ev("a") + `,"b"]`, 100, api.CodeInvalidRecord, "event 1 is not a JSON object"},
		{"a bad event is named by its index", `[` + ev("a") + `,` + ev("b") + `,{"specversion":"1.0","source":"/s","type":"t"}]`, 100, api.CodeInvalidRecord, `event 2: missing required attribute "id"`},
		{"past max.records.per.request", `[` + ev("a") + `,` + ev("b") + `,` + ev("c") + `]`, 2, api.CodeTooManyRecords, api.LimitMaxRecordsPerRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := ceLimits()
			lim.maxRecords = tt.limit
			_, err := parseCloudEventBatch([]byte(tt.body), lim)
			e := api.Classify(err)
			if err == nil || e.Code != tt.code || !strings.Contains(e.Message, tt.says) {
				t.Fatalf("got %v, want %s saying %s", err, tt.code, tt.says)
			}
		})
	}
	t.Run("at max.records.per.request", func(t *testing.T) {
		lim := ceLimits()
		lim.maxRecords = 3
		if recs, err := parseCloudEventBatch([]byte(`[`+ev("a")+`,`+ev("b")+`,`+ev("c")+`]`), lim); err != nil || len(recs) != 3 {
			t.Fatalf("%d records, %v", len(recs), err)
		}
	})
}

// The scan of events charges the request's budget as a JSON produce's
// does, and stops when it is spent.
func TestCloudEventScanChargesBudget(t *testing.T) {
	ev := `{"specversion":"1.0","id":"e","source":"/s","type":"t"}`
	body := []byte(`[` + strings.Repeat(ev+`,`, 9999) + ev + `]`)
	lim := &parseLimits{maxRecords: 100_000, maxHeaders: 10, mem: &reservation{b: &memBudget{limit: 1 << 20}}}
	if _, err := parseCloudEventBatch(body, lim); code(err) != api.CodeRequestTooLarge {
		t.Fatalf("10,000 events against a 1 MiB budget: %v", err)
	}
	lim = &parseLimits{maxRecords: 100_000, maxHeaders: 10, mem: &reservation{b: &memBudget{limit: 64 << 20}}}
	recs, err := parseCloudEventBatch(body, lim)
	if err != nil {
		t.Fatal(err)
	}
	perHeader := 4*headerCost + int64(len("ce_specversion")+len("ce_id")+len("ce_source")+len("ce_type"))
	if want := int64(len(recs)) * (recordCost + perHeader); lim.mem.n != want {
		t.Fatalf("charged %d, want %d", lim.mem.n, want)
	}
	putPending(recs)
}

func TestBinaryCloudEvent(t *testing.T) {
	h := http.Header{}
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", "e1")
	h.Set("Ce-Source", "/src")
	h.Set("Ce-Type", "t")
	h.Set("Ce-Time", "2026-01-02T03:04:05Z")
	h.Set("Ce-Partitionkey", "user%201")
	h.Set("Ce-Comexample", `"quoted \"value\""`)
	h.Set("Ce-Euro", "Euro%20%e2%82%AC%20%F0%9F%98%80")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Accept", "*/*")
	if !isBinaryCloudEvent(h) || isBinaryCloudEvent(http.Header{"Content-Type": {"text/plain"}}) {
		t.Fatal("isBinaryCloudEvent")
	}
	lim := ceLimits()
	pr, err := binaryCloudEvent(h, lim)
	if err != nil {
		t.Fatal(err)
	}
	want := `ce_comexample=quoted "value" ce_datacontenttype=text/plain; charset=utf-8 ce_euro=Euro € 😀 ce_id=e1 ce_partitionkey=user 1 ` +
		`ce_source=/src ce_specversion=1.0 ce_time=2026-01-02T03:04:05Z ce_type=t`
	if got := headerString(pr.headers); got != want {
		t.Fatalf("headers %q\nwant    %q", got, want)
	}
	if string(pr.key) != "user 1" || pr.timestamp != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli() || pr.value != nil {
		t.Fatalf("key %q timestamp %d value %q", pr.key, pr.timestamp, pr.value)
	}
	if lim.mem.n == 0 || lim.owed != 0 {
		t.Fatalf("charged %d, owed %d", lim.mem.n, lim.owed)
	}

	tests := []struct {
		name   string
		change func(http.Header)
		says   string
	}{
		{"no specversion", func(h http.Header) { h.Del("Ce-Specversion") }, `"specversion"`},
		{"specversion 0.3", func(h http.Header) { h.Set("Ce-Specversion", "0.3") }, `specversion "0.3"`},
		{"no id", func(h http.Header) { h.Del("Ce-Id") }, `"id"`},
		{"no source", func(h http.Header) { h.Del("Ce-Source") }, `"source"`},
		{"no type", func(h http.Header) { h.Del("Ce-Type") }, `"type"`},
		{"a dash in a name", func(h http.Header) { h.Set("Ce-My-Ext", "x") }, `"my-ext"`},
		{"a long name", func(h http.Header) { h.Set("Ce-Abcdefghijklmnopqrstu", "x") }, `"abcdefghijklmnopqrstu"`},
		{"ce-datacontenttype", func(h http.Header) { h.Set("Ce-Datacontenttype", "text/plain") }, "Content-Type"},
		{"a header twice", func(h http.Header) { h.Add("Ce-Id", "e2") }, "Ce-Id appears 2 times"},
		{"a bad percent", func(h http.Header) { h.Set("Ce-Subject", "100%") }, "%"},
		{"an overlong encoding", func(h http.Header) { h.Set("Ce-Subject", "%C0%A0") }, "UTF-8"},
		{"a bad time", func(h http.Header) { h.Set("Ce-Time", "2026-01-02 03:04:05") }, "RFC 3339"},
		{"a bad Content-Type", func(h http.Header) { h.Set("Content-Type", "text/") }, "datacontenttype"},
		{"too many attributes", func(h http.Header) {
			for i := range 12 {
				h.Set(fmt.Sprintf("Ce-X%d", i), "v")
			}
		}, api.LimitMaxHeadersPerRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := h.Clone()
			tt.change(h)
			_, err := binaryCloudEvent(h, ceLimits())
			e := api.Classify(err)
			if err == nil || e.Code != api.CodeInvalidRecord || !strings.Contains(e.Message, tt.says) {
				t.Fatalf("got %v, want INVALID_RECORD saying %s", err, tt.says)
			}
		})
	}
}

func TestDecodeCEHeader(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"plain", "plain", true},
		{"a%20b%25", "a b%", true},
		{"%e2%82%ac", "€", true},
		{"€", "€", true},
		{`"a \"quoted\" \\ value"`, `a "quoted" \ value`, true},
		{`"a%20b"`, "a b", true},
		{`"`, `"`, true}, // one quote is not a quoted string
		{`"bad"quote"`, "", false},
		{`"trailing\"`, "", false},
		{"%", "", false},
		{"%2", "", false},
		{"%zz", "", false},
		{"%C0%A0", "", false},
		{"%FF", "", false},
		{"\xff", "", false},
	}
	for _, tt := range tests {
		got, err := decodeCEHeader(tt.in)
		if (err == nil) != tt.ok || tt.ok && string(got) != tt.want {
			t.Errorf("decodeCEHeader(%q) = %q, %v; want %q ok %t", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
