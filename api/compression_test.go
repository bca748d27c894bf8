package api

import (
	"encoding/json"
	"errors"
	"testing"
)

// allCodecs are the codecs a batch may use.
var allCodecs = []Compression{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd}

func TestParseCompression(t *testing.T) {
	tests := []struct {
		in      string
		want    Compression
		wantErr bool
	}{
		{"none", CompressionNone, false},
		{"gzip", CompressionGzip, false},
		{"snappy", CompressionSnappy, false},
		{"lz4", CompressionLZ4, false},
		{"zstd", CompressionZstd, false},
		{"", 0, true},
		{"GZIP", 0, true},
		{"uncompressed", 0, true},
		{"producer", 0, true},
		{"zstd ", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCompression(tt.in)
			if tt.wantErr {
				var e *Error
				if !errors.As(err, &e) || e.Code != CodeInvalidConfig {
					t.Fatalf("err = %v, want INVALID_CONFIG", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseCompression = %v, %v; want %v", got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestCompressionText(t *testing.T) {
	type config struct{ Compression Compression }
	for _, c := range allCodecs {
		b, err := json.Marshal(config{c})
		if err != nil {
			t.Fatal(err)
		}
		var back config
		if err := json.Unmarshal(b, &back); err != nil || back.Compression != c {
			t.Fatalf("%v round-tripped through %s as %v, %v", c, b, back.Compression, err)
		}
	}
	if _, err := json.Marshal(config{7}); err == nil {
		t.Error("marshalling an unknown codec succeeded")
	}
	if got := Compression(7).String(); got != "compression(7)" {
		t.Errorf("String of an unknown codec = %q", got)
	}
	var back config
	if err := json.Unmarshal([]byte(`{"Compression":"brotli"}`), &back); err == nil {
		t.Error("unmarshalling an unknown codec succeeded")
	}
}
