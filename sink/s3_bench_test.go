package sink_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/sink"
)

// BenchmarkS3Archive: the archive store's write path (gather, gzip, reserve
// in the fence object, conditional create) against plain PUTs of the same
// objects to the same server, in one run. MB/s are of compressed object
// bytes; the store's NDJSON MB/s are reported too.
func BenchmarkS3Archive(b *testing.B) {
	const perObject = 5000
	for _, size := range []int{100, 1000} {
		recs := make([]sink.Record, perObject)
		for i := range recs {
			recs[i] = sink.Record{Offset: int64(i), Timestamp: 1700000000000 + int64(i), Key: []byte("k" + strconv.Itoa(i%100)),
				Value: []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, bytes.Repeat([]byte{'a' + byte(i%26)}, size)))}
		}
		obj, err := sink.EncodeArchiveObject(recs, sink.CompressionGzip)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("store/value=%dB", size), func(b *testing.B) {
			bkt, _ := testBucket(b, "")
			st, err := sink.NewS3Store(bkt, sink.S3Options{Group: "bench", Prefix: "archive", MaxRecords: perObject,
				ReadLog: func(context.Context, api.TopicPartition, int64, int64) ([]sink.Record, error) { return nil, nil }})
			if err != nil {
				b.Fatal(err)
			}
			tp := api.TopicPartition{Topic: "bench", Partition: 0}
			if _, err := st.Claim(b.Context(), tp, 1); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(obj)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch := make([]sink.Record, len(recs))
				for j, r := range recs {
					r.Offset = int64(i*perObject + j)
					batch[j] = r
				}
				if _, err := st.Write(b.Context(), tp, 1, batch); err != nil {
					b.Fatal(err)
				}
			}
			s := st.Stats()
			b.ReportMetric(float64(s.RawBytes)/1e6/b.Elapsed().Seconds(), "ndjson-MB/s")
		})
		b.Run(fmt.Sprintf("plain-put/value=%dB", size), func(b *testing.B) {
			bkt, _ := testBucket(b, "")
			b.SetBytes(int64(len(obj)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := bkt.Put(b.Context(), fmt.Sprintf("plain/%020d.ndjson.gz", i), bytes.NewReader(obj), int64(len(obj))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
