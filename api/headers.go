package api

// Header names used between gateway, broker and clients.
const (
	// HeaderErrorCode repeats the error code of an error response, so a client
	// can classify it without parsing the body (and for raw-byte routes).
	HeaderErrorCode = "X-Sluice-Error-Code"
	// HeaderHighWatermark is the partition's high watermark when a fetch was answered.
	HeaderHighWatermark = "X-Sluice-High-Watermark"
	// HeaderLogStartOffset is the partition's first readable offset.
	HeaderLogStartOffset = "X-Sluice-Log-Start-Offset"
	// HeaderNextOffset is the offset a consumer asks for next after a raw fetch.
	HeaderNextOffset = "X-Sluice-Next-Offset"
	// HeaderLeaderEpoch is the leader epoch the sender believes current.
	HeaderLeaderEpoch = "X-Sluice-Leader-Epoch"

	// ContentTypeBatches is raw RecordBatch v2 bytes, one batch after another.
	ContentTypeBatches = "application/vnd.sluice.batches"
)
