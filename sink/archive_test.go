package sink

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
)

// marshalLine is the reference rendering of an archive line:
// json.Marshal of the record as the gateway renders it.
func marshalLine(t *testing.T, r Record) []byte {
	t.Helper()
	fr := api.FetchedRecord{Offset: r.Offset, Timestamp: r.Timestamp, Headers: r.Headers}
	if r.Key != nil {
		s := string(r.Key)
		if utf8.Valid(r.Key) {
			fr.Key = &s
		} else {
			s = base64.StdEncoding.EncodeToString(r.Key)
			fr.KeyB64 = &s
		}
	}
	if r.Value != nil {
		if json.Valid(r.Value) {
			fr.Value = json.RawMessage(r.Value)
		} else {
			s := base64.StdEncoding.EncodeToString(r.Value)
			fr.ValueB64 = &s
		}
	}
	if len(fr.Headers) == 0 {
		fr.Headers = nil
	}
	b, err := json.Marshal(fr)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestArchiveLineIsMarshal: the archive's own line encoder writes exactly
// the bytes json.Marshal makes of the fetched record, so objects rebuilt
// from the log by any version match, byte for byte.
func TestArchiveLineIsMarshal(t *testing.T) {
	cases := map[string]Record{
		"plain":              {Offset: 7, Timestamp: 1700000000000, Key: []byte("k1"), Value: []byte(`{"n":1}`)},
		"no key":             {Offset: 0, Timestamp: -1, Value: []byte(`"s"`)},
		"null value":         {Offset: 1, Key: []byte("k")},
		"empty value":        {Offset: 2, Key: []byte(""), Value: []byte{}},
		"white space":        {Offset: 3, Value: []byte("{ \"a\" :\n [1, 2,\t3] }\n")},
		"html in value":      {Offset: 4, Value: []byte(`{"h":"<b>&amp;</b>"}`)},
		"line separators":    {Offset: 5, Value: []byte("\"a\u2028b\u2029c\"")},
		"html in key":        {Offset: 6, Key: []byte("<k&>\u2028\n\t\"\\"), Value: []byte(`1`)},
		"binary key":         {Offset: 8, Key: []byte{0xff, 0x00, 0xfe}, Value: []byte(`true`)},
		"binary value":       {Offset: 9, Value: []byte{0x00, 0x01, 0xff}},
		"not json":           {Offset: 10, Value: []byte(`{"a":`)},
		"text value":         {Offset: 11, Value: []byte(`hello world`)},
		"headers":            {Offset: 12, Value: []byte(`null`), Headers: map[string]string{"z": "1", "a": "<2>", "m": ""}},
		"empty headers":      {Offset: 13, Value: []byte(`[]`), Headers: map[string]string{}},
		"control characters": {Offset: 14, Key: []byte("\x01\x1f\b\f"), Value: []byte("\"\\u0001\"")},
		"large numbers":      {Offset: 1<<62 + 3, Timestamp: -1 << 40, Value: []byte(`1e400`)},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := archiveLine(r)
			if err != nil {
				t.Fatal(err)
			}
			if want := marshalLine(t, r); string(got) != string(want) {
				t.Fatalf("line\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestHTMLSpecialMatchesContainsAny(t *testing.T) {
	for _, v := range []string{"", "plain", "a<b", "x>", "&", "\u2028", "a\u2029b", "\u2027", "\xe2\x80", "\xe2\x80\xa8", "\xe2\xe2\x80\xa9", "é漢字", "\xe2\x80\xaa<"} {
		if got, want := htmlSpecial([]byte(v)), bytes.ContainsAny([]byte(v), "<>&\u2028\u2029"); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
