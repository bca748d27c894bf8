package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// strictObject decodes a JSON object's members, refusing a name given twice.
func strictObject(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("%q appears twice", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// referenceRecord restates the record rules with encoding/json, field names
// matched exactly, unknown and repeated ones refused: the scanner must agree
// with it on every input.
func referenceRecord(line []byte) (pendingRecord, error) {
	m, err := strictObject(line)
	if err != nil {
		return pendingRecord{}, err
	}
	for name := range m {
		switch name {
		case "key", "value", "key_b64", "value_b64", "partition", "timestamp", "headers":
		default:
			return pendingRecord{}, fmt.Errorf("unknown field %q", name)
		}
	}
	pr := pendingRecord{partition: -1}
	compact := func(raw json.RawMessage) []byte {
		var b bytes.Buffer
		_ = json.Compact(&b, raw)
		return b.Bytes()
	}
	isNull := func(raw json.RawMessage) bool { return string(raw) == "null" }
	if raw, ok := m["key"]; ok && !isNull(raw) {
		if raw[0] == '"' {
			if bytes.IndexByte(raw, '\\') < 0 {
				pr.key = raw[1 : len(raw)-1]
			} else {
				var s string
				if err := json.Unmarshal(raw, &s); err != nil {
					return pr, err
				}
				pr.key = []byte(s)
			}
		} else {
			pr.key = compact(raw)
		}
	}
	if raw, ok := m["value"]; ok && !isNull(raw) {
		pr.value = compact(raw)
	}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{"key_b64", &pr.key}, {"value_b64", &pr.value}} {
		raw, ok := m[f.name]
		if !ok || isNull(raw) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return pr, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return pr, err
		}
		*f.dst = b
	}
	intField := func(name string, hi int64) (int64, bool, error) {
		raw, ok := m[name]
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 0 || n > hi {
			return 0, true, fmt.Errorf("bad %s", name)
		}
		return n, true, nil
	}
	if n, ok, err := intField("partition", 1<<31-1); err != nil {
		return pr, err
	} else if ok {
		pr.partition = int32(n)
	}
	if n, _, err := intField("timestamp", 1<<62); err != nil {
		return pr, err
	} else {
		pr.timestamp = n
	}
	if raw, ok := m["headers"]; ok && !isNull(raw) {
		var h map[string]string
		if err := json.Unmarshal(raw, &h); err != nil {
			return pr, err
		}
		if _, err := strictObject(raw); err != nil {
			return pr, err
		}
		if len(h) > api.DefaultMaxHeadersPerRecord {
			return pr, fmt.Errorf("%d headers", len(h))
		}
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pr.headers = append(pr.headers, recordbatch.RecordHeader{Key: k, Value: []byte(h[k])})
		}
	}
	return pr, nil
}

// testLimits are the default limits, without a memory budget.
func testLimits() *parseLimits {
	return &parseLimits{maxRecords: api.DefaultMaxRecordsPerRequest, maxHeaders: api.DefaultMaxHeadersPerRecord, maxSequences: 1000}
}

func scanRecord(line []byte) (pendingRecord, error) {
	s := &scanner{b: line, lim: testLimits()}
	pr := s.record(0)
	s.end()
	return pr, s.err
}

func normalize(p pendingRecord) pendingRecord {
	if len(p.key) == 0 && p.key != nil {
		p.key = []byte{}
	}
	if len(p.value) == 0 && p.value != nil {
		p.value = []byte{}
	}
	return p
}

var scanSeeds = []string{
	`{"key":"user-1","value":{"total":42}}`,
	`{"value":"plain"}`,
	`{"value":[1, 2, {"a" : null}], "partition": 3}`,
	`{"key":7,"value":null}`,
	`{"key":"\u00e9t\u00e9\n","value":"x","headers":{"a":"b","c":"d"}}`,
	`{"key_b64":"AP8=","value_b64":"AAECAw=="}`,
	`{"key_b64":null,"value":true,"timestamp":1700000000000}`,
	`{"unknown":{"deep":[1,2,3]},"value":-1.5e10}`,
	`{"value":1}  `,
	`{"value":1}x`,
	`{"value":}`,
	`{"value":"\x01"}`,
	`{"partition":-1,"value":1}`,
	`{"partition":1.5,"value":1}`,
	`{"value":tru}`,
	`{"value":[1,]}`,
	`{"value":01}`,
	`{"value":"a\qb"}`,
	`[]`,
	`{}`,
	`{"value":{"a":1,}}`,
	`{"headers":{"a":1},"value":1}`,
	`{"Value":1}`,
	`{"value":1,"value":2}`,
	`{"value":1,"\u0076alue":2}`,
	`{"headers":{"a":"1","a":"2"}}`,
	`{"headers":{"a":"1","\u0061":"2"}}`,
	`{"headers":{"b":"\u00e9","a":null,"c":"x"}}`,
	"{\"headers\":{\"c\":\"\xff\",\"\xfe\":\"x\"}}",
	`{"headers":[]}`,
	`{"headers":null,"headers":null}`,
}

