package api

// A push subscription delivers a topic's records to an HTTP endpoint: the
// gateways' pushers are members of its managed group push.<name>, POST each
// record (or batch) to the endpoint, and commit past a record only once the
// endpoint acknowledged it or it was written to the dead-letter topic.

// Push body formats.
const (
	PushFormatBinary     = "binary"     // CloudEvents binary mode: the value is the body, attributes are ce-* headers
	PushFormatStructured = "structured" // CloudEvents structured mode: application/cloudevents+json
	PushFormatJSON       = "json"       // the record as the fetch API renders it
	PushFormatRaw        = "raw"        // the value bytes, with only the webhook and sluice-* headers
)

// Push orderings.
const (
	PushOrderPartition = "partition" // record n+1 of a partition waits for record n
	PushOrderKey       = "key"       // concurrent across keys, in order per key
	PushOrderNone      = "none"      // concurrent, no order
)

// Push subscription states.
const (
	PushActive     = "active"
	PushPaused     = "paused"
	PushBackingOff = "backing_off" // active, but the endpoint is down: probing
	PushDisabled   = "disabled"
)

// PushBatch makes one request carry several records of a partition (as a
// JSON array); the endpoint may acknowledge part of it with Lambda's
// {"batchItemFailures":[{"itemIdentifier":"<offset>"}]}.
type PushBatch struct {
	MaxRecords int   `json:"max_records,omitempty"` // default 1 (no batching), at most 1000
	MaxBytes   int64 `json:"max_bytes,omitempty"`   // default 1 MiB
	MaxWaitMs  int64 `json:"max_wait_ms,omitempty"` // default 0: send what is there
}

// PushRetry bounds retries of a record the endpoint refused.
type PushRetry struct {
	MinBackoffMs int64 `json:"min_backoff_ms,omitempty"` // default 1000
	MaxBackoffMs int64 `json:"max_backoff_ms,omitempty"` // default 60000
	// MaxAttempts counted against one record before it is dead-lettered
	// (default 10). Only record-level failures count (see DESIGN.md).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RetryAfterMaxMs caps the wait a 429 or 503's Retry-After asks for
	// (default 300000).
	RetryAfterMaxMs int64 `json:"retry_after_max_ms,omitempty"`
}

// PushDeadLetter names where records the endpoint never takes go.
type PushDeadLetter struct {
	Topic string `json:"topic,omitempty"` // default <name>.dlt, created with RF min(3, brokers)
}

// PushRate bounds the requests sent.
type PushRate struct {
	MaxPerSecond float64 `json:"max_per_second,omitempty"` // default 0: unbounded
}

// PushOutage bounds how long an endpoint may stay down before the
// subscription is disabled (its backlog waits in the log).
type PushOutage struct {
	DisableAfterMs int64 `json:"disable_after_ms,omitempty"` // default 259200000 (3 days)
}

// PushConfig is a subscription's settings: the body of POST /v1/push (with
// Name and Start) and of PATCH /v1/push/{name} (any subset).
type PushConfig struct {
	Name     string   `json:"name"`
	Topics   []string `json:"topics"`
	Endpoint string   `json:"endpoint"`
	// Start is where a new subscription begins: earliest (default),
	// latest or timestamp:MS. Used at creation only.
	Start       string         `json:"start,omitempty"`
	Format      string         `json:"format,omitempty"`        // binary (default), structured, json, raw
	Type        string         `json:"type,omitempty"`          // ce-type when a record has no ce_type header; default sluice.record
	Ordering    string         `json:"ordering,omitempty"`      // partition (default), key, none
	MaxInFlight int            `json:"max_in_flight,omitempty"` // per partition, for key and none; default 16, at most 1000
	Batch       PushBatch      `json:"batch"`
	TimeoutMs   int64          `json:"timeout_ms,omitempty"` // default 30000
	Retry       PushRetry      `json:"retry"`
	DeadLetter  PushDeadLetter `json:"dead_letter"`
	Rate        PushRate       `json:"rate"`
	Outage      PushOutage     `json:"outage"`
}

// PushSubscription is a subscription as GET /v1/push lists it.
type PushSubscription struct {
	PushConfig
	Group string `json:"group"` // push.<name>
	State string `json:"state"` // active, paused, disabled (backing_off in the status)
	// Reason says why the state is what it is (who paused it, the 410 that
	// disabled it).
	Reason    string `json:"reason,omitempty"`
	CreatedMs int64  `json:"created_ms"`
	UpdatedMs int64  `json:"updated_ms"`
	// Secret is shown once, in the answer of the create or of a rotation.
	Secret string `json:"secret,omitempty"`
}

