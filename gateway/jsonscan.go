package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// A hand-written scanner for produce bodies. It validates JSON as strictly as
// encoding/json does for the parts it keeps, but instead of building values it
// records where each record field's value starts and ends, so a record's value
// is stored as the very bytes the producer sent (compacted only when they hold
// insignificant white space). This is the hot path of produce: at 100-byte
// records it runs several times faster than decoding into structs.
//
// It is stricter than encoding/json where a producer's mistake would
// otherwise pass silently: a field it does not know (including a known one
// in another case, such as "Value") and a field given twice are errors, not
// skipped or overwritten. Rare shapes (escaped strings, invalid UTF-8 in
// header text) fall back to encoding/json for that part only.
//
// It also enforces the per-request limits while it scans (parseLimits):
// records per request, headers per record, and the memory the scan makes
// the request hold, charged to the request's share of the gateway's produce
// budget, so a body of millions of tiny records is refused before its
// record table grows.

// maxJSONDepth bounds nesting inside a value.
const maxJSONDepth = 1000

type scanner struct {
	b   []byte
	pos int
	err error
	// spaced is set when the value just skipped held insignificant white space.
	spaced bool
	lim    *parseLimits
}

// parseLimits bound one request's scan. One value serves every scanner of a
// request (NDJSON scans line by line).
type parseLimits struct {
	maxRecords   int // max.records.per.request
	maxHeaders   int // max.headers.per.record
	maxSequences int // entries of "sequences": the topic's partitions
	// mem, when not nil, is charged for what the scan keeps: record and
	// header table entries and copies of unescaped, decoded or compacted
	// bytes. Charges are taken from it in steps of chargeStep; a charge
	// that does not fit ends the scan with its error.
	mem  *reservation
	owed int64 // charged, not yet taken from mem
}

// chargeStep is how much a scan charges before it takes from the budget:
// one atomic operation per 64 KiB, not one per record.
const chargeStep = 64 << 10

// What a scanned record and header cost beyond their bytes in the body,
// until the request ends: the pending record (twice: a growing table has up
// to half its capacity spare), its recordbatch.Record and api.RecordOffset, and its
// share of the offsets answer (36 bytes); a header's table entry. Batches
// are charged when they are encoded.
var (
	recordCost = int64(2*unsafe.Sizeof(pendingRecord{}) + unsafe.Sizeof(recordbatch.Record{}) + unsafe.Sizeof(api.RecordOffset{}) + 36)
	headerCost = int64(unsafe.Sizeof(recordbatch.RecordHeader{}))
)

// settle takes what the scan still owes from the budget.
func (l *parseLimits) settle() error {
	if l.mem == nil || l.owed == 0 {
		return nil
	}
	n := l.owed
	l.owed = 0
	return l.mem.grow(n)
}

// charge counts n bytes the scan keeps.
func (s *scanner) charge(n int64) {
	l := s.lim
	if l.mem == nil {
		return
	}
	l.owed += n
	if l.owed >= chargeStep {
		if err := l.settle(); err != nil && s.err == nil {
			s.err = err
		}
	}
}

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = api.Errorf(api.CodeInvalidRequest, "invalid JSON at byte %d: "+format, append([]any{s.pos}, args...)...)
	}
}

