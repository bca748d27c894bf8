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
	"testing"

	"github.com/sluice-io/sluice/api"
)

// referenceRecord restates the record rules with encoding/json, field names
// matched exactly: the scanner must agree with it on every input.
func referenceRecord(line []byte) (pendingRecord, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return pendingRecord{}, err
	}
	if m == nil {
		return pendingRecord{}, fmt.Errorf("not an object")
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
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pr.headers = append(pr.headers, api.Header{Key: k, Value: []byte(h[k])})
		}
	}
	return pr, nil
}

func scanRecord(line []byte) (pendingRecord, error) {
	s := &scanner{b: line}
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
		if _, err := parseNDJSON(body.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}
