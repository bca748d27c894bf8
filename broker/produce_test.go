package broker_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/recordbatch"
)

// forgeBatch returns a copy of batch b changed by f with its CRC recomputed:
// damage a producer made, which the CRC does not catch.
func forgeBatch(b []byte, f func(b []byte)) []byte {
	b = bytes.Clone(b)
	f(b)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// maxDelta is the largest record timestamp of a batch minus its base
// timestamp.
func maxDelta(b []byte) int64 {
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		panic(err)
	}
	return h.MaxTimestamp - h.BaseTimestamp
}

// TestForgedBatchOnTheInternalRoute sends batches whose header and CRC are
// intact but whose records disagree with them straight to a leader's
// internal produce route. Each is refused with 400 and nothing is appended,
// and the partition's consumers read on past the refusals.
func TestForgedBatchOnTheInternalRoute(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{})
	rc := rcluster{c, t}
	rc.post("/v1/topics", api.CreateTopicRequest{Name: "m", Partitions: 1}, 201)
	rc.post("/v1/topics/m/records", map[string]any{"records": []map[string]any{{"value": 0}, {"value": 1}}}, 200)

	recs := []recordbatch.Record{{Value: []byte(`"a"`)}, {Value: []byte(`"b"`)}, {Value: []byte(`"c"`)}}
	plain, err := recordbatch.Encode(nil, recs, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	zstd, err := recordbatch.Encode(nil, recs, recordbatch.Options{Compression: api.CompressionZstd})
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := recordbatch.Encode(nil, []recordbatch.Record{{Timestamp: time.Now().Add(61 * time.Minute).UnixMilli(), Value: []byte(`"z"`)}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	countUp := func(b []byte) { binary.BigEndian.PutUint32(b[57:], 4); binary.BigEndian.PutUint32(b[23:], 3) }
	tests := []struct {
		name  string
		batch []byte
		code  api.Code
	}{
		{"record count above the records", forgeBatch(plain, countUp), api.CodeCorruptRecord},
		{"record count above the compressed records", forgeBatch(zstd, countUp), api.CodeCorruptRecord},
		{"record count below the records", forgeBatch(plain, func(b []byte) {
			binary.BigEndian.PutUint32(b[57:], 2)
			binary.BigEndian.PutUint32(b[23:], 1)
		}), api.CodeCorruptRecord},
		// The second record's offset delta (after its length, attributes and
		// timestamp delta bytes) says 2.
		{"offset deltas out of order", forgeBatch(plain, func(b []byte) {
			second := recordbatch.HeaderSize + 1 + int(b[recordbatch.HeaderSize]>>1)
			b[second+3] = 4
		}), api.CodeCorruptRecord},
		{"a control batch", forgeBatch(plain, func(b []byte) { b[22] |= byte(recordbatch.AttrControl) }), api.CodeInvalidRecord},
		{"a good batch, then a forged one", append(bytes.Clone(plain), forgeBatch(plain, countUp)...), api.CodeCorruptRecord},
		// message.timestamp.after.max.ms is an hour by default.
		{"a timestamp 61 minutes ahead", ahead, api.CodeInvalidTimestamp},
		{"a timestamp of 2^62 ms", forgeBatch(plain, func(b []byte) {
			binary.BigEndian.PutUint64(b[27:], 1<<62)
			binary.BigEndian.PutUint64(b[35:], uint64(1<<62+maxDelta(plain)))
		}), api.CodeInvalidTimestamp},
	}
	log := c.Brokers[0].PartitionLog("m", 0)
	url := fmt.Sprintf("http://%s/internal/v1/partitions/m/0/produce?acks=1", c.Brokers[0].Addr())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end := log.Offsets().LogEnd
			resp, err := http.Post(url, api.ContentTypeBatches, bytes.NewReader(tt.batch))
			if err != nil {
				t.Fatal(err)
			}
			var eb api.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			if resp.StatusCode != 400 || eb.Error.Code != tt.code {
				t.Fatalf("answer %d %s (%s), want 400 %s", resp.StatusCode, eb.Error.Code, eb.Error.Message, tt.code)
			}
			if got := log.Offsets().LogEnd; got != end {
				t.Fatalf("log end moved from %d to %d", end, got)
			}
		})
	}

	// The same route takes the intact batch, and a consumer reads everything.
	resp, err := http.Post(url, api.ContentTypeBatches, bytes.NewReader(plain))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("intact batch: %v %v", resp, err)
	}
	resp.Body.Close()
	rc.post("/v1/topics/m/records", map[string]any{"records": []map[string]any{{"value": 5}}}, 200)
	resp, err = http.Get(c.URL + "/v1/topics/m/partitions/0/records?offset=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fr api.FetchResponse
	if err := json.NewDecoder(resp.Body).Decode(&fr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("fetch: %d %v", resp.StatusCode, err)
	}
	var got []string
	for _, r := range fr.Records {
		got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	if want := `[0:0 1:1 2:"a" 3:"b" 4:"c" 5:5]`; fmt.Sprint(got) != want {
		t.Fatalf("consumer read %v, want %s", got, want)
	}
}
