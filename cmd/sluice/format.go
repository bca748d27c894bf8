package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Record formats: how `sluice consume` prints a record and `sluice produce`
// reports a delivery. A format is either "json" (one JSON object per line,
// shaped as the API's group records) or a kcat-style template:
//
//	%t topic        %p partition   %o offset      %T timestamp (ms)
//	%k key          %K key length  %v or %s value %S value length
//	%h headers (k=v,k2=v2)         %% a percent sign
//	\n newline      \t tab         \r return      \\ a backslash
//
// A null key or value prints as nothing, and its length as -1.

// formatJSON is the format name that selects JSON lines.
const formatJSON = "json"

// shownRecord is a record as a format sees it: where it is and its bytes.
type shownRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64 // -1 when unknown
	Key       []byte
	Value     []byte
	Headers   []recordbatch.RecordHeader
}

// fmtPiece is one step of a template: literal bytes, or a field (verb != 0).
type fmtPiece struct {
	lit  []byte
	verb byte
}

// recordFormat renders records; build it with parseFormat.
type recordFormat struct {
	json   bool
	pieces []fmtPiece
}

// parseFormat compiles a format. Errors name the offending escape, so a
// typo is reported before anything is read or written.
func parseFormat(s string) (*recordFormat, error) {
	if s == formatJSON {
		return &recordFormat{json: true}, nil
	}
	f := &recordFormat{}
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			f.pieces = append(f.pieces, fmtPiece{lit: lit})
			lit = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '%':
			if i+1 == len(s) {
				return nil, fmt.Errorf("format %q ends with a lone %%", s)
			}
			i++
			switch v := s[i]; v {
			case '%':
				lit = append(lit, '%')
			case 't', 'p', 'o', 'T', 'k', 'K', 'v', 's', 'S', 'h':
				flush()
				if v == 's' {
					v = 'v'
				}
				f.pieces = append(f.pieces, fmtPiece{verb: v})
			default:
				return nil, fmt.Errorf("format %q: unknown escape %%%c (want %%t %%p %%o %%T %%k %%K %%v %%s %%S %%h or %%%%)", s, v)
			}
		case '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("format %q ends with a lone backslash", s)
			}
			i++
			switch v := s[i]; v {
			case 'n':
				lit = append(lit, '\n')
			case 't':
				lit = append(lit, '\t')
			case 'r':
				lit = append(lit, '\r')
			case '\\':
				lit = append(lit, '\\')
			default:
				return nil, fmt.Errorf("format %q: unknown escape \\%c (want \\n \\t \\r or \\\\)", s, v)
			}
		default:
			lit = append(lit, c)
		}
	}
	flush()
	return f, nil
}

// write renders r to w.
func (f *recordFormat) write(w io.Writer, r *shownRecord) error {
	if f.json {
		b, err := json.Marshal(jsonRecord(r))
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	var buf []byte
	for _, p := range f.pieces {
		switch p.verb {
		case 0:
			buf = append(buf, p.lit...)
		case 't':
			buf = append(buf, r.Topic...)
		case 'p':
			buf = strconv.AppendInt(buf, int64(r.Partition), 10)
		case 'o':
			buf = strconv.AppendInt(buf, r.Offset, 10)
		case 'T':
			buf = strconv.AppendInt(buf, r.Timestamp, 10)
		case 'k':
			buf = append(buf, r.Key...)
		case 'K':
			buf = strconv.AppendInt(buf, nullableLen(r.Key), 10)
		case 'v':
			buf = append(buf, r.Value...)
		case 'S':
			buf = strconv.AppendInt(buf, nullableLen(r.Value), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, h.Key...)
				buf = append(buf, '=')
				buf = append(buf, h.Value...)
			}
		}
	}
	_, err := w.Write(buf)
	return err
}

func nullableLen(b []byte) int64 {
	if b == nil {
		return -1
	}
	return int64(len(b))
}

// jsonRecord is r as the API renders a group record: a UTF-8 key as "key",
// other bytes as "key_b64"; a value that is valid JSON inline as "value",
// other bytes as "value_b64"; headers as an object.
func jsonRecord(r *shownRecord) api.GroupRecord {
	out := api.GroupRecord{Topic: r.Topic, Partition: r.Partition}
	out.Offset, out.Timestamp = r.Offset, r.Timestamp
	if r.Key != nil {
		s := string(r.Key)
		if utf8.Valid(r.Key) {
			out.Key = &s
		} else {
			s = base64.StdEncoding.EncodeToString(r.Key)
			out.KeyB64 = &s
		}
	}
	if r.Value != nil {
		if json.Valid(r.Value) {
			out.Value = json.RawMessage(r.Value)
		} else {
			s := base64.StdEncoding.EncodeToString(r.Value)
			out.ValueB64 = &s
		}
	}
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			out.Headers[h.Key] = string(h.Value)
		}
	}
	return out
}

// shownFromLog is a record decoded from the log.
func shownFromLog(topic string, partition int32, r *recordbatch.Record) shownRecord {
	return shownRecord{Topic: topic, Partition: partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers}
}

// shownFromGroup is a record of a group poll, its key, value and headers
// turned back into bytes (a JSON value is its compacted text).
func shownFromGroup(r *api.GroupRecord) (shownRecord, error) {
	s := shownRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	var err error
	switch {
	case r.Key != nil:
		s.Key = []byte(*r.Key)
	case r.KeyB64 != nil:
		if s.Key, err = base64.StdEncoding.DecodeString(*r.KeyB64); err != nil {
			return s, fmt.Errorf("record %s/%d@%d: key_b64: %w", r.Topic, r.Partition, r.Offset, err)
		}
	}
	switch {
	case r.Value != nil:
		s.Value = bytes.Clone(r.Value)
	case r.ValueB64 != nil:
		if s.Value, err = base64.StdEncoding.DecodeString(*r.ValueB64); err != nil {
			return s, fmt.Errorf("record %s/%d@%d: value_b64: %w", r.Topic, r.Partition, r.Offset, err)
		}
	}
	if len(r.Headers) > 0 {
		keys := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s.Headers = append(s.Headers, recordbatch.RecordHeader{Key: k, Value: []byte(r.Headers[k])})
		}
	}
	return s, nil
}