func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	for _, seed := range scanSeeds {
		t.Run(seed, func(t *testing.T) { compareScan(t, []byte(seed)) })
	}
}

func FuzzScanRecord(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) { compareScan(t, line) })
}

func compareScan(t *testing.T, line []byte) {
	got, gerr := scanRecord(line)
	want, werr := referenceRecord(line)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%q: scanner err %v, encoding/json err %v", line, gerr, werr)
	}
	if gerr != nil {
		return
	}
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Fatalf("%q:\nscanner   %+v\nreference %+v", line, got, want)
	}
}

func TestHasSpecial8(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x20 || c == '"' || c == '\\'
		for pos := 0; pos < 8; pos++ {
			b := []byte("abcdefgh")
			// Neighbours that are high bytes must not trigger a false positive.
			for i := range b {
				if i != pos {
					b[i] = byte(0x80 + i*7)
				}
			}
			b[pos] = byte(c)
			if got := hasSpecial8(binary.LittleEndian.Uint64(b)); got != want {
				t.Fatalf("byte %#x at %d: %v, want %v", c, pos, got, want)
			}
		}
	}
}

func BenchmarkParseNDJSON(b *testing.B) {
	var body bytes.Buffer
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&body, `{"value":"%098d"}`+"\n", i)
	}
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		recs, err := parseNDJSON(body.Bytes(), testLimits())
		if err != nil {
			b.Fatal(err)
		}
		putPending(recs)
	}
}

func benchmarkParseJSON(b *testing.B, record func(i int) string) {
	var body bytes.Buffer
	body.WriteString(`{"records":[`)
	for i := 0; i < 1000; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(record(i))
	}
	body.WriteString(`]}`)
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		recs, _, err := parseJSONBody(body.Bytes(), testLimits())
		if err != nil {
			b.Fatal(err)
		}
		putPending(recs)
	}
}

func BenchmarkParseJSONBody(b *testing.B) {
	benchmarkParseJSON(b, func(i int) string { return fmt.Sprintf(`{"key":"user-%d","value":{"n":%d,"s":"%080d"}}`, i, i, i) })
}

func BenchmarkParseJSONHeaders(b *testing.B) {
	benchmarkParseJSON(b, func(i int) string {
		return fmt.Sprintf(`{"value":%d,"headers":{"trace":"%016x","src":"web"},"timestamp":1700000000000}`, i, i)
	})
}

// BenchmarkReadBody reads a 100 KiB body through the produce path's reader,
// with its budget.
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 100<<10)
	mem := &memBudget{limit: 1 << 30}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		res := &reservation{b: mem}
		bp, _, err := readGrowing(bytes.NewReader(body), 32<<20, api.CodeRequestTooLarge, int64(len(body))+1, res)
		if err != nil {
			b.Fatal(err)
		}
		putBuf(bp)
		res.release()
	}
}

