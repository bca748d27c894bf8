package offsets

import (
	"encoding/base64"
	"encoding/json"
	"sort"

	"github.com/sluice-io/sluice/api"
)

// MaxCursorLen bounds a cursor a client sends (a few thousand partitions).
const MaxCursorLen = 64 << 10

// Cursor names a member's positions after a poll: for each partition, the
// next offset to read. It is opaque to clients (base64url of compact JSON)
// and carries the member epoch it was made at, so positions from before a
// partition was taken away and given back are not trusted.
type Cursor struct {
	Epoch     int32
	Positions []api.PartitionOffset
}

type cursorWire struct {
	E int32                 `json:"e"`
	P map[string][][2]int64 `json:"p"` // topic -> [partition, offset]
}

// Encode renders the cursor for a response.
func (c Cursor) Encode() string {
	w := cursorWire{E: c.Epoch, P: map[string][][2]int64{}}
	ps := append([]api.PartitionOffset(nil), c.Positions...)
	sort.Slice(ps, func(i, j int) bool {
		return tpLess(api.TopicPartition{Topic: ps[i].Topic, Partition: ps[i].Partition},
			api.TopicPartition{Topic: ps[j].Topic, Partition: ps[j].Partition})
	})
	for _, p := range ps {
		w.P[p.Topic] = append(w.P[p.Topic], [2]int64{int64(p.Partition), p.Offset})
	}
	return base64.RawURLEncoding.EncodeToString(mustJSON(w))
}

// Position returns the cursor's offset for tp.
func (c Cursor) Position(tp api.TopicPartition) (int64, bool) {
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
		return c, api.Errorf(api.CodeInvalidRequest, "cursor longer than %d bytes", MaxCursorLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, api.Errorf(api.CodeInvalidRequest, "cursor is not one this API issued")
	}
	var w cursorWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return c, api.Errorf(api.CodeInvalidRequest, "cursor is not one this API issued")
	}
	c.Epoch = w.E
	for t, ps := range w.P {
		for _, p := range ps {
			if p[0] < 0 || p[0] > 1<<31-1 || p[1] < 0 {
				return c, api.Errorf(api.CodeInvalidRequest, "cursor names a bad position")
			}
			c.Positions = append(c.Positions, api.PartitionOffset{Topic: t, Partition: int32(p[0]), Offset: p[1]})
		}
	}
	return c, nil
}
