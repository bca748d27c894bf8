package sink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeArchiveObject: archive objects are read back from the bucket
// (`sluice archive verify`, a claim that rebuilds a range). Decoding any
// bytes never panics; what it accepts, as records, encodes to an object
// that decodes to the same records and encodes to the same bytes again.
func FuzzDecodeArchiveObject(f *testing.F) {
	// Real objects: the cases of TestArchiveLineIsMarshal, one object each
	// and all in one.
	var all []Record
	for _, r := range []Record{
		{Offset: 7, Timestamp: 1700000000000, Key: []byte("k1"), Value: []byte(`{"n":1}`)},
		{Offset: 0, Timestamp: -1, Value: []byte(`"s"`)},
		{Offset: 1, Key: []byte("k")},
		{Offset: 2, Key: []byte(""), Value: []byte{}},
		{Offset: 3, Value: []byte("{ \"a\" :\n [1, 2,\t3] }\n")},
		{Offset: 4, Value: []byte(`{"h":"<b>&amp;</b>"}`)},
		{Offset: 5, Value: []byte("\"a\u2028b\u2029c\"")},
		{Offset: 6, Key: []byte("<k&>\u2028\n\t\"\\"), Value: []byte(`1`)},
		{Offset: 8, Key: []byte{0xff, 0x00, 0xfe}, Value: []byte(`true`)},
		{Offset: 9, Value: []byte{0x00, 0x01, 0xff}},
		{Offset: 10, Value: []byte(`{"a":`)},
		{Offset: 11, Value: []byte(`hello world`)},
		{Offset: 12, Value: []byte(`null`), Headers: map[string]string{"z": "1", "a": "<2>", "m": ""}},
		{Offset: 14, Key: []byte("\x01\x1f\b\f"), Value: []byte("\"\\u0001\"")},
		{Offset: 1<<62 + 3, Timestamp: -1 << 40, Value: []byte(`1e400`)},
	} {
		data, err := EncodeArchiveObject([]Record{r}, CompressionGzip)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		line, err := archiveLine(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line) // as lines, for the second run
		all = append(all, r)
	}
	data, err := EncodeArchiveObject(all, CompressionGzip)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)/2]) // cut short
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		checkArchiveObject(t, data)
		// The bytes as the NDJSON lines of an object: a mutated gzip stream
		// rarely passes its checksum, so the lines get their own run.
		lines, err := encodeObject(data, CompressionGzip)
		if err != nil {
			t.Fatal(err)
		}
		checkArchiveObject(t, lines)
	})
}

// checkArchiveObject decodes data; what it accepts must encode to an
// object that decodes to the same records and is a fixed point.
func checkArchiveObject(t *testing.T, data []byte) {
	t.Helper()
	frs, err := DecodeArchiveObject(data)
	if err != nil {
		return
	}
	recs := make([]Record, 0, len(frs))
	for _, fr := range frs {
		r, err := fromFetched(fr)
		if err != nil {
			return // a line the archive never writes (bad base64)
		}
		recs = append(recs, r)
	}
	// In either compression.
	for _, comp := range []string{CompressionGzip, CompressionNone} {
		enc, err := EncodeArchiveObject(recs, comp)
		if err != nil {
			t.Fatalf("encoding decoded records (%s): %v", comp, err)
		}
		frs2, err := DecodeArchiveObject(enc)
		if err != nil {
			t.Fatalf("the re-encoded object (%s) is refused: %v", comp, err)
		}
		recs2 := make([]Record, 0, len(frs2))
		for _, fr := range frs2 {
			r, err := fromFetched(fr)
			if err != nil {
				t.Fatalf("a re-encoded line: %v", err)
			}
			recs2 = append(recs2, r)
		}
		// The same records, but for what encoding normalizes: a JSON value
		// is written compacted (and HTML-escaped), so it compares as JSON.
		if len(recs) != len(recs2) {
			t.Fatalf("decode(encode(records)): %d records, want %d", len(recs2), len(recs))
		}
		for i := range recs {
			if !sameArchived(recs[i], recs2[i]) {
				t.Fatalf("record %d: decode(encode(r)) differs:\n%s\n%s", i, renderArchived(recs[i:i+1]), renderArchived(recs2[i:i+1]))
			}
		}
		// And encoding is a fixed point from there.
		enc2, err := EncodeArchiveObject(recs2, comp)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding again gives other bytes (%v)", err)
		}
	}
}

