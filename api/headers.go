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
	// HeaderThrottleMs is how long, in milliseconds, a caller over its quota
	// waits before a request is admitted again (Kafka's throttle_time_ms);
	// Retry-After carries the same rounded up to seconds.
	HeaderThrottleMs = "X-Sluice-Throttle-Ms"
	// HeaderClientID names the calling application (Kafka's client.id), for
	// quotas per principal and client id. WebSockets may send the query
	// parameter client_id instead.
	HeaderClientID = "X-Client-Id"

	// ContentTypeBatches is raw RecordBatch v2 bytes, one batch after another.
	ContentTypeBatches = "application/vnd.sluice.batches"
)
