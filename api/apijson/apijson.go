// Package apijson writes api's records as JSON by hand, for the gateway's
// answers and the pushers' request bodies alike: json.Marshal walks each
// record by reflection and passes every inline value through a second
// validating compaction (json.RawMessage is re-compacted and HTML-escaped),
// which was the largest cost of a JSON fetch. Here a value is copied as
// stored: whoever made the api.FetchedRecord already checked that it is
// valid JSON, and JSON produce stores it compacted. Strings are escaped as
// encoding/json escapes them (HTML characters included), so the two
// encodings differ only in that values keep their own bytes.
package apijson

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
)

// AppendGroupRecords encodes records with their topics and partitions as a
// JSON array.
func AppendGroupRecords(dst []byte, recs []api.GroupRecord) []byte {
	dst = append(dst, '[')
	for i := range recs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendGroupRecord(dst, &recs[i])
	}
	return append(dst, ']')
}

// AppendGroupRecord encodes one record with its topic and partition.
func AppendGroupRecord(dst []byte, r *api.GroupRecord) []byte {
	dst = append(dst, `{"topic":`...)
	dst = AppendString(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, ',')
	dst = AppendRecordFields(dst, &r.FetchedRecord)
	return append(dst, '}')
}

// AppendRecordFields writes r's fields (no braces) in api.FetchedRecord's
// order, leaving out those encoding/json's omitempty would.
func AppendRecordFields(dst []byte, r *api.FetchedRecord) []byte {
	dst = append(dst, `"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, r.Timestamp, 10)
	if r.Key != nil {
		dst = append(dst, `,"key":`...)
		dst = AppendString(dst, *r.Key)
	}
	if r.KeyB64 != nil {
		dst = append(dst, `,"key_b64":`...)
		dst = AppendString(dst, *r.KeyB64)
	}
	if len(r.Value) > 0 {
		dst = append(dst, `,"value":`...)
		dst = append(dst, r.Value...)
	}
	if r.ValueB64 != nil {
		dst = append(dst, `,"value_b64":`...)
		dst = AppendString(dst, *r.ValueB64)
	}
	if len(r.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		keys := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json sorts map keys
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			dst = AppendString(dst, r.Headers[k])
		}
		dst = append(dst, '}')
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// AppendString writes s as a JSON string exactly as encoding/json does by
// default: ", \ and control characters escaped (\b \f \n \r \t by name),
// <, > and & as \u003c \u003e \u0026, U+2028 and U+2029 escaped, and
// invalid UTF-8 replaced by U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
