package sink

// alreadyCompact reports whether v is a JSON value that json.Compact would
// accept and leave exactly as it is: valid, with no whitespace outside its
// strings. It is the archive's fast path: values produced as JSON are
// stored compacted, so most values pass, and for them the line takes v as
// it is instead of running json.Compact's byte-at-a-time state machine.
// false means "not sure" as much as "no": the caller then runs
// json.Compact, whose answer decides, so the archive's bytes are the same
// either way.
func alreadyCompact(v []byte) bool {
	c := compactCheck{b: v}
	if !c.value(0) {
		return false
	}
	return c.pos == len(v)
}

// compactCheck walks one JSON value; any whitespace between tokens, any
// doubt, is a "no".
type compactCheck struct {
	b   []byte
	pos int
}

// maxCompactDepth is the nesting the fast path follows; deeper values go
// to json.Compact (whose own limit is 10,000).
const maxCompactDepth = 512

func (c *compactCheck) value(depth int) bool {
	if c.pos >= len(c.b) || depth > maxCompactDepth {
		return false
	}
	switch ch := c.b[c.pos]; {
	case ch == '"':
		return c.str()
	case ch == '{':
		c.pos++
		if c.pos < len(c.b) && c.b[c.pos] == '}' {
			c.pos++
			return true
		}
		for {
			if c.pos >= len(c.b) || c.b[c.pos] != '"' || !c.str() {
				return false
			}
			if c.pos >= len(c.b) || c.b[c.pos] != ':' {
				return false
			}
			c.pos++
			if !c.value(depth + 1) {
				return false
			}
			if c.pos >= len(c.b) {
				return false
			}
			switch c.b[c.pos] {
			case ',':
				c.pos++
			case '}':
				c.pos++
				return true
			default:
				return false
			}
		}
	case ch == '[':
		c.pos++
		if c.pos < len(c.b) && c.b[c.pos] == ']' {
			c.pos++
			return true
		}
		for {
			if !c.value(depth + 1) {
				return false
			}
			if c.pos >= len(c.b) {
				return false
			}
			switch c.b[c.pos] {
			case ',':
				c.pos++
			case ']':
				c.pos++
				return true
			default:
				return false
			}
		}
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return false
}

func (c *compactCheck) literal(word string) bool {
	if len(c.b)-c.pos < len(word) || string(c.b[c.pos:c.pos+len(word)]) != word {
		return false
	}
	c.pos += len(word)
	return true
}

// str checks a string from its opening quote: no control character, only
// the escapes JSON has. Any other byte (UTF-8 or not) is taken as
// json.Compact takes it.
func (c *compactCheck) str() bool {
	c.pos++ // the opening quote
	for {
		// Eight bytes at a time while none of them needs a look.
		for c.pos+8 <= len(c.b) && !needsLook8(c.b[c.pos:c.pos+8]) {
			c.pos += 8
		}
		if c.pos >= len(c.b) {
			return false
		}
		switch ch := c.b[c.pos]; {
		case ch == '"':
			c.pos++
			return true
		case ch == '\\':
			if c.pos+1 >= len(c.b) {
				return false
			}
			switch c.b[c.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.pos += 2
			case 'u':
				if c.pos+6 > len(c.b) {
					return false
				}
				for _, h := range c.b[c.pos+2 : c.pos+6] {
					if !isHexDigit(h) {
						return false
					}
				}
				c.pos += 6
			default:
				return false
			}
		case ch < 0x20:
			return false
		default:
			c.pos++
		}
	}
}

// needsLook8 reports whether any of the eight bytes is a quote, a
// backslash or a control character.
func needsLook8(b []byte) bool {
	for _, ch := range b[:8] {
		if ch == '"' || ch == '\\' || ch < 0x20 {
			return true
		}
	}
	return false
}

func isHexDigit(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number checks JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *compactCheck) number() bool {
	if c.b[c.pos] == '-' {
		c.pos++
	}
	if c.pos >= len(c.b) {
		return false
	}
	switch ch := c.b[c.pos]; {
	case ch == '0':
		c.pos++
	case ch >= '1' && ch <= '9':
		c.digits()
	default:
		return false
	}
	if c.pos < len(c.b) && c.b[c.pos] == '.' {
		c.pos++
		if !c.digits() {
			return false
		}
	}
	if c.pos < len(c.b) && (c.b[c.pos] == 'e' || c.b[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.b) && (c.b[c.pos] == '+' || c.b[c.pos] == '-') {
			c.pos++
		}
		if !c.digits() {
			return false
		}
	}
	return true
}

// digits consumes one or more digits; false when there is none.
func (c *compactCheck) digits() bool {
	start := c.pos
	for c.pos < len(c.b) && c.b[c.pos] >= '0' && c.b[c.pos] <= '9' {
		c.pos++
	}
	return c.pos > start
}