// failRecord refuses record i with INVALID_RECORD.
func (s *scanner) failRecord(i int, format string, args ...any) {
	if s.err == nil {
		s.err = api.Errorf(api.CodeInvalidRecord, "record %d: "+format, append([]any{i}, args...)...)
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) ws() {
	for s.pos < len(s.b) && isSpace(s.b[s.pos]) {
		s.pos++
	}
}

// innerWS skips white space inside a value and remembers that it did.
func (s *scanner) innerWS() {
	start := s.pos
	s.ws()
	if s.pos > start {
		s.spaced = true
	}
}

func (s *scanner) peek() byte {
	if s.pos < len(s.b) {
		return s.b[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) bool {
	if s.pos < len(s.b) && s.b[s.pos] == c {
		s.pos++
		return true
	}
	if s.pos >= len(s.b) {
		s.fail("unexpected end, want %q", c)
	} else {
		s.fail("unexpected %q, want %q", s.b[s.pos], c)
	}
	return false
}

// str skips a string starting at its opening quote and returns its contents
// (still escaped) and whether it holds escapes.
func (s *scanner) str() (raw []byte, escaped bool) {
	if !s.expect('"') {
		return nil, false
	}
	start := s.pos
	for s.pos < len(s.b) {
		// Plain characters are the common case: skip them eight at a time,
		// then one at a time up to the special byte (in locals: the loop
		// must not store through s on every step).
		b, pos := s.b, s.pos
		for pos+8 <= len(b) && !hasSpecial8(binary.LittleEndian.Uint64(b[pos:pos+8])) {
			pos += 8
		}
		for pos < len(b) && !strSpecial[b[pos]] {
			pos++
		}
		s.pos = pos
		if s.pos >= len(s.b) {
			break
		}
		c := s.b[s.pos]
		switch {
		case c == '"':
			raw = s.b[start:s.pos]
			s.pos++
			return raw, escaped
		case c == '\\':
			escaped = true
			if s.pos+1 >= len(s.b) {
				s.fail("unterminated escape")
				return nil, false
			}
			switch s.b[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.b) {
					s.fail("short \\u escape")
					return nil, false
				}
				for _, h := range s.b[s.pos+2 : s.pos+6] {
					if !isHex(h) {
						s.fail("bad \\u escape")
						return nil, false
					}
				}
				s.pos += 6
			default:
				s.fail("bad escape \\%c", s.b[s.pos+1])
				return nil, false
			}
		case c < 0x20:
			s.fail("control character in string")
			return nil, false
		default:
			s.pos++
		}
	}
	s.fail("unterminated string")
	return nil, false
}

// hasSpecial8 reports whether any of the eight bytes in x is a quote, a
// backslash or a control character (below 0x20), with the classic
// "has zero byte" bit trick: (v - 0x01..) & ^v & 0x80.. is non-zero exactly
// when some byte of v is zero.
func hasSpecial8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	slash := x ^ (ones * '\\')
	// A byte below 0x20: subtracting 0x20 borrows into its high bit, and the
	// byte's own high bit was clear.
	ctl := (x - ones*0x20) & ^x
	return ((quote-ones)&^quote|(slash-ones)&^slash|ctl)&highs != 0
}

// strSpecial marks the bytes that end a run of plain string characters.
var strSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number skips a JSON number.
func (s *scanner) number() {
	start := s.pos
	if s.peek() == '-' {
		s.pos++
	}
	switch {
	case s.peek() == '0':
		s.pos++
	case isDigit(s.peek()):
		for isDigit(s.peek()) {
			s.pos++
		}
	default:
		s.fail("bad number")
		return
	}
	if s.peek() == '.' {
		s.pos++
		if !isDigit(s.peek()) {
			s.fail("bad fraction")
			return
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !isDigit(s.peek()) {
			s.fail("bad exponent")
			return
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	if s.pos == start {
		s.fail("bad number")
	}
}

func (s *scanner) literal(word string) {
	if !bytes.HasPrefix(s.b[s.pos:], []byte(word)) {
		s.fail("bad literal")
		return
	}
	s.pos += len(word)
}

// value skips one JSON value and returns its raw bytes.
func (s *scanner) value(depth int) []byte {
	if depth > maxJSONDepth {
		s.fail("nested too deep")
		return nil
	}
	start := s.pos
	switch c := s.peek(); {
	case c == '"':
		s.str()
	case c == '{':
		s.list('}', func() {
			s.str()
			s.innerWS()
			s.expect(':')
			s.innerWS()
			s.value(depth + 1)
		})
	case c == '[':
		s.list(']', func() { s.value(depth + 1) })
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	case c == '-' || isDigit(c):
		s.number()
	case s.pos >= len(s.b):
		s.fail("unexpected end")
	default:
		s.fail("unexpected %q", c)
	}
	if s.err != nil {
		return nil
	}
	return s.b[start:s.pos]
}

// list scans the comma-separated items of an object or array whose opening
// byte is at the cursor, up to the closing byte.
func (s *scanner) list(closing byte, item func()) {
	s.pos++
	s.innerWS()
	if s.peek() == closing {
		s.pos++
		return
	}
	for s.err == nil {
		item()
		s.innerWS()
		if s.peek() != ',' {
			s.expect(closing)
			return
		}
		s.pos++
		s.innerWS()
	}
}

// fieldValue skips a value and returns it compacted.
func (s *scanner) fieldValue() []byte {
	s.spaced = false
	v := s.value(0)
	if s.spaced && v != nil {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err == nil {
			s.charge(int64(b.Cap()))
			return b.Bytes()
		}
	}
	return v
}

// object walks an object's members, calling member with each key (unescaped)
// positioned at the value, which member must consume.
func (s *scanner) object(member func(key []byte)) {
	s.ws()
	if !s.expect('{') {
		return
	}
	s.ws()
	if s.peek() == '}' {
		s.pos++
		return
	}
	for s.err == nil {
		raw, escaped := s.str()
		if s.err != nil {
			return
		}
		key := raw
		if escaped {
			var k string
			if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &k); err != nil {
				s.fail("bad key: %v", err)
				return
			}
			key = []byte(k)
		}
		s.ws()
		s.expect(':')
		s.ws()
		if s.err != nil {
			return
		}
		member(key)
		s.ws()
		if s.peek() == ',' {
			s.pos++
			s.ws()
			continue
		}
		s.expect('}')
		return
	}
}

// Fields of a record object, as bits of the set of those seen.
const (
	fieldKey = 1 << iota
	fieldValue
	fieldKeyB64
	fieldValueB64
	fieldPartition
	fieldTimestamp
	fieldHeaders
)

// record scans one record object, the i-th of its request.
func (s *scanner) record(i int) pendingRecord {
	pr := pendingRecord{partition: -1}
	var keyB64, valueB64 []byte
	var haveKeyB64, haveValueB64 bool
	var seen uint8
	s.object(func(key []byte) {
		var f uint8
		switch string(key) {
		case "key":
			f = fieldKey
		case "value":
			f = fieldValue
		case "key_b64":
			f = fieldKeyB64
		case "value_b64":
			f = fieldValueB64
		case "partition":
			f = fieldPartition
		case "timestamp":
			f = fieldTimestamp
		case "headers":
			f = fieldHeaders
		default:
			s.failRecord(i, "unknown field %q (a record has key, value, key_b64, value_b64, headers, partition, timestamp)", key)
			return
		}
		if seen&f != 0 {
			s.failRecord(i, "field %q appears twice", key)
			return
		}
		seen |= f
		switch f {
		case fieldKey:
			v := s.fieldValue()
			switch {
			case v == nil || string(v) == "null":
			case v[0] == '"':
				pr.key = unquote(s, v)
			default:
				pr.key = v
			}
		case fieldValue:
			if v := s.fieldValue(); v != nil && string(v) != "null" {
				pr.value = v
			}
		case fieldKeyB64:
			keyB64, haveKeyB64 = s.b64Field()
		case fieldValueB64:
			valueB64, haveValueB64 = s.b64Field()
		case fieldPartition:
			if n, ok := s.optionalInt("partition", 0, 1<<31-1); ok {
				pr.partition = int32(n)
			}
		case fieldTimestamp:
			pr.timestamp, _ = s.optionalInt("timestamp", 0, 1<<62)
		case fieldHeaders:
			pr.headers = s.headers(i)
		}
	})
	if s.err != nil {
		return pr
	}
	if haveKeyB64 {
		pr.key = decodeB64(s, keyB64, i, "key_b64")
	}
	if haveValueB64 {
		pr.value = decodeB64(s, valueB64, i, "value_b64")
	}
	return pr
}

// headers scans record i's headers object (or null), of string values,
// into headers sorted by name; a name given twice is an error, as are more
// than max.headers.per.record of them. A null value is an empty one.
func (s *scanner) headers(i int) []recordbatch.RecordHeader {
	switch s.peek() {
	case 'n':
		s.literal("null")
		return nil
	case '{':
	default:
		s.failRecord(i, "headers must be an object of strings")
		return nil
	}
	var hs []recordbatch.RecordHeader
	s.object(func(name []byte) {
		if len(hs) == s.lim.maxHeaders {
			s.failRecord(i, "more than %d headers (%s)", s.lim.maxHeaders, api.LimitMaxHeadersPerRecord)
			return
		}
		var v []byte
		switch s.peek() {
		case 'n':
			s.literal("null")
			v = []byte{}
		case '"':
			raw, escaped := s.str()
			v = s.text(raw, escaped)
		default:
			s.failRecord(i, "header %q is not a string", name)
			return
		}
		k := string(s.text(name, false))
		hs = append(hs, recordbatch.RecordHeader{Key: k, Value: v})
		s.charge(headerCost + int64(len(k)))
	})
	if s.err != nil || len(hs) < 2 {
		return hs
	}
	slices.SortFunc(hs, func(a, b recordbatch.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	for j := 1; j < len(hs); j++ {
		if hs[j-1].Key == hs[j].Key {
			s.failRecord(i, "header %q appears twice", hs[j].Key)
			return nil
		}
	}
	return hs
}

// text returns a string's contents as the UTF-8 bytes encoding/json would
// decode it to: raw itself when it holds no escape and is valid UTF-8 (the
// common case, no copy), else a decoded copy, with each invalid byte
// replaced by U+FFFD.
func (s *scanner) text(raw []byte, escaped bool) []byte {
	if !escaped && utf8.Valid(raw) {
		return raw
	}
	var str string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &str); err != nil {
		s.fail("bad string: %v", err)
		return nil
	}
	s.charge(int64(len(str)))
	return []byte(str)
}

// b64Field reads a string field holding base64; null counts as absent.
func (s *scanner) b64Field() ([]byte, bool) {
	if s.peek() == 'n' {
		s.literal("null")
		return nil, false
	}
	raw, escaped := s.str()
	if escaped {
		raw = unquote(s, append(append([]byte{'"'}, raw...), '"'))
	}
	return raw, s.err == nil
}

func decodeB64(s *scanner, raw []byte, i int, field string) []byte {
	out := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
	s.charge(int64(len(out)))
	n, err := base64.StdEncoding.Decode(out, raw)
	if err != nil && s.err == nil {
		s.err = api.Errorf(api.CodeInvalidRecord, "record %d: %s is not base64: %v", i, field, err)
	}
	return out[:n]
}

// intField reads an integer field within [lo, hi].
func (s *scanner) intField(name string, lo, hi int64) int64 {
	v := s.value(0)
	if s.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < lo || n > hi {
		s.err = api.Errorf(api.CodeInvalidRecord, "%s must be an integer from %d to %d, got %s", name, lo, hi, v)
		return 0
	}
	return n
}

// optionalInt reads an integer field where null means absent (ok false).
func (s *scanner) optionalInt(name string, lo, hi int64) (int64, bool) {
	if s.peek() == 'n' {
		s.literal("null")
		return 0, false
	}
	return s.intField(name, lo, hi), s.err == nil
}

// unquote turns a JSON string literal (with quotes) into its bytes.
func unquote(s *scanner, lit []byte) []byte {
	if bytes.IndexByte(lit, '\\') < 0 {
		return lit[1 : len(lit)-1]
	}
	var str string
	if err := json.Unmarshal(lit, &str); err != nil {
		s.fail("bad string: %v", err)
		return nil
	}
	s.charge(int64(len(str)))
	return []byte(str)
}

// end checks that only white space follows.
func (s *scanner) end() {
	s.ws()
	if s.err == nil && s.pos != len(s.b) {
		s.fail("data after the JSON value")
	}
}

// validJSON reports whether b is one JSON value (white space around it
// allowed), as json.Valid does, several times faster: a fetched record's
// value is checked with it to choose between "value" and "value_b64". A
// value nested deeper than maxJSONDepth is refused (json.Valid allows
// 10,000 levels), so it comes back in base64, as the produce routes would
// have refused it.
func validJSON(b []byte) bool {
	s := scanner{b: b, lim: &parseLimits{}}
	s.ws()
	s.value(0)
	s.ws()
	return s.err == nil && s.pos == len(b)
}
