package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func sizePrefix(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// A frame's size is checked against the limit from its 4-byte prefix
// alone: nothing after it is read, so nothing is allocated for it.
func TestReadSizeChecksTheLimitFirst(t *testing.T) {
	tests := []struct {
		name    string
		size    int32
		wantErr bool
	}{
		{"at the limit", 1000, false},
		{"one past the limit", 1001, true},
		{"huge", 1 << 30, true},
		{"negative", -1, true},
		{"shorter than a header", minRequestSize - 1, true},
		{"a bare header", minRequestSize, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A reader that fails after the prefix: readSize must not touch it.
			r := io.MultiReader(bytes.NewReader(sizePrefix(tt.size)), iotest.ErrReader(errors.New("read past the size prefix")))
			n, err := readSize(r, 1000)
			var fe errFrameSize
			switch {
			case tt.wantErr && !errors.As(err, &fe):
				t.Fatalf("err %v, want errFrameSize", err)
			case !tt.wantErr && (err != nil || n != tt.size):
				t.Fatalf("n %d err %v", n, err)
			}
		})
	}
}

// A declared size is not allocated up front: a client that declares a large
// frame and sends a few bytes makes the buffer no larger than maxBodyUpfront.
func TestReadBodyGrowsWithTheBytesThatArrive(t *testing.T) {
	buf, err := readBody(bytes.NewReader([]byte("0123456789")), nil, 100<<20)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v", err)
	}
	if len(buf) != 10 || cap(buf) > maxBodyUpfront {
		t.Fatalf("read %d bytes into a buffer of %d", len(buf), cap(buf))
	}

	// A whole frame larger than maxBodyUpfront arrives byte-exact, in pieces.
	want := bytes.Repeat([]byte("abcdefgh"), (3*maxBodyUpfront+5)/8)
	got, err := readBody(iotest.HalfReader(bytes.NewReader(want)), nil, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("err %v, equal %v", err, bytes.Equal(got, want))
	}
	// A buffer large enough is reused.
	reuse := make([]byte, 0, 64)
	got, err = readBody(bytes.NewReader([]byte("hello")), reuse, 5)
	if err != nil || string(got) != "hello" || &got[0] != &reuse[:1][0] {
		t.Fatalf("got %q err %v, reused %v", got, err, &got[0] == &reuse[:1][0])
	}
}

func header(key, version int16, corr int32, clientID *string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	if clientID == nil {
		return binary.BigEndian.AppendUint16(b, 0xffff)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(*clientID)))
	return append(b, *clientID...)
}

func TestParseHeader(t *testing.T) {
	id := "kcat"
	tests := []struct {
		name     string
		frame    []byte
		flexible bool
		want     requestHeader
		wantBody string
		wantErr  bool
	}{
		{"v1 with a client id", append(header(3, 4, 7, &id), "body"...), false, requestHeader{3, 4, 7, "kcat"}, "body", false},
		{"null client id", append(header(3, 4, 7, nil), "body"...), false, requestHeader{3, 4, 7, ""}, "body", false},
		{"v2: no tags", append(header(0, 9, 1, &id), append([]byte{0}, "body"...)...), true, requestHeader{0, 9, 1, "kcat"}, "body", false},
		{"v2: a tag skipped", append(header(0, 9, 1, &id), append([]byte{1, 5, 3, 'x', 'y', 'z'}, "body"...)...), true, requestHeader{0, 9, 1, "kcat"}, "body", false},
		{"v2: a tag overruns", append(header(0, 9, 1, &id), []byte{1, 5, 30, 'x'}...), true, requestHeader{}, "", true},
		{"v2: tags missing", header(0, 9, 1, &id), true, requestHeader{}, "", true},
		{"client id overruns", header(3, 4, 7, &id)[:12], false, requestHeader{}, "", true},
		{"bad client id length", append(header(3, 4, 7, nil)[:8], 0xff, 0xfe), false, requestHeader{}, "", true},
		{"too short", []byte{0, 3, 0}, false, requestHeader{}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, body, err := parseHeader(tt.frame, func(int16, int16) bool { return tt.flexible })
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parsed %+v", h)
				}
				return
			}
			if err != nil || h != tt.want || string(body) != tt.wantBody {
				t.Fatalf("%+v %q %v", h, body, err)
			}
		})
	}
}

func TestIsFlexible(t *testing.T) {
	tests := []struct {
		key, version int16
		want         bool
	}{
		{kmsg.ApiVersions.Int16(), 2, false},
		{kmsg.ApiVersions.Int16(), 3, true},
		{kmsg.ApiVersions.Int16(), 99, true}, // unknown versions too: answered v0
		{kmsg.Produce.Int16(), 8, false},
		{kmsg.Produce.Int16(), 9, true},
		{kmsg.Metadata.Int16(), 9, true},
		{30000, 0, false}, // an unknown key
	}
	for _, tt := range tests {
		if got := isFlexible(tt.key, tt.version); got != tt.want {
			t.Errorf("%s v%d: %v", kmsg.NameForKey(tt.key), tt.version, got)
		}
	}
}

// Responses carry the correlation id and, for flexible versions other than
// ApiVersions, an empty tag section before the body.
func TestAppendResponse(t *testing.T) {
	for _, tt := range []struct {
		resp    kmsg.Response
		tagByte bool
	}{
		{&kmsg.MetadataResponse{Version: 8}, false},
		{&kmsg.MetadataResponse{Version: 9}, true},
		{&kmsg.ApiVersionsResponse{Version: 3}, false},
	} {
		out := appendResponse([]byte("junk"), 77, tt.resp)
		body := tt.resp.AppendTo(nil)
		wantLen := 4 + len(body)
		if tt.tagByte {
			wantLen++
		}
		if got := int(binary.BigEndian.Uint32(out)); got != wantLen || len(out) != 4+wantLen {
			t.Fatalf("%T v%d: size %d, frame %d, want %d", tt.resp, tt.resp.GetVersion(), got, len(out), wantLen)
		}
		if corr := binary.BigEndian.Uint32(out[4:]); corr != 77 {
			t.Fatalf("correlation id %d", corr)
		}
		if tt.tagByte && out[8] != 0 {
			t.Fatalf("tag byte %d", out[8])
		}
	}
}
