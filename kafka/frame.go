package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Framing. Every Kafka request and response is a frame: a big-endian int32
// size, then that many bytes. A request's bytes start with its header
// (api_key int16, api_version int16, correlation_id int32, client_id
// nullable string, and, for flexible versions, tagged fields), then the
// body that kmsg decodes. A response's bytes start with the correlation id
// and, for flexible versions other than ApiVersions, an empty tagged-field
// section, then the body kmsg encodes.

// minRequestSize is the smallest request frame: a header with a null
// client id and no body.
const minRequestSize = 2 + 2 + 4 + 2

// maxBodyUpfront is the most a frame's buffer is given before its bytes
// arrive: a larger declared size grows the buffer as the bytes come, so a
// client that declares 100 MiB and sends nothing holds 1 MiB, not 100.
const maxBodyUpfront = 1 << 20

// errFrameSize is a declared frame size outside [minRequestSize, limit].
type errFrameSize struct{ size, limit int32 }

func (e errFrameSize) Error() string {
	if e.size < minRequestSize {
		return fmt.Sprintf("request frame of %d bytes is shorter than a request header", e.size)
	}
	return fmt.Sprintf("request frame of %d bytes exceeds the limit of %d", e.size, e.limit)
}

// readSize reads a frame's size prefix and checks it against limit before
// anything is allocated for the frame.
func readSize(r io.Reader, limit int32) (int32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(b[:]))
	if n < minRequestSize || n > limit {
		return 0, errFrameSize{n, limit}
	}
	return n, nil
}

// readBody reads the n bytes of a frame whose size readSize checked, into
// buf when it is large enough, else into a buffer that starts at
// maxBodyUpfront (or n, if smaller) and doubles as bytes arrive. On error
// the bytes read so far are returned with it.
func readBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	buf = buf[:0]
	if cap(buf) < n && cap(buf) < maxBodyUpfront {
		buf = make([]byte, 0, min(n, maxBodyUpfront))
	}
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		k, err := io.ReadFull(r, buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// requestHeader is the header of one request.
type requestHeader struct {
	key           int16
	version       int16
	correlationID int32
	clientID      string // a null client id reads as "", as Kafka takes it
}

// errBadHeader is a request header that does not parse.
var errBadHeader = errors.New("malformed request header")

// parseHeader reads the header at the start of frame and returns it with
// the body after it. Whether the header carries tagged fields (header v2)
// depends on the API and version: flexible reports it for the key and
// version read.
func parseHeader(frame []byte, flexible func(key, version int16) bool) (requestHeader, []byte, error) {
	if len(frame) < minRequestSize {
		return requestHeader{}, nil, errBadHeader
	}
	h := requestHeader{
		key:           int16(binary.BigEndian.Uint16(frame[0:])),
		version:       int16(binary.BigEndian.Uint16(frame[2:])),
		correlationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	n := int16(binary.BigEndian.Uint16(frame[8:]))
	rest := frame[10:]
	switch {
	case n >= 0 && int(n) <= len(rest):
		h.clientID, rest = string(rest[:n]), rest[n:]
	case n != -1:
		return h, nil, errBadHeader
	}
	if flexible(h.key, h.version) {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return h, nil, err
		}
	}
	return h, rest, nil
}

// skipTags skips a tagged-field section: a count, then per field a tag, a
// size and that many bytes, all unsigned varints but the bytes.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errBadHeader
	}
	b = b[n:]
	for ; count > 0; count-- {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errBadHeader
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, errBadHeader
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// isFlexible reports whether a request of this key and version uses the
// flexible encoding (and so header v2). ApiVersions is flexible from v3 at
// any version, known or not: a client sending a version newer than served
// still sends header v2, and is answered with v0 (apiversions.go).
func isFlexible(key, version int16) bool {
	if key == kmsg.ApiVersions.Int16() {
		return version >= 3
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}

// appendResponse appends the frame of resp, answering correlation id
// corr, to dst[:0]. ApiVersions answers always take response header v0 (no
// tagged fields), whatever their version, so that a client that does not
// yet know what the broker serves can read them.
func appendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	dst = append(dst[:0], 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}
