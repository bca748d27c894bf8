package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
)

// Frames WebSocket clients send: a stream's {"credit":N}, and a group
// member's {"credit":N} and/or {"commit":"<cursor>"}. Both parsers are pure
// and fuzzed (FuzzCreditFrame, FuzzGroupFrame); a frame they refuse closes
// the connection with 1008 (policy violation).

// wsGroupFrame is a group member's frame.
type wsGroupFrame struct {
	Credit int64  `json:"credit,omitempty"`
	Commit string `json:"commit,omitempty"`
}

var errBadFrame = errors.New("a frame must be one JSON object in a text message")

// decodeFrame decodes a text frame into v: one JSON object, no field v does
// not have, nothing after it.
func decodeFrame(typ websocket.MessageType, b []byte, v any) error {
	if typ != websocket.MessageText {
		return errBadFrame
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return errBadFrame
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errBadFrame
	}
	return nil
}

// parseCreditFrame reads a stream client's {"credit":N}, 0 < N <= 2^40.
func parseCreditFrame(typ websocket.MessageType, b []byte) (int64, error) {
	var c api.Credit
	if err := decodeFrame(typ, b, &c); err != nil {
		return 0, err
	}
	if c.Credit <= 0 || c.Credit > maxCredit {
		return 0, errors.New("credit out of range")
	}
	return c.Credit, nil
}

// parseGroupFrame reads a group member's frame: credit 0 < N <= 2^40, a
// commit of a cursor of at most api.MaxCursorLen bytes, or both.
func parseGroupFrame(typ websocket.MessageType, b []byte) (wsGroupFrame, error) {
	var f wsGroupFrame
	if err := decodeFrame(typ, b, &f); err != nil {
		return f, err
	}
	if f.Credit < 0 || f.Credit > maxCredit || (f.Credit == 0 && f.Commit == "") || len(f.Commit) > api.MaxCursorLen {
		return wsGroupFrame{}, errors.New("credit out of range, or neither credit nor commit")
	}
	return f, nil
}
