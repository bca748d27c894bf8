package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
)

var frameSeeds = []string{
	`{"credit":1}`, `{"credit":1099511627776}`, `{"credit":1099511627777}`, `{"credit":0}`, `{"credit":-1}`,
	`{"credit":9223372036854775808}`, `{"credit":1.5}`, `{"credit":"5"}`, `{"credit":5,"junk":1}`,
	`{"credit":5}{"credit":6}`, `{"credit":5} `, ` {"credit":5}`, `[{"credit":5}]`, `null`, `5`, ``, "\x00\xff",
	`{"commit":"abc"}`, `{"credit":3,"commit":"abc"}`, `{"commit":""}`, `{"Credit":2}`, `{"credit":1,"credit":2}`,
	`{"commit":"` + strings.Repeat("c", api.MaxCursorLen+1) + `"}`,
}

// FuzzCreditFrame: a stream's frame is accepted only as a text message
// holding one JSON object whose credit is within (0, 2^40], and the credit
// accepted is the one the frame says.
func FuzzCreditFrame(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add(s, true)
	}
	f.Add(`{"credit":5}`, false)
	f.Fuzz(func(t *testing.T, frame string, text bool) {
		typ := websocket.MessageBinary
		if text {
			typ = websocket.MessageText
		}
		credit, err := parseCreditFrame(typ, []byte(frame))
		if err != nil {
			return
		}
		if !text || credit <= 0 || credit > maxCredit || !json.Valid([]byte(frame)) {
			t.Fatalf("frame %q (text %v) accepted with credit %d", frame, text, credit)
		}
		var m map[string]json.Number
		if err := json.Unmarshal([]byte(frame), &m); err != nil {
			t.Fatalf("accepted frame %q is not an object of numbers: %v", frame, err)
		}
		for _, v := range m {
			if n, err := v.Int64(); err != nil || n != credit && len(m) == 1 {
				t.Fatalf("frame %q parsed as credit %d", frame, credit)
			}
		}
	})
}

// FuzzGroupFrame: a group member's frame is accepted only as a text
// message holding one JSON object with credit within (0, 2^40], a commit
// of at most api.MaxCursorLen bytes, or both; what is accepted
// round-trips through JSON unchanged.
func FuzzGroupFrame(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add(s, true)
	}
	f.Add(`{"commit":"abc"}`, false)
	f.Fuzz(func(t *testing.T, frame string, text bool) {
		typ := websocket.MessageBinary
		if text {
			typ = websocket.MessageText
		}
		fr, err := parseGroupFrame(typ, []byte(frame))
		if err != nil {
			return
		}
		if !text || fr.Credit < 0 || fr.Credit > maxCredit || (fr.Credit == 0 && fr.Commit == "") || len(fr.Commit) > api.MaxCursorLen {
			t.Fatalf("frame %q (text %v) accepted as %+v", frame, text, fr)
		}
		b, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseGroupFrame(websocket.MessageText, b)
		if err != nil || again != fr {
			t.Fatalf("frame %q parsed as %+v, re-encoded %s parses as %+v, %v", frame, fr, b, again, err)
		}
	})
}
