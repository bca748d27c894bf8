package bench

import (
	"errors"
	"fmt"
	"math"
)

// scanBatch reads what the endpoint counts of a batch in format json (a
// JSON array of records as the group poll renders them), appending one
// pushedRecord per element to dst: its partition and offset members, and
// the length of its value member's JSON. It is one pass over the body
// that skips every other member without decoding it, so that taking a
// batch costs the endpoint little next to what sending it costs the
// pusher; it checks what it reads (the array, each element an object, its
// members and the partition and offset present), not the JSON of the
// members it skips beyond their nesting and strings.
func scanBatch(dst []pushedRecord, body []byte) ([]pushedRecord, error) {
	s := batchScanner{b: body}
	if !s.expect('[') {
		return dst, s.fail("a batch is a JSON array")
	}
	if s.peek() == ']' {
		s.i++
		return dst, s.end()
	}
	for {
		r, err := s.record()
		if err != nil {
			return dst, err
		}
		dst = append(dst, r)
		switch s.next() {
		case ',':
		case ']':
			return dst, s.end()
		default:
			return dst, s.fail("a batch's elements are separated by commas")
		}
	}
}

type batchScanner struct {
	b []byte
	i int
}

func (s *batchScanner) fail(what string) error {
	return fmt.Errorf("%s (byte %d of %d)", what, s.i, len(s.b))
}

func (s *batchScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after white space, 0 at the end.
func (s *batchScanner) peek() byte {
	s.space()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// next takes the next byte after white space, 0 at the end.
func (s *batchScanner) next() byte {
	c := s.peek()
	if c != 0 {
		s.i++
	}
	return c
}

func (s *batchScanner) expect(c byte) bool { return s.next() == c }

// end checks that nothing but white space follows.
func (s *batchScanner) end() error {
	if s.peek() != 0 {
		return s.fail("bytes after the batch's array")
	}
	return nil
}

// record reads one element: an object with partition and offset.
func (s *batchScanner) record() (pushedRecord, error) {
	r := pushedRecord{partition: -1, offset: -1}
	if !s.expect('{') {
		return r, s.fail("a batch's element is an object")
	}
	if s.peek() == '}' {
		s.i++
		return r, s.fail("an element without partition and offset")
	}
	for {
		if s.peek() != '"' {
			return r, s.fail("a member's name is a string")
		}
		k0 := s.i + 1
		if err := s.skip(); err != nil {
			return r, err
		}
		key := s.b[k0 : s.i-1]
		if !s.expect(':') {
			return r, s.fail("a member's name is followed by a colon")
		}
		s.space()
		v0 := s.i
		if err := s.skip(); err != nil {
			return r, err
		}
		v := s.b[v0:s.i]
		switch string(key) {
		case "partition":
			p, ok := digits(v, math.MaxInt32)
			if !ok {
				return r, s.fail("partition is not a partition")
			}
			r.partition = int32(p)
		case "offset":
			o, ok := digits(v, math.MaxInt64)
			if !ok {
				return r, s.fail("offset is not an offset")
			}
			r.offset = o
		case "value":
			r.bytes = len(v)
		}
		switch s.next() {
		case ',':
		case '}':
			if r.partition < 0 || r.offset < 0 {
				return r, s.fail("an element without partition and offset")
			}
			return r, nil
		default:
			return r, s.fail("an object's members are separated by commas")
		}
	}
}

// digits reads a non-negative decimal integer of at most limit.
func digits(v []byte, limit int64) (int64, bool) {
	if len(v) == 0 || len(v) > 19 || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

var errTruncated = errors.New("the batch ends inside a value")

// skip moves past the value at s.i: a string, an object or array (its
// nesting and strings followed), or a literal or number.
func (s *batchScanner) skip() error {
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch c {
		case '"':
			for {
				if s.i >= len(s.b) {
					return errTruncated
				}
				c := s.b[s.i]
				s.i++
				if c == '\\' {
					s.i++
				} else if c == '"' {
					break
				}
			}
		case '{', '[':
			depth++
			continue
		case '}', ']':
			if depth == 0 {
				s.i-- // the end of what holds this value
				return nil
			}
			depth--
		case ',', ' ', '\t', '\r', '\n', ':':
			if depth == 0 {
				s.i--
				return nil
			}
			continue
		default:
			continue // a literal's or a number's byte
		}
		if depth == 0 {
			return nil
		}
	}
	if depth > 0 {
		return errTruncated
	}
	return nil
}
