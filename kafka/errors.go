package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluice-io/sluice/api"
)

// codes maps every code of the error table (api/errors.go) to the Kafka
// error code a Kafka client gets for it: the one place the two tables
// meet. A test keeps it complete. Codes with no Kafka counterpart map to
// the nearest error a client handles the same way (retriable stays
// retriable where Kafka has such a code).
var codes = map[api.Code]*kerr.Error{
	api.CodeInvalidRequest:        kerr.InvalidRequest,
	api.CodeInvalidTopicName:      kerr.InvalidTopicException,
	api.CodeInvalidPartitions:     kerr.InvalidPartitions,
	api.CodeInvalidReplication:    kerr.InvalidReplicationFactor,
	api.CodeInvalidConfig:         kerr.InvalidConfig,
	api.CodeInvalidOffset:         kerr.InvalidRequest,
	api.CodeInvalidRecord:         kerr.InvalidRecord,
	api.CodeCorruptRecord:         kerr.CorruptMessage,
	api.CodeUnsupportedMediaType:  kerr.InvalidRequest,
	api.CodeRecordTooLarge:        kerr.MessageTooLarge,
	api.CodeRequestTooLarge:       kerr.RecordListTooLarge,
	api.CodeTooManyRecords:        kerr.RecordListTooLarge,
	api.CodeInvalidTimestamp:      kerr.InvalidTimestamp,
	api.CodeNotFound:              kerr.InvalidRequest,
	api.CodeMethodNotAllowed:      kerr.InvalidRequest,
	api.CodeUnknownTopic:          kerr.UnknownTopicOrPartition,
	api.CodeUnknownPartition:      kerr.UnknownTopicOrPartition,
	api.CodeTopicAlreadyExists:    kerr.TopicAlreadyExists,
	api.CodeOffsetOutOfRange:      kerr.OffsetOutOfRange,
	api.CodeNotLeader:             kerr.NotLeaderForPartition, // NOT_LEADER_OR_FOLLOWER
	api.CodeLeaderNotAvailable:    kerr.LeaderNotAvailable,
	api.CodeFencedLeaderEpoch:     kerr.FencedLeaderEpoch,
	api.CodeUnknownLeaderEpoch:    kerr.UnknownLeaderEpoch,
	api.CodeFetchSessionNotFound:  kerr.FetchSessionIDNotFound,
	api.CodeInvalidFetchEpoch:     kerr.InvalidFetchSessionEpoch,
	api.CodeStaleControllerEpoch:  kerr.StaleControllerEpoch,
	api.CodeNotController:         kerr.NotController,
	api.CodeNotEnoughReplicas:     kerr.NotEnoughReplicas,
	api.CodeNotEnoughReplicasPost: kerr.NotEnoughReplicasAfterAppend,
	api.CodeOutOfOrderSequence:    kerr.OutOfOrderSequenceNumber,
	// An older epoch at a partition: Kafka's produce answers
	// INVALID_PRODUCER_EPOCH (PRODUCER_FENCED is its transaction
	// coordinator's answer).
	api.CodeProducerFenced:    kerr.InvalidProducerEpoch,
	api.CodeUnknownProducer:   kerr.UnknownProducerID,
	api.CodeStorageError:      kerr.KafkaStorageError,
	api.CodeRemoteCorrupt:     kerr.KafkaStorageError,
	api.CodeBrokerUnavailable: kerr.LeaderNotAvailable,
	api.CodeRequestTimedOut:   kerr.RequestTimedOut,
	// Load shedding and quotas: Kafka throttles by delaying answers, not by
	// an error; its one retriable "over the limit" code is this one.
	api.CodeTooManyRequests: kerr.ThrottlingQuotaExceeded,
	api.CodeThrottled:       kerr.ThrottlingQuotaExceeded,
	api.CodeInternal:        kerr.UnknownServerError,

	api.CodeInvalidGroupID:      kerr.InvalidGroupID,
	api.CodeUnknownMemberID:     kerr.UnknownMemberID,
	api.CodeFencedMemberEpoch:   kerr.FencedMemberEpoch,
	api.CodeFencedInstanceID:    kerr.FencedInstanceID,
	api.CodeIllegalGeneration:   kerr.IllegalGeneration,
	api.CodeInvalidSession:      kerr.InvalidSessionTimeout,
	api.CodeNotCoordinator:      kerr.NotCoordinator,
	api.CodeCoordinatorLoading:  kerr.CoordinatorLoadInProgress,
	api.CodeCoordinatorNotAvail: kerr.CoordinatorNotAvailable,
	api.CodeGroupNotEmpty:       kerr.NonEmptyGroup,
	api.CodeUnknownGroup:        kerr.GroupIDNotFound,
	api.CodeNoOffset:            kerr.OffsetOutOfRange,
	api.CodeGroupMaxSize:        kerr.GroupMaxSizeReached,
	api.CodeTooManyGroups:       kerr.PolicyViolation,
	api.CodePolicyViolation:     kerr.PolicyViolation,
	api.CodeGroupManaged:        kerr.GroupAuthorizationFailed,
	api.CodeInvalidRegex:        kerr.InvalidRegularExpression,

	api.CodeUnauthenticated:  kerr.SaslAuthenticationFailed,
	api.CodeNotAuthorized:    kerr.TopicAuthorizationFailed, // the handler names the resource: group and cluster have codes of their own
	api.CodeUnknownToken:     kerr.SaslAuthenticationFailed,
	api.CodeUnknownScram:     kerr.ResourceNotFound,
	api.CodeOriginNotAllowed: kerr.InvalidRequest,
	api.CodeHostNotAllowed:   kerr.InvalidRequest,
	api.CodeUnknownQuota:     kerr.ResourceNotFound,

	api.CodeUnknownSubscription:  kerr.ResourceNotFound,
	api.CodeSubscriptionExists:   kerr.DuplicateResource,
	api.CodeTooManySubscriptions: kerr.PolicyViolation,
	api.CodeEndpointNotAllowed:   kerr.InvalidRequest,
}

// errorCode is the Kafka error code of err (0 for nil), through the table;
// an error the table does not know is UNKNOWN_SERVER_ERROR.
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	if k, ok := codes[api.Classify(err).Code]; ok {
		return k.Code
	}
	return kerr.UnknownServerError.Code
}

// errorMessage is the message an answer with an error-message field
// carries for err: the broker's own words, code included.
func errorMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := api.Classify(err).Error()
	return &m
}
