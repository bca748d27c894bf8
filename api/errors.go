package api

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error code. Codes never change meaning once
// published; clients switch on them, never on messages.
type Code string

// Spec is one row of the error table: how a code travels over HTTP and whether a
// client may retry the same request.
type Spec struct {
	Status      int
	Retriable   bool
	Description string
}

// The error table. Every error a server returns carries one of these codes; the
// gateway, the broker's internal API and the CLI all map through this table.
const (
	CodeInvalidRequest        Code = "INVALID_REQUEST"
	CodeInvalidTopicName      Code = "INVALID_TOPIC_NAME"
	CodeInvalidPartitions     Code = "INVALID_PARTITIONS"
	CodeInvalidReplication    Code = "INVALID_REPLICATION_FACTOR"
	CodeInvalidConfig         Code = "INVALID_CONFIG"
	CodeInvalidOffset         Code = "INVALID_OFFSET"
	CodeInvalidRecord         Code = "INVALID_RECORD"
	CodeCorruptRecord         Code = "CORRUPT_RECORD"
	CodeUnsupportedMediaType  Code = "UNSUPPORTED_MEDIA_TYPE"
	CodeRecordTooLarge        Code = "RECORD_TOO_LARGE"
	CodeRequestTooLarge       Code = "REQUEST_TOO_LARGE"
	CodeTooManyRecords        Code = "TOO_MANY_RECORDS"
	CodeInvalidTimestamp      Code = "INVALID_TIMESTAMP"
	CodeNotFound              Code = "NOT_FOUND"
	CodeMethodNotAllowed      Code = "METHOD_NOT_ALLOWED"
	CodeUnknownTopic          Code = "UNKNOWN_TOPIC"
	CodeUnknownPartition      Code = "UNKNOWN_PARTITION"
	CodeTopicAlreadyExists    Code = "TOPIC_ALREADY_EXISTS"
	CodeOffsetOutOfRange      Code = "OFFSET_OUT_OF_RANGE"
	CodeNotLeader             Code = "NOT_LEADER"
	CodeLeaderNotAvailable    Code = "LEADER_NOT_AVAILABLE"
	CodeFencedLeaderEpoch     Code = "FENCED_LEADER_EPOCH"
	CodeUnknownLeaderEpoch    Code = "UNKNOWN_LEADER_EPOCH"
	CodeFetchSessionNotFound  Code = "FETCH_SESSION_ID_NOT_FOUND"
	CodeInvalidFetchEpoch     Code = "INVALID_FETCH_SESSION_EPOCH"
	CodeStaleControllerEpoch  Code = "STALE_CONTROLLER_EPOCH"
	CodeNotController         Code = "NOT_CONTROLLER"
	CodeNotEnoughReplicas     Code = "NOT_ENOUGH_REPLICAS"
	CodeNotEnoughReplicasPost Code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
	CodeOutOfOrderSequence    Code = "OUT_OF_ORDER_SEQUENCE"
	CodeProducerFenced        Code = "PRODUCER_FENCED"
	CodeUnknownProducer       Code = "UNKNOWN_PRODUCER_ID"
	CodeStorageError          Code = "STORAGE_ERROR"
	CodeRemoteCorrupt         Code = "REMOTE_CORRUPT"
	CodeBrokerUnavailable     Code = "BROKER_UNAVAILABLE"
	CodeRequestTimedOut       Code = "REQUEST_TIMED_OUT"
	CodeTooManyRequests       Code = "TOO_MANY_REQUESTS"
	CodeThrottled             Code = "THROTTLED"
	CodeInternal              Code = "INTERNAL"

	CodeInvalidGroupID      Code = "INVALID_GROUP_ID"
	CodeUnknownMemberID     Code = "UNKNOWN_MEMBER_ID"
	CodeFencedMemberEpoch   Code = "FENCED_MEMBER_EPOCH"
	CodeFencedInstanceID    Code = "FENCED_INSTANCE_ID"
	CodeIllegalGeneration   Code = "ILLEGAL_GENERATION"
	CodeInvalidSession      Code = "INVALID_SESSION_TIMEOUT"
	CodeNotCoordinator      Code = "NOT_COORDINATOR"
	CodeCoordinatorLoading  Code = "COORDINATOR_LOAD_IN_PROGRESS"
	CodeCoordinatorNotAvail Code = "COORDINATOR_NOT_AVAILABLE"
	CodeGroupNotEmpty       Code = "GROUP_NOT_EMPTY"
	CodeUnknownGroup        Code = "UNKNOWN_GROUP"
	CodeNoOffset            Code = "NO_OFFSET_FOR_PARTITION"
	CodeGroupMaxSize        Code = "GROUP_MAX_SIZE_REACHED"
	CodeTooManyGroups       Code = "TOO_MANY_GROUPS"
	CodePolicyViolation     Code = "POLICY_VIOLATION"
	CodeGroupManaged        Code = "GROUP_MANAGED"
	CodeInvalidRegex        Code = "INVALID_REGULAR_EXPRESSION"

	CodeUnauthenticated  Code = "UNAUTHENTICATED"
	CodeNotAuthorized    Code = "NOT_AUTHORIZED"
	CodeUnknownToken     Code = "UNKNOWN_TOKEN"
	CodeUnknownScram     Code = "UNKNOWN_SCRAM_CREDENTIAL"
	CodeOriginNotAllowed Code = "ORIGIN_NOT_ALLOWED"
	CodeHostNotAllowed   Code = "HOST_NOT_ALLOWED"
	CodeUnknownQuota     Code = "UNKNOWN_QUOTA"

	CodeUnknownSubscription  Code = "UNKNOWN_SUBSCRIPTION"
	CodeSubscriptionExists   Code = "SUBSCRIPTION_EXISTS"
	CodeTooManySubscriptions Code = "TOO_MANY_SUBSCRIPTIONS"
	CodeEndpointNotAllowed   Code = "ENDPOINT_NOT_ALLOWED"
)

