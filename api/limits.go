package api

// Limits bound what one client's request may cost the servers, so that a
// careless or hostile client gets an error instead of taking the process's
// memory or goroutines. Each has a Kafka-like name, a default and a meaning
// here, in one table; the gateway's options (gateway.Limits) and the topic
// configs take their defaults from these constants, and README ("Limits")
// and openapi.yaml (`x-limits`) list the same rows, which a test keeps equal.

// Limit names. Gateway limits are options of a gateway process; topic
// limits are topic configs (see configSpecs), set per topic at creation.
const (
	LimitMaxRequestBytes        = "max.request.bytes"
	LimitMaxRecordsPerRequest   = "max.records.per.request"
	LimitMaxHeadersPerRecord    = "max.headers.per.record"
	LimitProduceMemoryBytes     = "gateway.produce.memory.bytes"
	LimitAcks0MaxInFlight       = "gateway.acks0.max.in.flight"
	LimitReadTimeoutMs          = "gateway.read.timeout.ms"
	LimitWriteTimeoutMs         = "gateway.write.timeout.ms"
	LimitWSPingIntervalMs       = "gateway.ws.ping.interval.ms"
	LimitWSIdleTimeoutMs        = "gateway.ws.idle.timeout.ms"
	LimitWSMaxConnections       = "gateway.ws.max.connections"
	LimitWSMaxConnectionsPerIP  = "gateway.ws.max.connections.per.ip"
	LimitMaxPartitionsPerBroker = "max.partitions.per.broker"
	LimitMaxGroupsPerCoord      = "max.groups.per.coordinator"

	// The broker's Kafka listener (package kafka), by Kafka's own names.
	LimitKafkaMaxRequestBytes      = "socket.request.max.bytes"
	LimitKafkaMaxRequestBeforeAuth = "sasl.server.max.receive.size"
	LimitKafkaMaxConnections       = "max.connections"
	LimitKafkaMaxConnectionsPerIP  = "max.connections.per.ip"
	LimitKafkaIdleTimeoutMs        = "connections.max.idle.ms"
)

// Scopes of a limit.
const (
	LimitScopeGateway = "gateway" // an option of each gateway process
	LimitScopeTopic   = "topic"   // a topic config
	LimitScopeBroker  = "broker"  // an option of each broker process (the controller's applies)
)

