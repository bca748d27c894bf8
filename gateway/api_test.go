package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// client is a tiny HTTP helper bound to one gateway.
type client struct {
	t    *testing.T
	base string
}

func (c client) do(method, path, ctype string, body []byte) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// json sends v as JSON and decodes a 2xx answer into out.
func (c client) json(method, path string, v any, out any) {
	c.t.Helper()
	var body []byte
	if v != nil {
		body, _ = json.Marshal(v)
	}
	status, _, b := c.do(method, path, "application/json", body)
	if status/100 != 2 {
		c.t.Fatalf("%s %s: %d %s", method, path, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

func (c client) createTopic(name string, partitions int) {
	c.t.Helper()
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: name, Partitions: partitions}, nil)
}

func (c client) fetch(topic string, p int, query string) api.FetchResponse {
	c.t.Helper()
	var res api.FetchResponse
	c.json("GET", fmt.Sprintf("/v1/topics/%s/partitions/%d/records?%s", topic, p, query), nil, &res)
	return res
}

func newCluster(t *testing.T) client {
	c := embedtest.Start(t, embedtest.Options{})
	return client{t: t, base: c.URL}
}

func TestProduceFetchRoundTrip(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 3)
	body := `{"records":[
		{"key":"user-1","value":{"total":42,"items":["a","b"]},"headers":{"source":"web"}},
		{"value":"plain string","partition":1},
		{"value":[1,2,3],"partition":1},
		{"value":true,"partition":1},
		{"key_b64":"AP8=","value_b64":"AAECAw==","partition":0},
		{"key":7,"value":null,"partition":0},
		{"value":  { "spaced" :  1 } ,"partition":0}
	]}`
	status, _, b := c.do("POST", "/v1/topics/orders/records", "application/json", []byte(body))
	if status != 200 {
		t.Fatalf("produce: %d %s", status, b)
	}
	var pr api.ProduceResponse
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	keyed := int32(api.KeyPartition([]byte("user-1"), 3))
	want := []api.RecordOffset{{Partition: keyed, Offset: 0}, {Partition: 1, Offset: 0}, {Partition: 1, Offset: 1}, {Partition: 1, Offset: 2}, {Partition: 0, Offset: 0}, {Partition: 0, Offset: 1}, {Partition: 0, Offset: 2}}
	switch keyed {
	case 0:
		want[4].Offset, want[5].Offset, want[6].Offset = 1, 2, 3
	case 1:
		want[1].Offset, want[2].Offset, want[3].Offset = 1, 2, 3
	}
	if fmt.Sprint(pr.Offsets) != fmt.Sprint(want) {
		t.Fatalf("offsets %v, want %v", pr.Offsets, want)
	}

	p1 := c.fetch("orders", 1, "offset=earliest")
	var vals []string
	for _, r := range p1.Records {
		if r.Key != nil || r.KeyB64 != nil {
			continue
		}
		vals = append(vals, string(r.Value))
	}
	if got := strings.Join(vals, "|"); got != `"plain string"|[1,2,3]|true` {
		t.Fatalf("partition 1 values %s", got)
	}
	if p1.HighWatermark != int64(len(p1.Records)) || p1.NextOffset != p1.HighWatermark {
		t.Fatalf("partition 1 hw %d next %d records %d", p1.HighWatermark, p1.NextOffset, len(p1.Records))
	}

	pk := c.fetch("orders", int(keyed), "offset=earliest")
	r := pk.Records[0]
	if *r.Key != "user-1" || string(r.Value) != `{"total":42,"items":["a","b"]}` || r.Headers["source"] != "web" || r.Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("keyed record %+v value %s", r, r.Value)
	}

	p0 := c.fetch("orders", 0, "offset=earliest")
	var bin, numKey, spaced *api.FetchedRecord
	for i := range p0.Records {
		switch {
		case p0.Records[i].KeyB64 != nil:
			bin = &p0.Records[i]
		case p0.Records[i].Key != nil && *p0.Records[i].Key == "7":
			numKey = &p0.Records[i]
		case string(p0.Records[i].Value) == `{"spaced":1}`:
			spaced = &p0.Records[i]
		}
	}
	if bin == nil || *bin.KeyB64 != "AP8=" || bin.ValueB64 == nil || *bin.ValueB64 != "AAECAw==" || bin.Value != nil {
		t.Fatalf("binary record %+v", bin)
	}
	if numKey == nil || numKey.Value != nil || numKey.ValueB64 != nil {
		t.Fatalf("null-valued record with a number key %+v", numKey)
	}
	if spaced == nil {
		t.Fatalf("a JSON value with white space did not come back compacted: %+v", p0.Records)
	}
}