var table = map[Code]Spec{
	CodeInvalidRequest:        {400, false, "the request is malformed"},
	CodeInvalidTopicName:      {400, false, "topic names match [a-zA-Z0-9._-]{1,249} and are not '.' or '..'"},
	CodeInvalidPartitions:     {400, false, "the partition count is out of range"},
	CodeInvalidReplication:    {400, false, "the replication factor is out of range or exceeds the live brokers"},
	CodeInvalidConfig:         {400, false, "a topic config is unknown or has a bad value"},
	CodeInvalidOffset:         {400, false, "the offset parameter is not a number, 'earliest' or 'latest'"},
	CodeInvalidRecord:         {400, false, "a record in the request is malformed"},
	CodeCorruptRecord:         {400, false, "a record batch failed its CRC or layout check"},
	CodeUnsupportedMediaType:  {415, false, "the Content-Type is not one the route accepts"},
	CodeRecordTooLarge:        {413, false, "a record is larger than the topic's max.message.bytes"},
	CodeRequestTooLarge:       {413, false, "the request body is larger than the server accepts"},
	CodeTooManyRecords:        {413, false, "the request carries more records than max.records.per.request"},
	CodeInvalidTimestamp:      {400, false, "a record's timestamp is outside the topic's message.timestamp.before.max.ms/after.max.ms window"},
	CodeNotFound:              {404, false, "no such route"},
	CodeMethodNotAllowed:      {405, false, "the route does not take this method"},
	CodeUnknownTopic:          {404, false, "the topic does not exist"},
	CodeUnknownPartition:      {404, false, "the partition does not exist"},
	CodeTopicAlreadyExists:    {409, false, "a topic with this name exists"},
	CodeOffsetOutOfRange:      {416, false, "the offset is outside [log_start_offset, log_end_offset]"},
	CodeNotLeader:             {503, true, "this broker is not the partition's leader"},
	CodeLeaderNotAvailable:    {503, true, "the partition has no leader right now"},
	CodeFencedLeaderEpoch:     {409, true, "the request carries an older leader epoch than the replica's"},
	CodeUnknownLeaderEpoch:    {409, true, "the request carries a newer leader epoch than the replica knows"},
	CodeFetchSessionNotFound:  {404, true, "the replication fetch session is not (or no longer) held by the leader: start a new one"},
	CodeInvalidFetchEpoch:     {409, true, "the replication fetch session's epoch is not the next one the leader expects: start a new session"},
	CodeStaleControllerEpoch:  {409, false, "the command comes from a controller that has been replaced"},
	CodeNotController:         {503, true, "this broker is not the controller; ask the current one"},
	CodeNotEnoughReplicas:     {503, true, "fewer in-sync replicas than min.insync.replicas; nothing was written"},
	CodeNotEnoughReplicasPost: {503, true, "written to the leader but the ISR shrank below min.insync.replicas before it was replicated"},
	CodeOutOfOrderSequence:    {409, false, "the producer sequence skips ahead of the last one written"},
	CodeProducerFenced:        {409, false, "a newer epoch of this producer id exists"},
	CodeUnknownProducer:       {400, false, "the producer id was never issued"},
	CodeStorageError:          {503, true, "the partition's disk failed; it is read-only until repaired"},
	CodeRemoteCorrupt:         {503, true, "a tiered segment or its index read back from the object store fails its checks; nothing past it is served, and a retry reads the objects again"},
	CodeBrokerUnavailable:     {503, true, "the broker that owns the partition cannot be reached"},
	CodeRequestTimedOut:       {504, true, "the request did not complete within its timeout; it may or may not have been written"},
	CodeTooManyRequests:       {429, true, "the server is shedding load"},
	CodeThrottled:             {429, true, "the principal (or client id) is over its quota; nothing was done: retry after X-Sluice-Throttle-Ms (Retry-After)"},
	CodeInternal:              {500, true, "an unexpected server error"},

	CodeInvalidGroupID:      {400, false, "group ids match [a-zA-Z0-9._-]{1,249}"},
	CodeUnknownMemberID:     {404, false, "the member is not in the group (it left, or its session expired): join again"},
	CodeFencedMemberEpoch:   {409, false, "the member no longer owns the partition at this member epoch: poll or heartbeat for the new assignment"},
	CodeFencedInstanceID:    {409, false, "a newer member took over this instance id"},
	CodeIllegalGeneration:   {409, false, "a Kafka member named a generation that is not its current one: it rejoins the group"},
	CodeInvalidSession:      {400, false, "the session timeout is outside the bounds the coordinator allows (1 s to 5 minutes)"},
	CodeNotCoordinator:      {503, true, "this broker does not coordinate the group; ask the current one"},
	CodeCoordinatorLoading:  {503, true, "the group coordinator is still loading its state"},
	CodeCoordinatorNotAvail: {503, true, "the group coordinator cannot be reached or elected right now"},
	CodeGroupNotEmpty:       {409, false, "the group has live members; the operation needs an empty group"},
	CodeUnknownGroup:        {404, false, "the group does not exist"},
	CodeNoOffset:            {409, false, "no committed offset for the partition and auto_offset_reset is none"},
	CodeGroupMaxSize:        {409, false, "the group has as many members as it may hold"},
	CodeTooManyGroups:       {409, false, "the group's coordinator holds as many groups as it may; delete unused groups"},
	CodePolicyViolation:     {400, false, "the request would pass a cluster limit (partitions per broker)"},
	CodeGroupManaged:        {409, false, "the group belongs to a push subscription: only its pushers join it, and its offsets move through /v1/push"},
	CodeInvalidRegex:        {400, false, "a Kafka member's subscription by regular expression does not compile, or is longer than the coordinator allows"},

	CodeUnauthenticated:  {401, false, "the request carries no valid credentials (a missing, malformed, unknown, revoked or expired token)"},
	CodeNotAuthorized:    {403, false, "the principal may not perform this operation on this resource"},
	CodeUnknownToken:     {404, false, "no token with this id"},
	CodeUnknownScram:     {404, false, "the principal has no SCRAM credential for this mechanism"},
	CodeOriginNotAllowed: {403, false, "the request's Origin is neither the gateway's own nor in its --allowed-origins"},
	CodeHostNotAllowed:   {403, false, "the request's Host is not one of the gateway's names (--allowed-hosts, the hosts of --allowed-origins, an IP address or localhost)"},
	CodeUnknownQuota:     {404, false, "no quota for this entity"},

	CodeUnknownSubscription:  {404, false, "no push subscription with this name"},
	CodeSubscriptionExists:   {409, false, "a push subscription with this name exists"},
	CodeTooManySubscriptions: {409, false, "the cluster holds as many push subscriptions as it may"},
	CodeEndpointNotAllowed:   {400, false, "the endpoint resolves to a loopback, private, link-local or metadata address, which this gateway does not push to (--push-allow-private)"},
}

