package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/sluice-io/sluice/api"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// TestCompressedFraming checks the compressed bytes open the way Kafka's readers
// expect for each codec.
func TestCompressedFraming(t *testing.T) {
	tests := []struct {
		codec  api.Compression
		prefix []byte
	}{
		{api.CompressionGzip, []byte{0x1f, 0x8b, 0x08}},
		// LZ4 frame magic, then FLG 0x60 (version 01, independent blocks, no
		// checksums, no content size) and BD 0x40 (64 KiB blocks): the frame
		// Kafka's own KafkaLZ4BlockOutputStream writes.
		{api.CompressionLZ4, []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x40}},
		{api.CompressionZstd, []byte{0x28, 0xb5, 0x2f, 0xfd}},
	}
	recs := testRecords()["many records"]
	for _, tt := range tests {
		t.Run(tt.codec.String(), func(t *testing.T) {
			b := mustEncode(t, recs, Options{Compression: tt.codec})
			if got := b[HeaderSize:]; !bytes.HasPrefix(got, tt.prefix) {
				t.Fatalf("records open with %x, want %x", got[:len(tt.prefix)], tt.prefix)
			}
		})
	}
	t.Run("snappy is a plain block", func(t *testing.T) {
		b := mustEncode(t, recs, Options{Compression: api.CompressionSnappy})
		raw := mustEncode(t, recs, Options{})
		got, err := s2.Decode(nil, b[HeaderSize:])
		if err != nil || !bytes.Equal(got, raw[HeaderSize:]) {
			t.Fatalf("records section is not one snappy block of the raw records: %v", err)
		}
	})
}

