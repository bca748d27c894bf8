package apijson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// Random strings (bytes of every value, runes of every plane) escape as
// encoding/json escapes them.
func TestAppendJSONStringRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 20000; i++ {
		var b []byte
		for n := rng.IntN(12); n > 0; n-- {
			switch rng.IntN(3) {
			case 0:
				b = append(b, byte(rng.IntN(256)))
			case 1:
				b = append(b, byte(rng.IntN(128)))
			default:
				b = append(b, string(rune(rng.IntN(0x110000)))...)
			}
		}
		want, _ := json.Marshal(string(b))
		if got := AppendString(nil, string(b)); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", b, got, want)
		}
	}
}

func strp(s string) *string { return &s }

// A record encodes as json.Marshal encodes it when its value is compact
// and holds no HTML characters, and decodes to the same thing when not.
func TestAppendGroupRecords(t *testing.T) {
	recs := []api.GroupRecord{
		{Topic: "t", Partition: 0, FetchedRecord: api.FetchedRecord{Offset: 0, Timestamp: 1}},
		{Topic: "<t>", Partition: 3, FetchedRecord: api.FetchedRecord{Offset: 7, Timestamp: -5, Key: strp("k\n\"\x00"),
			Value: json.RawMessage(`{"a":[1,2,{"b":null}],"c":"d"}`), Headers: map[string]string{"z": "1", "a": "<&>"}}},
		{Topic: "t", Partition: 1, FetchedRecord: api.FetchedRecord{Offset: 9, KeyB64: strp("AAEC/w=="), ValueB64: strp("3q2+7w==")}},
	}
	for _, rs := range [][]api.GroupRecord{recs, {}} {
		got := AppendGroupRecords(nil, rs)
		want, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	}
	spaced := []api.GroupRecord{{Topic: "t", FetchedRecord: api.FetchedRecord{Value: json.RawMessage(`{ "a" : "<x>" }`)}}}
	got := AppendGroupRecords(nil, spaced)
	if !bytes.Contains(got, []byte(`{ "a" : "<x>" }`)) {
		t.Fatalf("value not copied as stored: %s", got)
	}
	want, _ := json.Marshal(spaced)
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
		t.Fatalf("decodes differently:\n got %s\nwant %s", got, want)
	}
}
