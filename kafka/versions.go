package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler answers one decoded request. A nil response with a nil error
// sends nothing (an acks=0 produce); an error closes the connection.
type handler func(s *Server, ctx context.Context, c *conn, req kmsg.Request) (kmsg.Response, error)

// servedAPI is one API this listener serves: the versions ApiVersions
// advertises, and the handler that answers them.
type servedAPI struct {
	key      kmsg.Key
	min, max int16
	handle   handler // nil for ApiVersions, which the connection loop answers itself
	// beforeAuth: served on a connection that has not authenticated yet.
	beforeAuth bool
}

// served is every API and version the listener answers, in key order; it
// is what ApiVersions advertises. The oldest clients decide the minimums,
// the newest the maximums:
//
//   - Produce is advertised from v0 because librdkafka 2.0.2 (kcat 1.7.1)
//     sends gzip, snappy and lz4 batches uncompressed unless ApiVersions lists
//     Produce v0; it never sends v0-v2 (message sets, not RecordBatch v2) when
//     v7 is listed, so those are refused per partition with
//     UNSUPPORTED_VERSION. v13 (topics by ID) is what franz-go 1.22.3 sends.
//   - Fetch v4-v18: v4 is the first to carry RecordBatch v2, which
//     librdkafka uses only when Fetch v4 is listed beside Produce v3; v18
//     is what franz-go 1.22.3 sends (topics by ID from v13).
//   - Metadata v0-v13, everything kmsg knows: v10+ carries topic IDs.
//   - ListOffsets v0-v6: v7 adds the max-timestamp lookup (-3), which the
//     broker cannot answer yet, and v8 and v9 the tiered ones (-4, -5).
//   - ApiVersions v0-v4: v5 asks the broker to check a cluster id Sluice does
//     not have; a client sending it is answered v0 + UNSUPPORTED_VERSION with
//     this table, and retries with v4.
//   - InitProducerId v0-v5 (idempotent producers; transactional ids are
//     refused).
//   - OffsetForLeaderEpoch v0-v4, every version: franz-go asks it after a
//     leader change whenever it is listed.
//   - CreateTopics v0-v7, DeleteTopics v0-v6 (v6: by topic ID too),
//     DescribeConfigs v0-v4, IncrementalAlterConfigs v0-v1: every version
//     kmsg knows; the topic configs are the HTTP API's. AlterConfigs v0-v2,
//     the non-incremental one, replaces a topic's configs whole
//     (alterconfigs.go). CreatePartitions v0-v3 grows topics
//     (createpartitions.go).
//   - DescribeCluster v0-v2.
//   - SaslHandshake v0-v1 and SaslAuthenticate v0-v2, every version
//     (sasl.go): served before authentication, with the ApiVersions.
//   - DescribeUserScramCredentials and AlterUserScramCredentials v0, the
//     only versions (scramadmin.go).
//   - ConsumerGroupHeartbeat v0-v1 (KIP-848; consumergroupheartbeat.go):
//     franz-go uses the consumer protocol only when v1 is listed.
//   - The classic group APIs from v0 (librdkafka 2.0.2 turns groups off
//     unless FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup
//     v0, OffsetCommit v2 and OffsetFetch v1 are listed) to what franz-go
//     1.22.3 knows, but OffsetCommit and OffsetFetch stop at v9: v10 names
//     topics by ID. FindCoordinator v4+ and OffsetFetch v8+ batch keys and
//     groups. groups.go says how they map onto the coordinator.
var served = []servedAPI{
	{key: kmsg.Produce, min: 0, max: 13, handle: (*Server).handleProduce},
	{key: kmsg.Fetch, min: 4, max: 18, handle: (*Server).handleFetch},
	{key: kmsg.ListOffsets, min: 0, max: 6, handle: (*Server).handleListOffsets},
	{key: kmsg.Metadata, min: 0, max: 13, handle: (*Server).handleMetadata},
	{key: kmsg.OffsetCommit, min: 0, max: 9, handle: (*Server).handleOffsetCommit},
	{key: kmsg.OffsetFetch, min: 0, max: 9, handle: (*Server).handleOffsetFetch},
	{key: kmsg.FindCoordinator, min: 0, max: 6, handle: (*Server).handleFindCoordinator},
	{key: kmsg.JoinGroup, min: 0, max: 9, handle: (*Server).handleJoinGroup},
	{key: kmsg.Heartbeat, min: 0, max: 4, handle: (*Server).handleHeartbeat},
	{key: kmsg.LeaveGroup, min: 0, max: 5, handle: (*Server).handleLeaveGroup},
	{key: kmsg.SyncGroup, min: 0, max: 5, handle: (*Server).handleSyncGroup},
	{key: kmsg.DescribeGroups, min: 0, max: 6, handle: (*Server).handleDescribeGroups},
	{key: kmsg.ListGroups, min: 0, max: 5, handle: (*Server).handleListGroups},
	{key: kmsg.SASLHandshake, min: 0, max: 1, handle: (*Server).handleSASLHandshake, beforeAuth: true},
	{key: kmsg.ApiVersions, min: 0, max: 4, beforeAuth: true},
	{key: kmsg.CreateTopics, min: 0, max: 7, handle: (*Server).handleCreateTopics},
	{key: kmsg.DeleteTopics, min: 0, max: 6, handle: (*Server).handleDeleteTopics},
	{key: kmsg.InitProducerID, min: 0, max: 5, handle: (*Server).handleInitProducerID},
	{key: kmsg.OffsetForLeaderEpoch, min: 0, max: 4, handle: (*Server).handleOffsetForLeaderEpoch},
	{key: kmsg.DescribeConfigs, min: 0, max: 4, handle: (*Server).handleDescribeConfigs},
	{key: kmsg.AlterConfigs, min: 0, max: 2, handle: (*Server).handleAlterConfigs},
	{key: kmsg.SASLAuthenticate, min: 0, max: 2, handle: (*Server).handleSASLAuthenticate, beforeAuth: true},
	{key: kmsg.CreatePartitions, min: 0, max: 3, handle: (*Server).handleCreatePartitions},
	{key: kmsg.IncrementalAlterConfigs, min: 0, max: 1, handle: (*Server).handleIncrementalAlterConfigs},
	{key: kmsg.DescribeUserSCRAMCredentials, min: 0, max: 0, handle: (*Server).handleDescribeUserScramCredentials},
	{key: kmsg.AlterUserSCRAMCredentials, min: 0, max: 0, handle: (*Server).handleAlterUserScramCredentials},
	{key: kmsg.DescribeCluster, min: 0, max: 2, handle: (*Server).handleDescribeCluster},
	{key: kmsg.ConsumerGroupHeartbeat, min: 0, max: 1, handle: (*Server).handleConsumerGroupHeartbeat},
	{key: kmsg.ConsumerGroupDescribe, min: 0, max: 1, handle: (*Server).handleConsumerGroupDescribe},
}

// lookupAPI returns the served entry of key.
func lookupAPI(key int16) (servedAPI, bool) {
	i := slices.IndexFunc(served, func(a servedAPI) bool { return a.key.Int16() == key })
	if i < 0 {
		return servedAPI{}, false
	}
	return served[i], true
}

// apiVersionKeys is the ApiVersions answer's list of APIs.
func apiVersionKeys() []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(served))
	for _, a := range served {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key.Int16(), a.min, a.max
		out = append(out, k)
	}
	return out
}
