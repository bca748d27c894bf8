package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func strp(s string) *string { return &s }

// renderCases are records whose strings hold every kind of character
// encoding/json escapes.
func renderCases() []api.FetchedRecord {
	return []api.FetchedRecord{
		{Offset: 0, Timestamp: 1},
		{Offset: 1, Timestamp: -5, Key: strp("k"), Value: json.RawMessage(`{"a":[1,2,{"b":null}],"c":"d"}`)},
		{Offset: 2, Timestamp: 1700000000000, KeyB64: strp("AAEC/w=="), ValueB64: strp("3q2+7w==")},
		{Offset: 3, Key: strp("quote\" backslash\\ nl\n tab\t cr\r bs\b ff\f nul\x00 us\x1f del\x7f"), Value: json.RawMessage(`"x"`)},
		{Offset: 4, Key: strp("html <b>&amp;</b> é 日本 \u2028 \u2029 🙂"), Value: json.RawMessage(`123.5e-7`)},
		{Offset: 5, Key: strp("bad utf-8 \xff\xfe end \xe6\x97"), Value: json.RawMessage(`true`)},
		{Offset: 6, Value: json.RawMessage(`[]`), Headers: map[string]string{"z": "last", "a": "first <&>", "m\x01": "bad \xc3"}},
		{Offset: 7, Key: strp(""), Value: json.RawMessage(`""`), Headers: map[string]string{"": ""}},
	}
}

// checkRender compares a hand-rendered answer with encoding/json's: the
// same bytes when no value holds what json.Marshal would rewrite (HTML
// characters, insignificant space), and always the same JSON once decoded.
func checkRender(t *testing.T, name string, got []byte, v any, sameBytes bool) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) {
		t.Fatalf("%s: not JSON: %s", name, got)
	}
	if sameBytes && !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", name, got, want)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: decodes differently:\n got %s\nwant %s", name, got, want)
	}
}

func TestRenderFetchResponse(t *testing.T) {
	recs := renderCases()
	for _, res := range []api.FetchResponse{
		{Records: recs, NextOffset: 8, HighWatermark: 9},
		{Records: []api.FetchedRecord{}, NextOffset: 3, HighWatermark: 3},
		{Records: nil, NextOffset: -1, HighWatermark: 0},
	} {
		checkRender(t, "fetch", renderFetchResponse(nil, &res), res, true)
	}
	// A value that is valid JSON but not compact, or holds HTML
	// characters, keeps its bytes; it still decodes to the same thing.
	spaced := api.FetchResponse{Records: []api.FetchedRecord{{Value: json.RawMessage(`{ "a" : "<x>" }`)}}}
	got := renderFetchResponse(nil, &spaced)
	if !bytes.Contains(got, []byte(`{ "a" : "<x>" }`)) {
		t.Fatalf("value not copied as stored: %s", got)
	}
	checkRender(t, "spaced value", got, spaced, false)
}

func TestRenderGroupAnswers(t *testing.T) {
	var grecs []api.GroupRecord
	for i, r := range renderCases() {
		grecs = append(grecs, api.GroupRecord{Topic: []string{"t", "<t>", "t\"x"}[i%3], Partition: int32(i), FetchedRecord: r})
	}
	for _, res := range []api.GroupPollResponse{
		{Records: grecs, Cursor: "c<1>", MemberEpoch: 4,
			Assignment: []api.TopicPartition{{Topic: "t", Partition: 1}}, Grants: []api.PartitionGrant{{Topic: "t", Partition: 1, Fence: 9}}},
		{Records: []api.GroupRecord{}, Cursor: ""},
		{},
	} {
		b, err := renderGroupPoll(nil, &res)
		if err != nil {
			t.Fatal(err)
		}
		checkRender(t, "group poll", b, res, true)
		checkRender(t, "group frame", renderGroupRecordsFrame(nil, res.Records, res.Cursor),
			wsRecordsFrame{Records: res.Records, Cursor: res.Cursor}, true)
	}
}

// BenchmarkRenderFetch compares the hand-written encoding of a fetch answer
// of 1,000 records (100-byte JSON values, as `sluice bench consume` makes)
// with json.Marshal's, in one run: go test -bench RenderFetch ./gateway.
func BenchmarkRenderFetch(b *testing.B) {
	res := api.FetchResponse{NextOffset: 1000, HighWatermark: 5000}
	val := json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), 98)) + `"`)
	for i := range 1000 {
		res.Records = append(res.Records, api.FetchedRecord{Offset: int64(i), Timestamp: 1700000000000 + int64(i), Value: val})
	}
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("render", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = renderFetchResponse(buf[:0], &res)
		}
	})
}
