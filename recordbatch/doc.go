// Package recordbatch is the RecordBatch v2 codec: Kafka's batch layout, byte
// for byte, as it sits on disk, travels between brokers and answers raw
// fetches. It encodes and decodes batches (Encode, Decode), checks them
// (Verify: header, size, CRC; Validate: every record inside), walks a buffer
// of them (Scan), stamps the fields a leader owns in place (SetBaseOffset,
// SetLeaderEpoch), drops records for log compaction (Filter), and holds the
// compression codecs (none, gzip, snappy, lz4, zstd).
//
// Errors are *api.Error values with the codes of api's table: CORRUPT_RECORD
// for bytes that do not hold together, INVALID_RECORD for a well-formed batch
// a log does not take.
package recordbatch