// Lookup returns the table row for code; unknown codes map to INTERNAL's row.
func Lookup(code Code) Spec {
	if s, ok := table[code]; ok {
		return s
	}
	return table[CodeInternal]
}

// Codes lists every code in the table, for documentation and tests.
func Codes() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	return out
}

// Error is an error with a stable code. Two Errors match under errors.Is when their
// codes are equal, so the sentinels below work with wrapped errors of any message.
type Error struct {
	Code    Code
	Message string
	// Throttle, for THROTTLED, is how long the caller waits before it is
	// admitted again; it travels as X-Sluice-Throttle-Ms and Retry-After.
	Throttle time.Duration
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Status is the HTTP status for this error's code.
func (e *Error) Status() int { return Lookup(e.Code).Status }

// Retriable says whether the same request may succeed later.
func (e *Error) Retriable() bool { return Lookup(e.Code).Retriable }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is. Their messages are empty; real errors carry context.
var (
	ErrCorruptRecord      = &Error{Code: CodeCorruptRecord}
	ErrRecordTooLarge     = &Error{Code: CodeRecordTooLarge}
	ErrUnknownTopic       = &Error{Code: CodeUnknownTopic}
	ErrUnknownPartition   = &Error{Code: CodeUnknownPartition}
	ErrTopicExists        = &Error{Code: CodeTopicAlreadyExists}
	ErrOffsetOutOfRange   = &Error{Code: CodeOffsetOutOfRange}
	ErrNotLeader          = &Error{Code: CodeNotLeader}
	ErrNotEnoughReplicas  = &Error{Code: CodeNotEnoughReplicas}
	ErrStorage            = &Error{Code: CodeStorageError}
	ErrRemoteCorrupt      = &Error{Code: CodeRemoteCorrupt}
	ErrRequestTimedOut    = &Error{Code: CodeRequestTimedOut}
	ErrBrokerUnavailable  = &Error{Code: CodeBrokerUnavailable}
	ErrFencedLeaderEpoch  = &Error{Code: CodeFencedLeaderEpoch}
	ErrOutOfOrderSequence = &Error{Code: CodeOutOfOrderSequence}
	ErrProducerFenced     = &Error{Code: CodeProducerFenced}
)

// Classify turns any error into an *Error: an *Error anywhere in the chain wins;
// context deadlines become REQUEST_TIMED_OUT; everything else is INTERNAL.
// This is the one place where errors are classified.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Message == "" {
			return &Error{Code: e.Code, Message: err.Error(), Throttle: e.Throttle}
		}
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeRequestTimedOut, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: CodeRequestTimedOut, Message: "request canceled"}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