// xerialFrame frames raw the way Kafka's Java producer does: magic, version 1,
// compatible version 1, then blocks of at most blockSize bytes, each a
// big-endian length and a plain snappy block.
func xerialFrame(raw []byte, blockSize int) []byte {
	out := append(bytes.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)
	for len(raw) > 0 {
		n := min(blockSize, len(raw))
		block := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

func TestDecodeXerialSnappy(t *testing.T) {
	for name, recs := range testRecords() {
		t.Run(name, func(t *testing.T) {
			raw := mustEncode(t, recs, Options{})
			h := plainHeader(int32(len(recs)))
			h.attributes = int16(api.CompressionSnappy)
			h.baseTimestamp = recs[0].Timestamp
			b := sealBatch(h, xerialFrame(raw[HeaderSize:], 32<<10))
			_, got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			checkRecords(t, 0, got, recs)
		})
	}

	raw := mustEncode(t, testRecords()["many records"], Options{})
	good := xerialFrame(raw[HeaderSize:], 32<<10)
	bad := []struct {
		name string
		data []byte
	}{
		{"magic only", xerialMagic},
		{"header only", good[:xerialHeaderSize]},
		{"truncated block length", good[:xerialHeaderSize+2]},
		{"block length past the end", good[:xerialHeaderSize+100]},
		{"truncated final block", good[:len(good)-1]},
		{"empty block", append(bytes.Clone(good[:xerialHeaderSize]), 0, 0, 0, 0)},
		{"garbage block", append(bytes.Clone(good[:xerialHeaderSize]), 0, 0, 0, 3, 0xff, 0xff, 0xff)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			h := plainHeader(5000)
			h.attributes = int16(api.CompressionSnappy)
			if _, _, err := Decode(sealBatch(h, tt.data)); !errors.Is(err, api.ErrCorruptRecord) {
				t.Fatalf("err = %v, want CORRUPT_RECORD", err)
			}
		})
	}
}

// TestDecompressionCap checks that no codec decompresses past
// MaxUncompressedSize, whether the stream admits its size up front or not.
func TestDecompressionCap(t *testing.T) {
	over := make([]byte, MaxUncompressedSize+1)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	// The cases that really decompress 64 MiB take seconds under the race
	// detector; -short keeps only the ones that are refused from a size claim.
	tests := []struct {
		name  string
		codec api.Compression
		data  func(t *testing.T) []byte
	}{
		{"gzip", api.CompressionGzip, func(t *testing.T) []byte { return mustCompress(t, over, api.CompressionGzip) }},
		{"lz4", api.CompressionLZ4, func(t *testing.T) []byte { return mustCompress(t, over, api.CompressionLZ4) }},
		{"zstd with content size", api.CompressionZstd, func(t *testing.T) []byte { return enc.EncodeAll(over, nil) }},
		{"zstd streamed without content size", api.CompressionZstd, func(t *testing.T) []byte {
			var buf bytes.Buffer
			w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
			if err != nil {
				t.Fatal(err)
			}
			for chunk := over; len(chunk) > 0; chunk = chunk[min(len(chunk), 1<<20):] {
				if _, err := w.Write(chunk[:min(len(chunk), 1<<20)]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}},
		{"snappy block claiming 4 GiB", api.CompressionSnappy, func(*testing.T) []byte {
			return append(binary.AppendUvarint(nil, 1<<32-1), 0, 0, 0, 0)
		}},
		{"xerial blocks summing past the cap", api.CompressionSnappy, func(*testing.T) []byte {
			out := append(bytes.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)
			for range 3 {
				block := append(binary.AppendUvarint(nil, 30<<20), 0)
				out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
				out = append(out, block...)
			}
			return out
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.data(t)
			h := plainHeader(1)
			h.attributes = int16(tt.codec)
			if _, _, err := Decode(sealBatch(h, data)); !errors.Is(err, api.ErrCorruptRecord) {
				t.Fatalf("Decode of %d bytes that decompress past the cap: %v, want CORRUPT_RECORD", len(data), err)
			}
		})
	}

	t.Run("exactly the cap decodes", func(t *testing.T) {
		for _, c := range []api.Compression{api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd} {
			got, err := decompress(mustCompress(t, over[:MaxUncompressedSize], c), c)
			if err != nil || len(got) != MaxUncompressedSize {
				t.Fatalf("%v: decompressed %d bytes, %v; want exactly the cap", c, len(got), err)
			}
		}
	})
}

func mustCompress(t *testing.T, src []byte, c api.Compression) []byte {
	t.Helper()
	out, err := compress(nil, src, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCodecGarbage hands every codec bytes that are not its format.
func TestCodecGarbage(t *testing.T) {
	inputs := map[string][]byte{
		"zeros":      make([]byte, 64),
		"ones":       bytes.Repeat([]byte{0xff}, 64),
		"text":       []byte("this is not compressed at all, not even a little"),
		"one byte":   {0x01},
		"lz4 magic":  {0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82, 0xff, 0xff, 0xff, 0x7f},
		"zstd magic": {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0xff},
		"gzip magic": {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0xff, 0xff},
	}
	for _, c := range []api.Compression{api.CompressionGzip, api.CompressionSnappy, api.CompressionLZ4, api.CompressionZstd} {
		for name, in := range inputs {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				h := plainHeader(1)
				h.attributes = int16(c)
				if _, _, err := Decode(sealBatch(h, in)); !errors.Is(err, api.ErrCorruptRecord) {
					t.Fatalf("err = %v, want CORRUPT_RECORD", err)
				}
			})
		}
	}
}

// TestCodecConcurrency runs every codec from many goroutines at once, so the race
// detector sees the pooled and shared coders used concurrently.
func TestCodecConcurrency(t *testing.T) {
	recs := testRecords()["headers"]
	done := make(chan error)
	const workers = 8
	for w := range workers {
		go func() {
			var err error
			for i := range 20 {
				c := allCodecs[(w+i)%len(allCodecs)]
				var b []byte
				if b, err = Encode(nil, recs, Options{Compression: c}); err != nil {
					break
				}
				if _, _, err = Decode(b); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
