package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// Coordinator key types of FindCoordinator.
const (
	coordinatorGroup       = 0
	coordinatorTransaction = 1
)

// maxCoordinatorKeys bounds a FindCoordinator v4+ batch.
const maxCoordinatorKeys = 1000

// handleFindCoordinator names the broker that coordinates each group, at
// its Kafka address: the leader of the group's __consumer_offsets
// partition, the broker HTTP groups are served by. v4+ asks for many keys
// at once. Transactions are not served: their keys are answered
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as InitProducerId answers a
// transactional id.
func (s *Server) handleFindCoordinator(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	md := s.opts.Backend.Metadata()
	if gb, ok := s.groupsBackend(); ok && req.CoordinatorType == coordinatorGroup {
		if _, exists := md.Topics[api.OffsetsTopic]; !exists {
			// The first group request of a cluster: create the topic;
			// this answer still says COORDINATOR_NOT_AVAILABLE unless its
			// leaders are there already, and the client asks again.
			if err := gb.EnsureOffsetsTopic(ctx); err != nil {
				s.log.Warn("kafka: creating the consumer offsets topic failed", "err", err)
			}
			md = s.opts.Backend.Metadata()
		}
	}
	brokers := metadataBrokers(md)
	find := func(key string) (kafkaBroker, error) {
		switch req.CoordinatorType {
		case coordinatorGroup:
		case coordinatorTransaction:
			return kafkaBroker{}, errTransactions
		default:
			return kafkaBroker{}, api.Errorf(api.CodeInvalidRequest, "coordinator type %d is not served", req.CoordinatorType)
		}
		if _, ok := s.groupsBackend(); !ok {
			return kafkaBroker{}, errNoGroups
		}
		return groupCoordinator(md, brokers, key)
	}
	if req.Version < 4 {
		b, err := find(req.CoordinatorKey)
		resp.NodeID, resp.Host, resp.Port = b.id, b.host, b.port
		resp.ErrorCode, resp.ErrorMessage = findCoordinatorCode(err), errorMessage(err)
		if err != nil {
			resp.NodeID = -1
		}
		return resp, nil
	}
	if len(req.CoordinatorKeys) > maxCoordinatorKeys {
		return nil, errTooManyKeys
	}
	for _, key := range req.CoordinatorKeys {
		b, err := find(key)
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key, rc.NodeID, rc.Host, rc.Port = key, b.id, b.host, b.port
		rc.ErrorCode, rc.ErrorMessage = findCoordinatorCode(err), errorMessage(err)
		if err != nil {
			rc.NodeID = -1
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	return resp, nil
}

var (
	errTransactions = api.Errorf(api.CodeInvalidRequest, "transactions are not served")
	errTooManyKeys  = api.Errorf(api.CodeInvalidRequest, "FindCoordinator asks for more than 1000 keys")
)

func findCoordinatorCode(err error) int16 {
	if errors.Is(err, errTransactions) {
		return kerr.TransactionalIDAuthorizationFailed.Code
	}
	return errorCode(err)
}

// groupCoordinator is the Kafka address of the leader of group's
// __consumer_offsets partition. COORDINATOR_NOT_AVAILABLE while the topic
// does not exist (HTTP groups create it on first use), the partition has
// no leader, or its leader serves no Kafka.
func groupCoordinator(md *cluster.Metadata, brokers []kafkaBroker, group string) (kafkaBroker, error) {
	if err := api.ValidateGroupID(group); err != nil {
		return kafkaBroker{}, err
	}
	t, ok := md.Topics[api.OffsetsTopic]
	if !ok || t.Partitions() == 0 {
		return kafkaBroker{}, api.Errorf(api.CodeCoordinatorNotAvail, "the %s topic does not exist yet", api.OffsetsTopic)
	}
	p := api.GroupPartition(group, t.Partitions())
	leader := int32(-1)
	if int(p) < len(t.States) {
		leader = t.States[p].Leader
	}
	for _, b := range brokers {
		if b.id == leader {
			return b, nil
		}
	}
	return kafkaBroker{}, api.Errorf(api.CodeCoordinatorNotAvail, "%s-%d has no leader that serves Kafka", api.OffsetsTopic, p)
}

// newMemberID is a new member id: the client id (its first 64 bytes) and
// a random suffix, as Kafka makes them.
func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return truncate(clientID, 64) + "-" + hex.EncodeToString(b[:])
}