// FuzzArchiveRoundTrip: a record written to an archive object reads back
// as itself: its offset, timestamp, key, headers and value, byte for byte
// but for a JSON value, which is kept as the same JSON.
func FuzzArchiveRoundTrip(f *testing.F) {
	f.Add(int64(7), int64(1700000000000), []byte("k1"), []byte(`{"n":1}`), "h", "x", false, false)
	f.Add(int64(0), int64(-1), []byte(nil), []byte(`"s"`), "", "", true, false)
	f.Add(int64(1), int64(0), []byte("k"), []byte(nil), "", "", false, true)
	f.Add(int64(3), int64(0), []byte("<k&>\u2028\n"), []byte("{ \"a\" :\n [1, 2,\t3] }\n"), "a", "<2>", false, false)
	f.Add(int64(8), int64(0), []byte{0xff, 0x00, 0xfe}, []byte{0x00, 0x01, 0xff}, "", "", false, false)
	f.Add(int64(1<<62+3), int64(-1<<40), []byte(""), []byte(`1e400`), "z", "", false, false)
	f.Fuzz(func(t *testing.T, offset, ts int64, key, value []byte, hk, hv string, nullKey, nullValue bool) {
		r := Record{Offset: offset, Timestamp: ts, Key: key, Value: value}
		if nullKey {
			r.Key = nil
		} else if r.Key == nil {
			r.Key = []byte{}
		}
		if nullValue {
			r.Value = nil
		} else if r.Value == nil {
			r.Value = []byte{}
		}
		if hk != "" && utf8.ValidString(hk) && utf8.ValidString(hv) {
			// Headers are strings the gateway rendered from JSON: valid UTF-8.
			r.Headers = map[string]string{hk: hv}
		}
		data, err := EncodeArchiveObject([]Record{r}, CompressionGzip)
		if err != nil {
			t.Fatalf("encoding %s: %v", renderArchived([]Record{r}), err)
		}
		frs, err := DecodeArchiveObject(data)
		if err != nil || len(frs) != 1 {
			t.Fatalf("decoding %s: %d records, %v", renderArchived([]Record{r}), len(frs), err)
		}
		back, err := fromFetched(frs[0])
		if err != nil {
			t.Fatal(err)
		}
		if !sameArchived(r, back) {
			t.Fatalf("decode(encode(r)) differs:\n%s\n%s", renderArchived([]Record{r}), renderArchived([]Record{back}))
		}
	})
}

// sameArchived reports whether b is a as an archive keeps it: the same
// offset, timestamp, key, headers and value bytes, or, for a JSON value,
// the same JSON.
func sameArchived(a, b Record) bool {
	if a.Offset != b.Offset || a.Timestamp != b.Timestamp || (a.Key == nil) != (b.Key == nil) || !bytes.Equal(a.Key, b.Key) ||
		len(a.Headers) != len(b.Headers) || (a.Value == nil) != (b.Value == nil) {
		return false
	}
	for k, v := range a.Headers {
		if w, ok := b.Headers[k]; !ok || w != v {
			return false
		}
	}
	if bytes.Equal(a.Value, b.Value) {
		return true
	}
	av, aerr := jsonValue(a.Value)
	bv, berr := jsonValue(b.Value)
	return aerr == nil && berr == nil && reflect.DeepEqual(av, bv)
}

// jsonValue decodes one JSON value, numbers kept as written.
func jsonValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

// renderArchived renders what an archive line keeps of a record.
func renderArchived(recs []Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %d key=%v %q value=%v %q headers=%v", r.Offset, r.Timestamp, r.Key != nil, r.Key, r.Value != nil, r.Value, r.Headers))
	}
	return out
}

// FuzzAlreadyCompact: the archive's fast path says a value is compact JSON
// only where json.Compact accepts it and leaves it unchanged.
func FuzzAlreadyCompact(f *testing.F) {
	for _, s := range []string{`{"n":1}`, `"s"`, `1`, `-0.5e+10`, `01`, `1.`, `[1,2,3]`, `{"a":[true,false,null]}`, `{ "a": 1 }`,
		`"\u00e9\n\"\\\/"`, `"\x"`, "\"\x01\"", "\"\xff\xfe\"", `[]`, `{}`, `[`, `{"a"}`, `nul`, `-`, `1e`, `"abcdefghijklmnop"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !alreadyCompact(v) {
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			t.Fatalf("%q: the fast path took it, json.Compact refused it: %v", v, err)
		}
		if !bytes.Equal(buf.Bytes(), v) {
			t.Fatalf("%q: the fast path took it as compact, json.Compact made %q", v, buf.Bytes())
		}
	})
}
