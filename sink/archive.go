package sink

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/tier"
)

// The S3 archive's layout, under a prefix:
//
//	<prefix>/<topic>/<partition>/<first:020d>-<last:020d>.ndjson.gz  records first..last, gzipped
//	<prefix>/<topic>/<partition>/<first:020d>-<last:020d>.ndjson     the same, uncompressed
//	<prefix>/<topic>/<partition>/fence.json                          {"group","fence","next","first","compression"}
//
// Zero-padded offsets make listing order offset order.

// Compressions of archive objects (S3Options.Compression).
const (
	// CompressionGzip: gzip at BestSpeed, objects named .ndjson.gz. The
	// default.
	CompressionGzip = "gzip"
	// CompressionNone: plain NDJSON, objects named .ndjson. Objects take
	// more room and the sink less CPU.
	CompressionNone = "none"
)

const (
	ndjsonSuffix = ".ndjson"
	gzipSuffix   = ".gz"
	fenceName    = "fence.json"
)

// objectSuffix is the end of the names of objects compressed so.
func objectSuffix(compression string) string {
	if compression == CompressionNone {
		return ndjsonSuffix
	}
	return ndjsonSuffix + gzipSuffix
}

// validCompression reports whether c names a compression ("" is gzip).
func validCompression(c string) bool {
	return c == "" || c == CompressionGzip || c == CompressionNone
}

// partDir is the folder of a partition's objects, ending in "/".
func partDir(prefix string, tp api.TopicPartition) string {
	return fmt.Sprintf("%s%s/%d/", prefixSlash(prefix), tp.Topic, tp.Partition)
}

func prefixSlash(prefix string) string {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return ""
	}
	return prefix + "/"
}

// ObjectKey names the archive object holding offsets first..last of tp,
// compressed so ("" is gzip).
func ObjectKey(prefix string, tp api.TopicPartition, first, last int64, compression string) string {
	return fmt.Sprintf("%s%020d-%020d%s", partDir(prefix, tp), first, last, objectSuffix(compression))
}

// parseObjectName returns the range an object's base name covers and the
// compression its name says.
func parseObjectName(base string) (first, last int64, compression string, ok bool) {
	compression = CompressionNone
	if b, gz := strings.CutSuffix(base, gzipSuffix); gz {
		base, compression = b, CompressionGzip
	}
	stem, found := strings.CutSuffix(base, ndjsonSuffix)
	if !found || len(stem) != 41 || stem[20] != '-' {
		return 0, 0, "", false
	}
	first, err1 := strconv.ParseInt(stem[:20], 10, 64)
	last, err2 := strconv.ParseInt(stem[21:], 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return 0, 0, "", false
	}
	return first, last, compression, true
}

// ArchivedObject is one object of a partition's archive.
type ArchivedObject struct {
	Key         string
	First, Last int64
	Size        int64
	ETag        string
	Compression string // CompressionGzip or CompressionNone, from the name
}

// ListArchive returns tp's archive objects in listing order, which is
// ascending first offset. Other names in the folder are skipped.
func ListArchive(ctx context.Context, objs Objects, prefix string, tp api.TopicPartition) ([]ArchivedObject, error) {
	dir := partDir(prefix, tp)
	var out []ArchivedObject
	err := objs.List(ctx, dir, func(info tier.ObjectInfo) error {
		rest := strings.TrimPrefix(info.Key, dir)
		if strings.Contains(rest, "/") {
			return nil
		}
		if first, last, comp, ok := parseObjectName(rest); ok {
			out = append(out, ArchivedObject{Key: info.Key, First: first, Last: last, Size: info.Size, ETag: info.ETag, Compression: comp})
		}
		return nil
	})
	return out, err
}

// archiveLine renders a record as one JSON line, as the gateway renders
// fetched records: a UTF-8 key as key, other bytes as key_b64; a JSON value
// inline (compacted) as value, other bytes as value_b64; headers as an
// object. The bytes are those json.Marshal makes of the api.FetchedRecord
// (archive_test.go checks it), written without reflection and with one
// pass over the value.
func archiveLine(r Record) ([]byte, error) {
	return appendArchiveLine(nil, r)
}

