package api

import (
	"reflect"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []Cursor{
		{Epoch: 0},
		{Epoch: 7, Positions: []PartitionOffset{{Topic: "a", Partition: 0, Offset: 0}, {Topic: "a", Partition: 3, Offset: 1 << 40}, {Topic: "b.c-d_e", Partition: 2, Offset: 5}}},
	} {
		got, err := DecodeCursor(c.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Positions) == 0 && len(got.Positions) == 0 {
			got.Positions = c.Positions
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %+v gave %+v", c, got)
		}
	}
}

// FuzzDecodeCursor: a cursor is outside input; whatever a client sends is
// refused with INVALID_REQUEST or decodes to positions that encode and
// decode again to the same thing.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(Cursor{Epoch: 3, Positions: []PartitionOffset{{Topic: "t", Partition: 1, Offset: 9}}}.Encode())
	f.Add("")
	f.Add("e30")
	f.Add("eyJlIjoxLCJwIjp7InQiOltbLTEsMl1dfX0")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(s)
		if err != nil {
			if Classify(err).Code != CodeInvalidRequest {
				t.Fatalf("cursor %q: %v, want INVALID_REQUEST", s, err)
			}
			return
		}
		for _, p := range c.Positions {
			if p.Partition < 0 || p.Offset < 0 {
				t.Fatalf("cursor %q decoded to a bad position %+v", s, p)
			}
		}
		again, err := DecodeCursor(c.Encode())
		if err != nil || again.Epoch != c.Epoch || len(again.Positions) != len(c.Positions) {
			t.Fatalf("re-encoding %+v: %+v %v", c, again, err)
		}
	})
}