// Defaults of the limits above.
const (
	// DefaultMaxRequestBytes bounds a JSON or NDJSON produce body
	// (REQUEST_TOO_LARGE, 413), checked against Content-Length before
	// reading and against the bytes read after.
	DefaultMaxRequestBytes = 32 << 20
	// DefaultMaxRecordsPerRequest bounds the records of one produce request
	// (TOO_MANY_RECORDS, 413), counted while the body is scanned, so a body
	// of millions of empty records is refused before it costs a record
	// table.
	DefaultMaxRecordsPerRequest = 100_000
	// DefaultMaxHeadersPerRecord bounds the headers of one record
	// (INVALID_RECORD, 400).
	DefaultMaxHeadersPerRecord = 1_000
	// DefaultProduceMemoryBytes is the memory a gateway lets produce
	// requests hold at once: bodies as they are read, record tables, encoded
	// batches, and acks=0 batches until their background send ends. A
	// request that would pass it is refused with TOO_MANY_REQUESTS (429,
	// Retry-After), or REQUEST_TOO_LARGE (413) when it could never fit.
	DefaultProduceMemoryBytes = 256 << 20
	// DefaultAcks0MaxInFlight bounds the acks=0 batches a gateway sends in
	// the background at once (one per partition written); past it, a
	// request's sends run before it is answered, as with acks=1.
	DefaultAcks0MaxInFlight = 128
	// DefaultReadTimeoutMs is how long a request's headers and body may
	// take to arrive; a client that sends slower (a slow-loris body) is
	// disconnected, and what its request held (its share of the produce
	// memory, its goroutine) is freed. Headers alone get at most 10 s.
	DefaultReadTimeoutMs = 120_000
	// DefaultWriteTimeoutMs is how long a response may take to write once
	// its long poll is over (fetch records and batches, group polls), and
	// each WebSocket frame; a client that reads slower is disconnected, so
	// one that stops reading holds its goroutine and buffers no longer.
	DefaultWriteTimeoutMs = 30_000
	// DefaultWSPingIntervalMs is how often the gateway pings each
	// WebSocket client. A client without credit sends nothing and is sent
	// nothing; its answers to pings are what keep it connected.
	DefaultWSPingIntervalMs = 30_000
	// DefaultWSIdleTimeoutMs is how long the gateway waits for the answer
	// to a ping; a client that does not answer is disconnected (without a
	// close handshake: it is not listening).
	DefaultWSIdleTimeoutMs = 60_000
	// DefaultWSMaxConnections bounds the open WebSocket streams and group
	// members of one gateway; past it an upgrade is refused before it
	// happens with TOO_MANY_REQUESTS (429, Retry-After).
	DefaultWSMaxConnections = 10_000
	// DefaultWSMaxConnectionsPerIP bounds them per client IP address (the
	// TCP peer's: a proxy in front counts as one client).
	DefaultWSMaxConnectionsPerIP = 1_000
	// DefaultMaxPartitionsPerBroker bounds the partition replicas one
	// broker holds (each costs open segment files, index memory and a
	// follower or leader loop): a topic creation that would place more on
	// any broker is refused with POLICY_VIOLATION (400). Kafka's guidance
	// is a few thousand per broker.
	DefaultMaxPartitionsPerBroker = 4_000
	// DefaultMaxGroupsPerCoordinator bounds the consumer groups one group
	// coordinator (one __consumer_offsets partition) holds, with members or
	// committed offsets: each is replayed at every coordinator load and
	// kept in its memory. A join or offset reset that would create one more
	// is refused with TOO_MANY_GROUPS (409); deleting groups makes room.
	// With 50 offsets partitions the cluster holds 500,000 groups.
	DefaultMaxGroupsPerCoordinator = 10_000
	// DefaultKafkaMaxRequestBytes bounds one Kafka request frame, checked
	// against its size prefix before anything is allocated for it; a larger
	// one closes the connection (Kafka's default).
	DefaultKafkaMaxRequestBytes = 100 << 20
	// DefaultKafkaMaxRequestBeforeAuth bounds a frame from a Kafka
	// connection that has not authenticated yet (Kafka's default).
	DefaultKafkaMaxRequestBeforeAuth = 512 << 10
	// DefaultKafkaMaxConnections bounds the open connections of a broker's
	// Kafka listener; past it a new one is closed at once.
	DefaultKafkaMaxConnections = 10_000
	// DefaultKafkaMaxConnectionsPerIP bounds them per client IP address.
	DefaultKafkaMaxConnectionsPerIP = 1_000
	// DefaultKafkaIdleTimeoutMs closes a Kafka connection that sends no
	// request for this long (Kafka's default, 10 minutes).
	DefaultKafkaIdleTimeoutMs = 600_000
	// DefaultTimestampAfterMaxMs is how far ahead of the gateway's clock a
	// record's timestamp may be (Kafka 4's default for
	// message.timestamp.after.max.ms, one hour); later is INVALID_TIMESTAMP.
	DefaultTimestampAfterMaxMs = 3_600_000
	// DefaultTimestampBeforeMaxMs is how far behind it may be; Kafka's
	// default, Long.MAX_VALUE, means no limit.
	DefaultTimestampBeforeMaxMs = 1<<63 - 1
)

// Limit is one row of the limits table.
type Limit struct {
	Name    string
	Scope   string // LimitScopeGateway or LimitScopeTopic
	Default int64
	Unit    string // "bytes", "records", "headers", "sends", "connections", "partitions" or "ms"
	// Refusal is the error code a request past the limit gets.
	Refusal Code
	Doc     string
}