// appendArchiveLine appends r's line to dst.
func appendArchiveLine(dst []byte, r Record) ([]byte, error) {
	dst = append(dst, `{"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, r.Timestamp, 10)
	if r.Key != nil {
		field, key := `,"key":`, string(r.Key)
		if !utf8.Valid(r.Key) {
			field, key = `,"key_b64":`, base64.StdEncoding.EncodeToString(r.Key)
		}
		b, err := json.Marshal(key)
		if err != nil {
			return nil, err
		}
		dst = append(append(dst, field...), b...)
	}
	if r.Value != nil {
		// json.Compact validates and compacts in one pass; what it refuses
		// is not JSON and goes as base64. Marshal also escapes <, >, &,
		// U+2028 and U+2029 in a raw value: so do we.
		mark := len(dst)
		dst = append(dst, `,"value":`...)
		var buf bytes.Buffer
		compact := len(r.Value) > 0 && alreadyCompact(r.Value)
		if compact {
			buf = *bytes.NewBuffer(r.Value) // json.Compact's answer, without its cost
		}
		if compact || (len(r.Value) > 0 && json.Compact(&buf, r.Value) == nil) {
			if v := buf.Bytes(); htmlSpecial(v) {
				var esc bytes.Buffer
				json.HTMLEscape(&esc, v)
				dst = append(dst, esc.Bytes()...)
			} else {
				dst = append(dst, v...)
			}
		} else {
			dst = append(dst[:mark], `,"value_b64":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, r.Value)
			dst = append(dst, '"')
		}
	}
	if len(r.Headers) > 0 {
		b, err := json.Marshal(r.Headers)
		if err != nil {
			return nil, err
		}
		dst = append(append(dst, `,"headers":`...), b...)
	}
	return append(dst, '}', '\n'), nil
}

// htmlSpecial reports whether v holds a byte json.HTMLEscape changes: <, >,
// & or the UTF-8 of U+2028 or U+2029. bytes.ContainsAny with those two
// runes in its set decodes v rune by rune; an ASCII set and a search for
// their common lead bytes run at memory speed.
func htmlSpecial(v []byte) bool {
	if bytes.ContainsAny(v, "<>&") {
		return true
	}
	for {
		i := bytes.Index(v, []byte("\xe2\x80"))
		if i < 0 || i+2 >= len(v) {
			return false
		}
		if c := v[i+2]; c == 0xa8 || c == 0xa9 {
			return true
		}
		v = v[i+2:]
	}
}

// encodeObject compresses NDJSON lines, or with CompressionNone returns
// them as they are (the object then owns them). The output is a function
// of the lines and the compression alone (no name or time in the gzip
// header, a fixed level), so a range rebuilt from the log has the bytes of
// the first upload. The level is BestSpeed: on record values that compress
// poorly the default level costs ten times the CPU for output about 8%
// smaller, and compression is what bounds the sink's rate.
func encodeObject(lines []byte, compression string) ([]byte, error) {
	if compression == CompressionNone {
		return lines, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(lines)/2 + 64)
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(lines); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeArchiveObject renders recs as an archive object's bytes, compressed
// so ("" is gzip): the bytes the S3 archive uploads for them, every time.
func EncodeArchiveObject(recs []Record, compression string) ([]byte, error) {
	data, _, err := encodeRecords(recs, compression)
	return data, err
}

// encodeRecords renders recs as one object's bytes, and says how many
// NDJSON bytes they hold.
func encodeRecords(recs []Record, compression string) ([]byte, int, error) {
	var lines []byte
	for _, r := range recs {
		l, err := appendArchiveLine(lines, r)
		if err != nil {
			return nil, 0, fmt.Errorf("offset %d: %w", r.Offset, err)
		}
		lines = l
	}
	data, err := encodeObject(lines, compression)
	return data, len(lines), err
}

// DecodeArchiveObject returns the records an object's bytes hold, as
// fetched records, gzipped or not: a gzip stream starts with 0x1f 0x8b,
// an NDJSON line with '{'.
func DecodeArchiveObject(data []byte) ([]api.FetchedRecord, error) {
	var zr io.Reader = bytes.NewReader(data)
	if len(data) > 0 && data[0] != '{' {
		gz, err := gzip.NewReader(zr)
		if err != nil {
			return nil, err
		}
		zr = gz
	}
	var out []api.FetchedRecord
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var fr api.FetchedRecord
		if err := json.Unmarshal(sc.Bytes(), &fr); err != nil {
			return nil, fmt.Errorf("line %d: %w", len(out)+1, err)
		}
		out = append(out, fr)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, err
	}
	return out, nil
}
