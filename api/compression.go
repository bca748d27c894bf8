package api

import "fmt"

// Compression is a batch's codec, stored in bits 0-2 of its attributes. The
// values are Kafka's.
type Compression int8

// The codecs a batch may use.
const (
	CompressionNone   Compression = 0
	CompressionGzip   Compression = 1
	CompressionSnappy Compression = 2
	CompressionLZ4    Compression = 3
	CompressionZstd   Compression = 4
)

// compressionNames are the codec names as Kafka's compression.type spells them.
var compressionNames = [...]string{
	CompressionNone:   "none",
	CompressionGzip:   "gzip",
	CompressionSnappy: "snappy",
	CompressionLZ4:    "lz4",
	CompressionZstd:   "zstd",
}

// Valid reports whether c is one of the known codecs.
func (c Compression) Valid() bool { return c >= 0 && int(c) < len(compressionNames) }

// String is the codec's name as ParseCompression accepts it.
func (c Compression) String() string {
	if c.Valid() {
		return compressionNames[c]
	}
	return fmt.Sprintf("compression(%d)", int8(c))
}

// ParseCompression parses a codec name: "none", "gzip", "snappy", "lz4" or
// "zstd", lower case as in Kafka's compression.type. Any other name is
// INVALID_CONFIG.
func ParseCompression(s string) (Compression, error) {
	for c, name := range compressionNames {
		if s == name {
			return Compression(c), nil
		}
	}
	return CompressionNone, Errorf(CodeInvalidConfig, "unknown compression %q: want none, gzip, snappy, lz4 or zstd", s)
}

// MarshalText makes a Compression read as its name in JSON and YAML configs.
func (c Compression) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, Errorf(CodeInvalidConfig, "unknown compression %d", int8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText parses a codec name with ParseCompression.
func (c *Compression) UnmarshalText(b []byte) error {
	v, err := ParseCompression(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}