// Limits lists every limit, in the order README and openapi.yaml list them.
func Limits() []Limit {
	return []Limit{
		{LimitMaxRequestBytes, LimitScopeGateway, DefaultMaxRequestBytes, "bytes", CodeRequestTooLarge,
			"the largest JSON or NDJSON produce body"},
		{LimitMaxRecordsPerRequest, LimitScopeGateway, DefaultMaxRecordsPerRequest, "records", CodeTooManyRecords,
			"the most records one produce request may carry; counted while the body is scanned"},
		{LimitMaxHeadersPerRecord, LimitScopeGateway, DefaultMaxHeadersPerRecord, "headers", CodeInvalidRecord,
			"the most headers one record may carry"},
		{LimitProduceMemoryBytes, LimitScopeGateway, DefaultProduceMemoryBytes, "bytes", CodeTooManyRequests,
			"memory all produce requests of a gateway may hold at once (bodies, record tables, batches, acks=0 sends in flight)"},
		{LimitAcks0MaxInFlight, LimitScopeGateway, DefaultAcks0MaxInFlight, "sends", "",
			"acks=0 batches sent in the background at once; past it a request's sends finish before its answer"},
		{LimitReadTimeoutMs, LimitScopeGateway, DefaultReadTimeoutMs, "ms", "",
			"how long a request's headers and body may take to arrive; a slower sender is disconnected"},
		{LimitWriteTimeoutMs, LimitScopeGateway, DefaultWriteTimeoutMs, "ms", "",
			"how long a fetch or group poll response may take to write after its long poll, and each WebSocket frame; a slower reader is disconnected"},
		{LimitWSPingIntervalMs, LimitScopeGateway, DefaultWSPingIntervalMs, "ms", "",
			"how often the gateway pings each WebSocket client"},
		{LimitWSIdleTimeoutMs, LimitScopeGateway, DefaultWSIdleTimeoutMs, "ms", "",
			"how long the gateway waits for the answer to a ping before it disconnects the client"},
		{LimitWSMaxConnections, LimitScopeGateway, DefaultWSMaxConnections, "connections", CodeTooManyRequests,
			"open WebSocket streams and group members of one gateway; past it an upgrade is refused"},
		{LimitWSMaxConnectionsPerIP, LimitScopeGateway, DefaultWSMaxConnectionsPerIP, "connections", CodeTooManyRequests,
			"open WebSockets of one client IP address (the TCP peer's)"},
		{LimitMaxPartitionsPerBroker, LimitScopeBroker, DefaultMaxPartitionsPerBroker, "partitions", CodePolicyViolation,
			"partition replicas one broker may hold; a topic creation that would place more on any broker is refused"},
		{LimitMaxGroupsPerCoord, LimitScopeBroker, DefaultMaxGroupsPerCoordinator, "groups", CodeTooManyGroups,
			"consumer groups (with members or committed offsets) one group coordinator, a __consumer_offsets partition, may hold; a join or offset reset that would create one more is refused"},
		{LimitKafkaMaxRequestBytes, LimitScopeBroker, DefaultKafkaMaxRequestBytes, "bytes", "",
			"the largest Kafka request frame, checked against its size prefix before anything is allocated; a larger one closes the connection"},
		{LimitKafkaMaxRequestBeforeAuth, LimitScopeBroker, DefaultKafkaMaxRequestBeforeAuth, "bytes", "",
			"the largest Kafka request frame before the connection authenticated; a larger one closes the connection"},
		{LimitKafkaMaxConnections, LimitScopeBroker, DefaultKafkaMaxConnections, "connections", "",
			"open connections of a broker's Kafka listener; past it a new connection is closed at once"},
		{LimitKafkaMaxConnectionsPerIP, LimitScopeBroker, DefaultKafkaMaxConnectionsPerIP, "connections", "",
			"open Kafka connections of one client IP address (the TCP peer's); past it a new one is closed at once"},
		{LimitKafkaIdleTimeoutMs, LimitScopeBroker, DefaultKafkaIdleTimeoutMs, "ms", "",
			"a Kafka connection that sends no request for this long is closed"},
		{ConfigMaxMessageBytes, LimitScopeTopic, DefaultMaxMessageBytes, "bytes", CodeRecordTooLarge,
			"the largest record: key, value and headers"},
		{ConfigTimestampAfterMaxMs, LimitScopeTopic, DefaultTimestampAfterMaxMs, "ms", CodeInvalidTimestamp,
			"how far a record's timestamp may be ahead of the gateway's clock"},
		{ConfigTimestampBeforeMaxMs, LimitScopeTopic, DefaultTimestampBeforeMaxMs, "ms", CodeInvalidTimestamp,
			"how far a record's timestamp may be behind the gateway's clock (the default: no limit)"},
	}
}

// CheckTimestamp applies the topic's message.timestamp.after.max.ms and
// before.max.ms to a record timestamp ts, both in ms since the Unix epoch,
// against now: INVALID_TIMESTAMP outside the window. A zero ts means "the
// current time" and always passes.
func (c TopicConfig) CheckTimestamp(ts, now int64) error {
	if ts == 0 {
		return nil
	}
	// ts and now are both in [0, 2^62]: the differences cannot overflow.
	if ts > now && ts-now > c.TimestampAfterMaxMs {
		return Errorf(CodeInvalidTimestamp, "timestamp %d is %d ms ahead of the gateway's clock; %s is %d",
			ts, ts-now, ConfigTimestampAfterMaxMs, c.TimestampAfterMaxMs)
	}
	if ts < now && now-ts > c.TimestampBeforeMaxMs {
		return Errorf(CodeInvalidTimestamp, "timestamp %d is %d ms behind the gateway's clock; %s is %d",
			ts, now-ts, ConfigTimestampBeforeMaxMs, c.TimestampBeforeMaxMs)
	}
	return nil
}
