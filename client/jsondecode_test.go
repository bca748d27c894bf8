package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// fetchBody is a gateway answer of n records with every field a record can
// carry, in the gateway's own rendering.
func fetchBody(n int, mixed bool) []byte {
	var sb strings.Builder
	sb.WriteString(`{"records":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		k := i % 4
		if !mixed {
			k = 0
		}
		switch k {
		case 0:
			fmt.Fprintf(&sb, `{"offset":%d,"timestamp":1764585600000,"value":"%s"}`, i, strings.Repeat("x", 98))
		case 1:
			fmt.Fprintf(&sb, `{"offset":%d,"timestamp":1764585600001,"key":"k\u00e9\n%d","value":{"a":[1,2.5e3,null,true],"b":"\"q\""},"headers":{"h":"v","z":""}}`, i, i)
		case 2:
			fmt.Fprintf(&sb, `{"offset":%d,"timestamp":-1,"key_b64":"AAE=","value_b64":"/w=="}`, i)
		default:
			fmt.Fprintf(&sb, `{"offset":%d,"timestamp":0}`, i)
		}
	}
	sb.WriteString(`],"next_offset":1000,"high_watermark":1200,"log_start_offset":3}`)
	return []byte(sb.String())
}

// decodeJSON gives what encoding/json gives, on answers and on bad input.
func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	body := fetchBody(40, true)
	var want, got api.FetchResponse
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if err := decodeJSON(body, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("decodeJSON differs from encoding/json:\n%+v\n%+v", got, want)
	}
	// Values are copies: reusing the input does not change them.
	v := string(got.Records[1].Value)
	clear(body)
	if string(got.Records[1].Value) != v {
		t.Fatal("a decoded value is a view of the input")
	}
	for _, bad := range []string{`{"records":[{"offset":"x"}]}`, `{"records":[`, `{"records":[{"value":tru}]}`, ``} {
		var a, b api.FetchResponse
		if (json.Unmarshal([]byte(bad), &a) == nil) != (decodeJSON([]byte(bad), &b) == nil) {
			t.Errorf("%q: encoding/json and decodeJSON disagree on whether it decodes", bad)
		}
	}
}

// go test -bench DecodeFetchResponse ./client: decodeJSON against
// encoding/json on an answer of 1,000 records of 100-byte values.
func BenchmarkDecodeFetchResponse(b *testing.B) {
	for _, c := range []struct {
		name  string
		mixed bool
		dec   func([]byte, any) error
	}{{"plain/encoding-json", false, json.Unmarshal}, {"plain/client", false, decodeJSON}, {"mixed/encoding-json", true, json.Unmarshal}, {"mixed/client", true, decodeJSON}} {
		body := fetchBody(1000, c.mixed)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var fr api.FetchResponse
				if err := c.dec(body, &fr); err != nil || len(fr.Records) != 1000 {
					b.Fatal(err)
				}
			}
		})
	}
}