// referenceBody restates the JSON body rules with encoding/json: the
// records as referenceRecord reads them, the producer fields, no unknown or
// repeated field, and the limits of lim.
func referenceBody(body []byte, lim *parseLimits) ([]pendingRecord, error) {
	m, err := strictObject(body)
	if err != nil {
		return nil, err
	}
	for name, raw := range m {
		switch name {
		case "records":
		case "producer_id", "producer_epoch":
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || (name == "producer_id" && (n < 1 || n > 1<<62)) || (name == "producer_epoch" && n > 1<<15-1) {
				return nil, fmt.Errorf("bad %s", name)
			}
		case "sequences":
			if string(raw) == "null" {
				continue
			}
			var seqs map[string]int32
			if err := json.Unmarshal(raw, &seqs); err != nil {
				return nil, err
			}
			if _, err := strictObject(raw); err != nil {
				return nil, err
			}
			if len(seqs) > lim.maxSequences {
				return nil, fmt.Errorf("%d sequences", len(seqs))
			}
		default:
			return nil, fmt.Errorf("unknown field %q", name)
		}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(m["records"], &raws); err != nil {
		return nil, err
	}
	if len(raws) > lim.maxRecords {
		return nil, fmt.Errorf("%d records", len(raws))
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("no records")
	}
	var out []pendingRecord
	for _, raw := range raws {
		pr, err := referenceRecord(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}

var bodySeeds = []string{
	`{"records":[{"value":1},{"key":"k","value":{"a":[1,2]}}]}`,
	`{"records":[{"value":1}],"producer_id":7,"producer_epoch":0,"sequences":{"0":3}}`,
	`{"records":[{"value":1}],"records":[{"value":2}]}`,
	`{"records":[{"Value":1}]}`,
	`{"records":[{},{},{},{}]}`,
	`{"records":[{},{},{},{},{}]}`,
	`{"records":[{}],"sequences":{"0":1,"0":2}}`,
	`{"records":[{}],"sequences":{"0":1,"1":2,"2":3}}`,
	`{"records":null}`,
	`{"records":[{}],"extra":1}`,
	` {"records" : [ {"value" : [ 1 , 2 ] } ] } `,
}

// FuzzParseJSONBody checks the body scanner against referenceBody, with
// small limits so that they are met.
func FuzzParseJSONBody(f *testing.F) {
	for _, s := range bodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := &parseLimits{maxRecords: 4, maxHeaders: 3, maxSequences: 2}
		got, _, gerr := parseJSONBody(body, lim)
		want, werr := referenceBody(body, lim)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: scanner err %v, encoding/json err %v", body, gerr, werr)
		}
		if gerr != nil {
			return
		}
		defer putPending(got)
		if len(got) != len(want) {
			t.Fatalf("%q: %d records, want %d", body, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(normalize(got[i]), normalize(want[i])) {
				t.Fatalf("%q record %d:\nscanner   %+v\nreference %+v", body, i, got[i], want[i])
			}
		}
	})
}

// FuzzParseNDJSON checks the NDJSON scanner line by line against
// referenceRecord.
func FuzzParseNDJSON(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s + "\n" + s))
	}
	f.Add([]byte("\n\n{}\n{}\n{}\n{}\n{}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := &parseLimits{maxRecords: 4, maxHeaders: 1000, maxSequences: 1}
		got, gerr := parseNDJSON(body, lim)
		var want []pendingRecord
		var werr error
		for _, l := range bytes.Split(body, []byte("\n")) {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			if len(want) == lim.maxRecords {
				werr = fmt.Errorf("too many records")
				break
			}
			pr, err := referenceRecord(l)
			if err != nil {
				werr = err
				break
			}
			want = append(want, pr)
		}
		if werr == nil && len(want) == 0 {
			werr = fmt.Errorf("no records")
		}
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: scanner err %v, reference err %v", body, gerr, werr)
		}
		if gerr != nil {
			return
		}
		defer putPending(got)
		if len(got) != len(want) {
			t.Fatalf("%q: %d records, want %d", body, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(normalize(got[i]), normalize(want[i])) {
				t.Fatalf("%q record %d:\nscanner   %+v\nreference %+v", body, i, got[i], want[i])
			}
		}
	})
}

// validJSON agrees with json.Valid on everything but nesting deeper than
// maxJSONDepth.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`"x"`, ` {"a":[1,2.5e-3,true,false,null]} `, `"\u00e9\n"`, `"\ud800"`, "\"\xff\"", `01`, `1.`, `-`, `[1,]`, `{"a" 1}`, `"` + "\x01" + `"`, ``, `  `, `nul`, `[1] [2]`, `{"a":1,}`, `"\x"`, `1e+`, `[[[[[[]]]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) > maxJSONDepth {
			return
		}
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

// go test -bench ValidJSON ./gateway: validJSON against json.Valid on a
// 100-byte string value and a small object.
func BenchmarkValidJSON(b *testing.B) {
	for _, v := range []string{`"` + strings.Repeat("x", 98) + `"`, `{"user":"alice","n":[1,2,3],"ok":true,"at":1764585600000}`} {
		for _, c := range []struct {
			name string
			fn   func([]byte) bool
		}{{"json.Valid", json.Valid}, {"validJSON", validJSON}} {
			b.Run(fmt.Sprintf("%d/%s", len(v), c.name), func(b *testing.B) {
				for b.Loop() {
					if !c.fn([]byte(v)) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}