func TestProduceNDJSONAndOctetStream(t *testing.T) {
	c := newCluster(t)
	c.createTopic("events", 1)
	nd := "{\"value\":{\"n\":1}}\n\n{\"key\":\"k\",\"value\":{\"n\":2}}\n{\"value\":{\"n\":3}}"
	status, _, b := c.do("POST", "/v1/topics/events/records?acks=1", "application/x-ndjson", []byte(nd))
	if status != 200 {
		t.Fatalf("ndjson: %d %s", status, b)
	}
	raw := []byte{0xff, 0x00, 'h', 'i'}
	status, _, b = c.do("POST", "/v1/topics/events/records?key=bin-key", "application/octet-stream", raw)
	if status != 200 {
		t.Fatalf("octet-stream: %d %s", status, b)
	}
	status, _, b = c.do("POST", "/v1/topics/events/records", "application/octet-stream", []byte(`{"json":"bytes"}`))
	if status != 200 {
		t.Fatalf("octet-stream json: %d %s", status, b)
	}
	res := c.fetch("events", 0, "offset=0")
	if len(res.Records) != 5 {
		t.Fatalf("got %d records: %+v", len(res.Records), res.Records)
	}
	for i, r := range res.Records {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	if string(res.Records[1].Value) != `{"n":2}` || *res.Records[1].Key != "k" {
		t.Fatalf("ndjson record %+v", res.Records[1])
	}
	if got, _ := base64.StdEncoding.DecodeString(*res.Records[3].ValueB64); !bytes.Equal(got, raw) || *res.Records[3].Key != "bin-key" {
		t.Fatalf("octet record %+v", res.Records[3])
	}
	if string(res.Records[4].Value) != `{"json":"bytes"}` {
		t.Fatalf("octet JSON record %+v", res.Records[4])
	}
	// Offsets: a mid-log offset, "latest", and max_records.
	if r := c.fetch("events", 0, "offset=2&max_records=2"); len(r.Records) != 2 || r.Records[0].Offset != 2 || r.NextOffset != 4 {
		t.Fatalf("offset=2 max_records=2: %+v", r)
	}
	if r := c.fetch("events", 0, "offset=latest"); len(r.Records) != 0 || r.NextOffset != 5 {
		t.Fatalf("offset=latest: %+v", r)
	}
}

func TestPartitioning(t *testing.T) {
	c := newCluster(t)
	c.createTopic("keys", 4)
	produce := func(body string) []api.RecordOffset {
		t.Helper()
		var pr api.ProduceResponse
		status, _, b := c.do("POST", "/v1/topics/keys/records", "application/json", []byte(body))
		if status != 200 || json.Unmarshal(b, &pr) != nil {
			t.Fatalf("produce: %d %s", status, b)
		}
		return pr.Offsets
	}
	for _, key := range []string{"a", "user-42", "foobar", "ünïcödé"} {
		k, _ := json.Marshal(key)
		offs := produce(fmt.Sprintf(`{"records":[{"key":%s,"value":1},{"key":%s,"value":2}]}`, k, k))
		want := int32(api.KeyPartition([]byte(key), 4))
		if offs[0].Partition != want || offs[1].Partition != want || offs[1].Offset != offs[0].Offset+1 {
			t.Fatalf("key %q: %v, want partition %d", key, offs, want)
		}
	}
	seen := map[int32]bool{}
	for i := 0; i < 4; i++ {
		offs := produce(`{"records":[{"value":1},{"value":2},{"value":3}]}`)
		if offs[0].Partition != offs[1].Partition || offs[1].Partition != offs[2].Partition {
			t.Fatalf("keyless records of one request spread over partitions: %v", offs)
		}
		seen[offs[0].Partition] = true
	}
	if len(seen) != 4 {
		t.Fatalf("four keyless requests used partitions %v, want all four", seen)
	}
}

func TestErrors(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 2)
	big := bytes.Repeat([]byte("x"), api.DefaultMaxMessageBytes+1)
	bigJSON, _ := json.Marshal(map[string]any{"records": []map[string]any{{"value_b64": base64.StdEncoding.EncodeToString(big)}}})
	tests := []struct {
		name, method, path, ctype, body string
		status                          int
		code                            api.Code
	}{
		{"oversize octet record", "POST", "/v1/topics/t/records", "application/octet-stream", string(big), 413, api.CodeRecordTooLarge},
		{"oversize JSON record", "POST", "/v1/topics/t/records", "application/json", string(bigJSON), 413, api.CodeRecordTooLarge},
		{"malformed JSON", "POST", "/v1/topics/t/records", "application/json", `{"records":[`, 400, api.CodeInvalidRequest},
		{"no records", "POST", "/v1/topics/t/records", "application/json", `{"records":[]}`, 400, api.CodeInvalidRequest},
		{"bad NDJSON line", "POST", "/v1/topics/t/records", "application/x-ndjson", "{\"value\":1}\nnot json\n", 400, api.CodeInvalidRecord},
		{"bad base64", "POST", "/v1/topics/t/records", "application/json", `{"records":[{"value_b64":"!!"}]}`, 400, api.CodeInvalidRecord},
		{"unknown topic produce", "POST", "/v1/topics/nope/records", "application/json", `{"records":[{"value":1}]}`, 404, api.CodeUnknownTopic},
		{"unknown topic fetch", "GET", "/v1/topics/nope/partitions/0/records", "", "", 404, api.CodeUnknownTopic},
		{"unknown partition produce", "POST", "/v1/topics/t/records", "application/json", `{"records":[{"value":1,"partition":9}]}`, 404, api.CodeUnknownPartition},
		{"unknown partition fetch", "GET", "/v1/topics/t/partitions/9/records", "", "", 404, api.CodeUnknownPartition},
		{"no content type", "POST", "/v1/topics/t/records", "", `{"records":[{"value":1}]}`, 415, api.CodeUnsupportedMediaType},
		{"form content type", "POST", "/v1/topics/t/records", "application/x-www-form-urlencoded", `a=b`, 415, api.CodeUnsupportedMediaType},
		{"bad acks", "POST", "/v1/topics/t/records?acks=2", "application/json", `{"records":[{"value":1}]}`, 400, api.CodeInvalidRequest},
		{"offset out of range", "GET", "/v1/topics/t/partitions/0/records?offset=100", "", "", 416, api.CodeOffsetOutOfRange},
		{"bad offset", "GET", "/v1/topics/t/partitions/0/records?offset=soon", "", "", 400, api.CodeInvalidOffset},
		{"bad max_records", "GET", "/v1/topics/t/partitions/0/records?max_records=0", "", "", 400, api.CodeInvalidRequest},
		{"bad topic name", "POST", "/v1/topics", "application/json", `{"name":"a/b","partitions":1}`, 400, api.CodeInvalidTopicName},
		{"dot topic name", "POST", "/v1/topics", "application/json", `{"name":"..","partitions":1}`, 400, api.CodeInvalidTopicName},
		{"topic exists", "POST", "/v1/topics", "application/json", `{"name":"t","partitions":1}`, 409, api.CodeTopicAlreadyExists},
		{"bad partitions", "POST", "/v1/topics", "application/json", `{"name":"u","partitions":-1}`, 400, api.CodeInvalidPartitions},
		{"too many replicas", "POST", "/v1/topics", "application/json", `{"name":"u","partitions":1,"replication_factor":3}`, 400, api.CodeInvalidReplication},
		{"unknown config", "POST", "/v1/topics", "application/json", `{"name":"u","configs":{"colour":"blue"}}`, 400, api.CodeInvalidConfig},
		{"bad config value", "POST", "/v1/topics", "application/json", `{"name":"u","configs":{"retention.ms":"soon"}}`, 400, api.CodeInvalidConfig},
		{"delete unknown topic", "DELETE", "/v1/topics/nope", "", "", 404, api.CodeUnknownTopic},
		{"unknown route", "GET", "/v2/whatever", "", "", 404, api.CodeNotFound},
		{"wrong method", "PUT", "/v1/topics", "", "", 405, api.CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, b := client{t, c.base}.do(tt.method, tt.path, tt.ctype, []byte(tt.body))
			var eb api.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil {
				t.Fatalf("status %d, body is not an error envelope: %s", status, b)
			}
			if status != tt.status || eb.Error.Code != tt.code || eb.Error.Message == "" || h.Get(api.HeaderErrorCode) != string(tt.code) {
				t.Fatalf("got %d %+v, want %d %s", status, eb.Error, tt.status, tt.code)
			}
			if eb.Error.Retriable != api.Lookup(tt.code).Retriable {
				t.Fatalf("retriable %v disagrees with the table", eb.Error.Retriable)
			}
		})
	}
	// Nothing of the failed requests was written.
	for p := 0; p < 2; p++ {
		if r := c.fetch("t", p, "offset=0"); len(r.Records) != 0 {
			t.Fatalf("partition %d holds %d records after failed produces", p, len(r.Records))
		}
	}
}