// PushList answers GET /v1/push.
type PushList struct {
	Subscriptions []PushSubscription `json:"subscriptions"`
}

// PushPartition is one partition's delivery state.
type PushPartition struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	CommittedOffset int64  `json:"committed_offset"` // -1: none yet
	HighWatermark   int64  `json:"high_watermark"`   // -1: unknown
	Lag             int64  `json:"lag"`              // -1: unknown
	LagMs           int64  `json:"lag_ms"`           // -1: unknown
	HeadAttempts    int    `json:"head_attempts"`    // attempts counted against the record at the committed offset
	Owner           string `json:"owner,omitempty"`  // the pusher (member id) delivering it
	// InFlight is the requests its pusher has out now (as of the pusher's
	// last status, at most a second old); 0 when no pusher reports it.
	InFlight int `json:"in_flight"`
	// LastError is the last failed attempt (or dead-letter write) its
	// current pusher saw; absent when it saw none.
	LastError *PushError `json:"last_error,omitempty"`
}

// PushError is one failed attempt as a pusher saw it.
type PushError struct {
	Offset  int64  `json:"offset"`
	Attempt int    `json:"attempt"`
	Status  int    `json:"status"` // the endpoint's HTTP status; 0: no answer
	Error   string `json:"error"`  // the error, or the start of the answer's body
	AtMs    int64  `json:"at_ms"`
}

// PushStatus answers GET /v1/push/{name}.
type PushStatus struct {
	PushSubscription
	// LastError is the latest of the partitions' last errors.
	LastError  *PushError      `json:"last_error,omitempty"`
	Partitions []PushPartition `json:"partitions"`
}

// PushStateRequest is the body of PUT /v1/push/{name}/state.
type PushStateRequest struct {
	State string `json:"state"` // active or paused
}

// PushSeekRequest is the body of POST /v1/push/{name}/seek.
type PushSeekRequest struct {
	To string `json:"to"` // earliest, latest, timestamp:MS
}

// PushRotateRequest is the body of POST /v1/push/{name}/secrets/rotate.
type PushRotateRequest struct {
	// GraceSeconds the old secret still signs (default 86400, at most
	// 604800).
	GraceSeconds int64 `json:"grace_seconds,omitempty"`
}

// Record headers a dead-lettered record carries besides its own.
const (
	DLTHeaderTopic        = "sluice-dlt-topic"
	DLTHeaderPartition    = "sluice-dlt-partition"
	DLTHeaderOffset       = "sluice-dlt-offset"
	DLTHeaderSubscription = "sluice-dlt-subscription"
	DLTHeaderAttempts     = "sluice-dlt-attempts"
	DLTHeaderStatus       = "sluice-dlt-status"   // the last answer's HTTP status, 0 for none
	DLTHeaderResponse     = "sluice-dlt-response" // the start of the last answer's body, or the error
)

// PushDeliveriesTopic is the internal topic of push attempts worth showing
// (GET /v1/push/{name}/deliveries), keyed by subscription: one partition,
// kept a day (at most 64 MiB).
const PushDeliveriesTopic = "__push_deliveries"

// Delivery log statuses.
const (
	DeliveryFailed    = "failed"    // an attempt the endpoint did not acknowledge
	DeliveryDead      = "dead"      // the record was written to the dead-letter topic
	DeliveryDelivered = "delivered" // acknowledged after failed attempts (or a test event)
)

// PushDelivery is one entry of the delivery log.
type PushDelivery struct {
	TimeMs       int64  `json:"time_ms"`
	Subscription string `json:"subscription"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"`
	Attempt      int    `json:"attempt"`     // sluice-attempt of the request (counted attempts + 1)
	Status       string `json:"status"`      // failed, dead, delivered
	HTTPStatus   int    `json:"http_status"` // 0: no answer
	LatencyMs    int64  `json:"latency_ms"`
	Error        string `json:"error,omitempty"`
	Response     string `json:"response,omitempty"` // the start of the answer's body, at most 4 KiB
	Gateway      string `json:"gateway"`            // the pusher's instance id
}

// PushDeliveries answers GET /v1/push/{name}/deliveries, newest first.
type PushDeliveries struct {
	Deliveries []PushDelivery `json:"deliveries"`
}
