package api

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"sort"
	"strings"
)

// MaxCursorLen bounds a cursor a client sends (a few thousand partitions).
const MaxCursorLen = 64 << 10

// Cursor names a member's positions after a poll: for each partition, the
// next offset to read. It is opaque to clients (base64url of compact JSON)
// and carries the member epoch it was made at, so positions from before a
// partition was taken away and given back are not trusted.
type Cursor struct {
	Epoch     int32
	Positions []PartitionOffset
}

type cursorWire struct {
	E int32                 `json:"e"`
	P map[string][][2]int64 `json:"p"` // topic -> [partition, offset]
}

// Encode renders the cursor for a response.
func (c Cursor) Encode() string {
	w := cursorWire{E: c.Epoch, P: map[string][][2]int64{}}
	ps := append([]PartitionOffset(nil), c.Positions...)
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	for _, p := range ps {
		w.P[p.Topic] = append(w.P[p.Topic], [2]int64{int64(p.Partition), p.Offset})
	}
	return base64.RawURLEncoding.EncodeToString(mustMarshal(w))
}

// Position returns the cursor's offset for tp.
func (c Cursor) Position(tp TopicPartition) (int64, bool) {
	for _, p := range c.Positions {
		if p.Topic == tp.Topic && p.Partition == tp.Partition {
			return p.Offset, true
		}
	}
	return 0, false
}

// DecodeCursor parses a cursor from a client. Errors are INVALID_REQUEST.
func DecodeCursor(s string) (Cursor, error) {
	var c Cursor
	if len(s) > MaxCursorLen {
		return c, Errorf(CodeInvalidRequest, "cursor longer than %d bytes", MaxCursorLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, Errorf(CodeInvalidRequest, "cursor is not one this API issued")
	}
	var w cursorWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return c, Errorf(CodeInvalidRequest, "cursor is not one this API issued")
	}
	c.Epoch = w.E
	for t, ps := range w.P {
		for _, p := range ps {
			if p[0] < 0 || p[0] > 1<<31-1 || p[1] < 0 {
				return c, Errorf(CodeInvalidRequest, "cursor names a bad position")
			}
			c.Positions = append(c.Positions, PartitionOffset{Topic: t, Partition: int32(p[0]), Offset: p[1]})
		}
	}
	// The wire form is a map: give the positions one order, topic then
	// partition, whatever order the map yields them in.
	slices.SortFunc(c.Positions, func(a, b PartitionOffset) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition) - int(b.Partition)
	})
	return c, nil
}

func mustMarshal(v cursorWire) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("api: encoding a cursor: " + err.Error()) // maps of int arrays always encode
	}
	return b
}