// A record whose declared size is over the limit is refused before its body is
// sent: the request body here never arrives, yet the answer does.
func TestOversizeRefusedBeforeBody(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 1)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", c.base+"/v1/topics/t/records", pr)
	req.ContentLength = 50 << 20
	req.Header.Set("Content-Type", "application/octet-stream")
	go func() { _, _ = pw.Write([]byte("a few bytes, then nothing")) }() // fails once the gateway gives up on the body
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("no answer while the body was still owed: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 413 || resp.Header.Get(api.HeaderErrorCode) != string(api.CodeRecordTooLarge) {
		t.Fatalf("status %d code %s", resp.StatusCode, resp.Header.Get(api.HeaderErrorCode))
	}
}

func TestLongPollWakesOnProduce(t *testing.T) {
	c := newCluster(t)
	c.createTopic("lp", 1)
	type answer struct {
		res  api.FetchResponse
		took time.Duration
	}
	got := make(chan answer, 1)
	go func() {
		var res api.FetchResponse
		start := time.Now()
		req, _ := http.NewRequest("GET", c.base+"/v1/topics/lp/partitions/0/records?offset=0&max_wait_ms=20000", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			defer resp.Body.Close()
			_ = json.NewDecoder(resp.Body).Decode(&res)
		}
		got <- answer{res, time.Since(start)}
	}()
	// The poll is in the gateway (its counter moved) and has had time to
	// reach the leader's wait; only then does the record exist.
	testwait.For(t, 10*time.Second, "the long poll to reach the gateway", func() bool {
		_, _, m := c.do("GET", "/metrics", "", nil)
		return strings.Contains(string(m), `sluice_gateway_fetch_requests_total{route="records"} 1`)
	})
	const head = 300 * time.Millisecond
	time.Sleep(head)
	c.json("POST", "/v1/topics/lp/records", map[string]any{"records": []map[string]any{{"value": "wake"}}}, nil)
	select {
	case a := <-got:
		if len(a.res.Records) != 1 || string(a.res.Records[0].Value) != `"wake"` {
			t.Fatalf("long poll returned %+v", a.res)
		}
		// It was waiting before the record existed, and the produce woke
		// it long before max_wait_ms.
		if a.took < head || a.took > 10*time.Second {
			t.Fatalf("the long poll took %v: it did not wait for the produce, or the produce did not wake it", a.took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long poll did not return after a produce")
	}
	// With nothing new, max_wait_ms bounds the wait and the answer is empty.
	if r := c.fetch("lp", 0, "offset=1&max_wait_ms=50"); len(r.Records) != 0 || r.NextOffset != 1 {
		t.Fatalf("empty long poll %+v", r)
	}
}

func TestRawBatches(t *testing.T) {
	c := newCluster(t)
	c.createTopic("raw", 1)
	for i := 0; i < 3; i++ {
		c.json("POST", "/v1/topics/raw/records", map[string]any{"records": []map[string]any{{"value": i}, {"value": i * 10}}}, nil)
	}
	status, h, b := c.do("GET", "/v1/topics/raw/partitions/0/batches?offset=2", "", nil)
	if status != 200 || h.Get("Content-Type") != api.ContentTypeBatches {
		t.Fatalf("batches: %d %s", status, h.Get("Content-Type"))
	}
	if h.Get(api.HeaderNextOffset) != "6" || h.Get(api.HeaderHighWatermark) != "6" || h.Get(api.HeaderLogStartOffset) != "0" {
		t.Fatalf("headers %v", h)
	}
	var offsets []int64
	n, err := recordbatch.Scan(b, true, func(bh recordbatch.Header, raw []byte) error {
		_, recs, err := recordbatch.Decode(raw)
		for _, r := range recs {
			offsets = append(offsets, r.Offset)
		}
		return err
	})
	if err != nil || n != len(b) {
		t.Fatalf("scan: %d of %d bytes, %v", n, len(b), err)
	}
	if fmt.Sprint(offsets) != "[2 3 4 5]" {
		t.Fatalf("raw batches hold offsets %v", offsets)
	}
}

func TestTopicAdmin(t *testing.T) {
	c := newCluster(t)
	c.createTopic("a", 2)
	c.createTopic("b", 1)
	var list api.TopicList
	c.json("GET", "/v1/topics", nil, &list)
	if len(list.Topics) != 2 || list.Topics[0].Name != "a" || len(list.Topics[0].Partitions) != 2 {
		t.Fatalf("list %+v", list)
	}
	c.json("POST", "/v1/topics/a/records", map[string]any{"records": []map[string]any{{"value": 1, "partition": 1}}}, nil)
	var topic api.Topic
	c.json("GET", "/v1/topics/a", nil, &topic)
	p1 := topic.Partitions[1]
	if p1.Leader != 1 || p1.HighWatermark != 1 || p1.LogEndOffset != 1 || p1.LogStartOffset != 0 || fmt.Sprint(p1.ISR) != "[1]" || p1.Offline {
		t.Fatalf("partition 1 %+v", p1)
	}
	status, _, b := c.do("DELETE", "/v1/topics/a", "", nil)
	if status != 204 {
		t.Fatalf("delete: %d %s", status, b)
	}
	if status, _, _ := c.do("GET", "/v1/topics/a", "", nil); status != 404 {
		t.Fatalf("deleted topic answers %d", status)
	}
	// A new topic of the same name starts empty.
	c.createTopic("a", 2)
	if r := c.fetch("a", 1, "offset=0"); len(r.Records) != 0 || r.HighWatermark != 0 {
		t.Fatalf("recreated topic holds %+v", r)
	}
	var ci api.ClusterInfo
	c.json("GET", "/v1/cluster", nil, &ci)
	if len(ci.Brokers) != 1 || !ci.Brokers[0].Alive || ci.Controller != 1 {
		t.Fatalf("cluster %+v", ci)
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	cl := embedtest.Start(t, embedtest.Options{DataDir: dir})
	c := client{t, cl.URL}
	c.createTopic("keep", 2)
	for i := 0; i < 20; i++ {
		c.json("POST", "/v1/topics/keep/records", map[string]any{"records": []map[string]any{{"key": fmt.Sprint(i), "value": i}}}, nil)
	}
	cl.Stop(t)
	cl = embedtest.Start(t, embedtest.Options{DataDir: dir})
	c = client{t, cl.URL}
	total := 0
	for p := 0; p < 2; p++ {
		total += len(c.fetch("keep", p, "offset=earliest").Records)
	}
	if total != 20 {
		t.Fatalf("after restart %d records, want 20", total)
	}
}
