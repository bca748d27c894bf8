package gateway

import (
	"errors"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// A broker's fetch answer that is not whole batches fails the fetch: the
// JSON route never answers "no records" past a batch it could not read, and
// never steps over one.
func TestScanFetched(t *testing.T) {
	one, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte(`1`)}, {Value: []byte(`2`)}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	two := append(append([]byte(nil), one...), one...)
	flipped := append([]byte(nil), two...)
	flipped[len(one)+recordbatch.HeaderSize+1] ^= 1
	badMagic := append([]byte(nil), two...)
	badMagic[len(one)+16] = 7
	tests := []struct {
		name    string
		raw     []byte
		batches int
		wantErr bool
	}{
		{"empty", nil, 0, false},
		{"whole batches", two, 2, false},
		{"a torn last batch", two[:len(two)-5], 1, true},
		{"a stub shorter than a header", append(append([]byte(nil), one...), 0, 0, 0), 1, true},
		{"a header that does not parse", badMagic, 1, true},
		{"a bad CRC (found by decoding)", flipped, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			err := scanFetched(tt.raw, func(h recordbatch.Header, b []byte) error {
				if _, _, err := recordbatch.Decode(b); err != nil {
					return err
				}
				n++
				return nil
			})
			if n != tt.batches || (err != nil) != tt.wantErr {
				t.Fatalf("%d batches, %v", n, err)
			}
			if err != nil && !errors.Is(err, api.ErrCorruptRecord) {
				t.Fatalf("error %v is not CORRUPT_RECORD", err)
			}
		})
	}
}

func TestRetriableReadLeavesCorruptObjectsToTheClient(t *testing.T) {
	if retriableRead(api.Errorf(api.CodeRemoteCorrupt, "bad index")) {
		t.Fatal("REMOTE_CORRUPT is retried inside the gateway")
	}
	if !retriableRead(api.Errorf(api.CodeBrokerUnavailable, "down")) {
		t.Fatal("BROKER_UNAVAILABLE is not retried")
	}
}
