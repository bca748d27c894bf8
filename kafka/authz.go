package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// Authorization of every Kafka request against the cluster's ACLs, for the
// principal the connection authenticated as, with the operations the HTTP
// API checks for the same thing (DESIGN.md, "The Kafka listener's
// security"):
//
//	Produce                         WRITE topic
//	Fetch                           READ topic
//	ListOffsets, OffsetForLeaderEpoch DESCRIBE topic
//	Metadata                        DESCRIBE topic (an "all topics" answer lists only those)
//	CreateTopics                    CREATE cluster, or CREATE topic
//	DeleteTopics                    DELETE topic
//	DescribeConfigs                 DESCRIBE_CONFIGS topic; broker resources: DESCRIBE_CONFIGS cluster
//	IncrementalAlterConfigs         ALTER_CONFIGS topic; broker resources: ALTER_CONFIGS cluster
//	InitProducerId                  WRITE cluster, or WRITE on some topic (Kafka's IDEMPOTENT_WRITE)
//	FindCoordinator, DescribeGroups, ConsumerGroupDescribe DESCRIBE group
//	ListGroups                      lists the groups the principal may DESCRIBE
//	JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat READ group
//	OffsetCommit                    READ group and READ topic
//	OffsetFetch                     DESCRIBE group; DESCRIBE topic (an "all topics" answer lists only those)
//	DescribeCluster                 DESCRIBE cluster
//	Describe/AlterUserScramCredentials ALTER cluster (as the HTTP token and credential routes)
//
// A request refused as a whole is answered without being handled; one
// refused for some topics is handled without them and answered with them
// added back, each with TOPIC_AUTHORIZATION_FAILED. Read-only requests are
// handled whole and their answers filtered.

// allowed reports whether the connection's principal may perform op on the
// resource: always, on a listener with no Authenticator.
func (c *conn) allowed(op auth.Operation, rt auth.ResourceType, name string) bool {
	z := c.s.opts.Authenticator
	return z == nil || z.Allowed(c.principal, op, rt, name)
}

func (c *conn) allowedTopic(op auth.Operation, name string) bool {
	return c.allowed(op, auth.ResourceTopic, name)
}

func (c *conn) allowedGroup(op auth.Operation, name string) bool {
	return c.allowed(op, auth.ResourceGroup, name)
}

func (c *conn) allowedCluster(op auth.Operation) bool {
	return c.allowed(op, auth.ResourceCluster, auth.ClusterName)
}

// topicName resolves a topic named or given by ID (the request's version
// decides); "" for an unknown ID, which the handler answers.
func (c *conn) topicName(name string, id [16]byte, byID bool) string {
	if !byID {
		return name
	}
	n, _ := c.s.ids.name(c.s.opts.Backend.Metadata(), id)
	return n
}

var (
	topicRefused   = kerr.TopicAuthorizationFailed.Code
	groupRefused   = kerr.GroupAuthorizationFailed.Code
	clusterRefused = kerr.ClusterAuthorizationFailed.Code
)

// authorize checks req. refusal, when not nil, is the whole answer; merge,
// when not nil, completes the handler's answer.
func (c *conn) authorize(kreq kmsg.Request) (refusal kmsg.Response, merge func(kmsg.Response) kmsg.Response) {
	if c.s.opts.Authenticator == nil {
		return nil, nil
	}
	refusal, merge, refused := c.check(kreq)
	if refused {
		c.s.authzRefused.Add(1)
	}
	return refusal, merge
}

// check is authorize's switch; refused reports a request refused wholly or
// for some topics (not one whose answer is only filtered).
func (c *conn) check(kreq kmsg.Request) (refusal kmsg.Response, merge func(kmsg.Response) kmsg.Response, refused bool) {
	refusal, merge = c.checkRequest(kreq)
	return refusal, merge, refusal != nil || merge != nil && isRefusingMerge(kreq)
}

// isRefusingMerge: a merge of these requests adds refused topics back
// (the others' merges filter a whole answer).
func isRefusingMerge(kreq kmsg.Request) bool {
	switch kreq.(type) {
	case *kmsg.ProduceRequest, *kmsg.FetchRequest, *kmsg.CreateTopicsRequest, *kmsg.DeleteTopicsRequest,
		*kmsg.IncrementalAlterConfigsRequest, *kmsg.AlterConfigsRequest, *kmsg.CreatePartitionsRequest,
		*kmsg.OffsetCommitRequest:
		return true
	}
	return false
}

func (c *conn) checkRequest(kreq kmsg.Request) (refusal kmsg.Response, merge func(kmsg.Response) kmsg.Response) {
	switch req := kreq.(type) {
	case *kmsg.ProduceRequest:
		return nil, c.authorizeProduce(req)
	case *kmsg.FetchRequest:
		return nil, c.authorizeFetch(req)
	case *kmsg.ListOffsetsRequest:
		return nil, c.filterListOffsets
	case *kmsg.OffsetForLeaderEpochRequest:
		return nil, c.filterEpochs
	case *kmsg.MetadataRequest:
		all := req.Topics == nil || req.Version == 0 && len(req.Topics) == 0
		return nil, func(r kmsg.Response) kmsg.Response { return c.filterMetadata(r, all) }
	case *kmsg.CreateTopicsRequest:
		return nil, c.authorizeCreateTopics(req)
	case *kmsg.DeleteTopicsRequest:
		return nil, c.authorizeDeleteTopics(req)
	case *kmsg.DescribeConfigsRequest:
		return nil, c.filterDescribeConfigs
	case *kmsg.IncrementalAlterConfigsRequest:
		return nil, c.authorizeAlterConfigs(req)
	case *kmsg.AlterConfigsRequest:
		return nil, c.authorizeReplaceConfigs(req)
	case *kmsg.CreatePartitionsRequest:
		return nil, c.authorizeCreatePartitions(req)
	case *kmsg.InitProducerIDRequest:
		if !c.mayProduce() {
			resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = clusterRefused, -1, -1
			return resp, nil
		}
	case *kmsg.DescribeClusterRequest:
		if !c.allowedCluster(auth.OpDescribe) {
			resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
			resp.ErrorCode = clusterRefused
			return resp, nil
		}
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		if !c.allowedCluster(auth.OpAlter) {
			resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
			resp.ErrorCode = clusterRefused
			return resp, nil
		}
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		if !c.allowedCluster(auth.OpAlter) {
			return refuseAlterScram(req), nil
		}
	default:
		return c.authorizeGroups(kreq)
	}
	return nil, nil
}

// mayProduce is InitProducerId's rule (Kafka's IDEMPOTENT_WRITE, as POST
// /v1/producers): WRITE on the cluster, or on at least one topic.
func (c *conn) mayProduce() bool {
	if c.allowedCluster(auth.OpWrite) {
		return true
	}
	for name := range c.s.opts.Backend.Metadata().Topics {
		if c.allowedTopic(auth.OpWrite, name) {
			return true
		}
	}
	return false
}

func (c *conn) authorizeProduce(req *kmsg.ProduceRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.ProduceResponseTopic
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		name := c.topicName(t.Topic, t.TopicID, req.Version >= 13)
		if name == "" || c.allowedTopic(auth.OpWrite, name) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset, rp.LogStartOffset = p.Partition, topicRefused, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		refused = append(refused, rt)
	}
	req.Topics = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		if r == nil { // acks=0
			return nil
		}
		resp := r.(*kmsg.ProduceResponse)
		resp.Topics = append(resp.Topics, refused...)
		return resp
	}
}

func (c *conn) authorizeFetch(req *kmsg.FetchRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.FetchResponseTopic
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		name := c.topicName(t.Topic, t.TopicID, req.Version >= 13)
		if name == "" || c.allowedTopic(auth.OpRead, name) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, topicRefused
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			rp.RecordBatches = []byte{}
			rt.Partitions = append(rt.Partitions, rp)
		}
		refused = append(refused, rt)
	}
	req.Topics = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		switch resp := r.(type) {
		case *fetchAnswer:
			resp.Topics = append(resp.Topics, refused...)
		case *kmsg.FetchResponse:
			resp.Topics = append(resp.Topics, refused...)
		}
		return r
	}
}

func (c *conn) filterListOffsets(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.ListOffsetsResponse)
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if c.allowedTopic(auth.OpDescribe, t.Topic) {
			continue
		}
		for j := range t.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition, p.ErrorCode, p.Timestamp, p.Offset = t.Partitions[j].Partition, topicRefused, -1, -1
			t.Partitions[j] = p
		}
	}
	return resp
}

func (c *conn) filterEpochs(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.OffsetForLeaderEpochResponse)
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if c.allowedTopic(auth.OpDescribe, t.Topic) {
			continue
		}
		for j := range t.Partitions {
			p := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			p.Partition, p.ErrorCode, p.LeaderEpoch, p.EndOffset = t.Partitions[j].Partition, topicRefused, -1, -1
			t.Partitions[j] = p
		}
	}
	return resp
}

// filterMetadata drops, from an answer for every topic, those the
// principal may not DESCRIBE, and answers a topic asked for by name with
// TOPIC_AUTHORIZATION_FAILED. An unknown topic stays unknown only to who
// may describe it: everyone else is refused, so names do not leak.
func (c *conn) filterMetadata(r kmsg.Response, all bool) kmsg.Response {
	resp := r.(*kmsg.MetadataResponse)
	kept := resp.Topics[:0]
	for _, t := range resp.Topics {
		if t.Topic == nil || c.allowedTopic(auth.OpDescribe, *t.Topic) {
			kept = append(kept, t)
			continue
		}
		if all {
			continue
		}
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.ErrorCode = t.Topic, topicRefused
		kept = append(kept, rt)
	}
	resp.Topics = kept
	return resp
}

func (c *conn) authorizeCreateTopics(req *kmsg.CreateTopicsRequest) func(kmsg.Response) kmsg.Response {
	if c.allowedCluster(auth.OpCreate) {
		return nil
	}
	var refused []kmsg.CreateTopicsResponseTopic
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		if c.allowedTopic(auth.OpCreate, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode, rt.NumPartitions, rt.ReplicationFactor = t.Topic, topicRefused, -1, -1
		rt.ErrorMessage = kmsg.StringPtr("not authorized to create the topic")
		refused = append(refused, rt)
	}
	req.Topics = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.CreateTopicsResponse)
		resp.Topics = append(resp.Topics, refused...)
		return resp
	}
}

func (c *conn) authorizeDeleteTopics(req *kmsg.DeleteTopicsRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.DeleteTopicsResponseTopic
	refuse := func(name *string, id [16]byte) {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID, rt.ErrorCode = name, id, topicRefused
		refused = append(refused, rt)
	}
	keptNames := req.TopicNames[:0]
	for _, n := range req.TopicNames {
		if c.allowedTopic(auth.OpDelete, n) {
			keptNames = append(keptNames, n)
		} else {
			refuse(kmsg.StringPtr(n), [16]byte{})
		}
	}
	req.TopicNames = keptNames
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		} else {
			name = c.topicName("", t.TopicID, true)
		}
		if name == "" || c.allowedTopic(auth.OpDelete, name) {
			kept = append(kept, t)
		} else {
			refuse(t.Topic, t.TopicID)
		}
	}
	req.Topics = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.DeleteTopicsResponse)
		resp.Topics = append(resp.Topics, refused...)
		return resp
	}
}

// configAllowed checks op on a config resource: a topic, or the cluster
// for a broker or anything else.
func (c *conn) configAllowed(op auth.Operation, rt kmsg.ConfigResourceType, name string) (bool, int16) {
	if rt == kmsg.ConfigResourceTypeTopic {
		return c.allowedTopic(op, name), topicRefused
	}
	return c.allowedCluster(op), clusterRefused
}

func (c *conn) filterDescribeConfigs(r kmsg.Response) kmsg.Response {
	resp := r.(*kmsg.DescribeConfigsResponse)
	for i := range resp.Resources {
		res := &resp.Resources[i]
		if ok, code := c.configAllowed(auth.OpDescribeConfigs, res.ResourceType, res.ResourceName); !ok {
			res.ErrorCode, res.ErrorMessage, res.Configs = code, kmsg.StringPtr("not authorized to describe the configs"), nil
		}
	}
	return resp
}

func (c *conn) authorizeAlterConfigs(req *kmsg.IncrementalAlterConfigsRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.IncrementalAlterConfigsResponseResource
	kept := req.Resources[:0]
	for _, res := range req.Resources {
		ok, code := c.configAllowed(auth.OpAlterConfigs, res.ResourceType, res.ResourceName)
		if ok {
			kept = append(kept, res)
			continue
		}
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
		rr.ErrorMessage = kmsg.StringPtr("not authorized to alter the configs")
		refused = append(refused, rr)
	}
	req.Resources = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.IncrementalAlterConfigsResponse)
		resp.Resources = append(resp.Resources, refused...)
		return resp
	}
}

// authorizeReplaceConfigs is authorizeAlterConfigs for AlterConfigs, the
// non-incremental form: ALTER_CONFIGS on each resource.
func (c *conn) authorizeReplaceConfigs(req *kmsg.AlterConfigsRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.AlterConfigsResponseResource
	kept := req.Resources[:0]
	for _, res := range req.Resources {
		ok, code := c.configAllowed(auth.OpAlterConfigs, res.ResourceType, res.ResourceName)
		if ok {
			kept = append(kept, res)
			continue
		}
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
		rr.ErrorMessage = kmsg.StringPtr("not authorized to alter the configs")
		refused = append(refused, rr)
	}
	req.Resources = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.AlterConfigsResponse)
		resp.Resources = append(resp.Resources, refused...)
		return resp
	}
}

// authorizeCreatePartitions: growing a topic is ALTER on it, as in Kafka
// and POST /v1/topics/{topic}/partitions.
func (c *conn) authorizeCreatePartitions(req *kmsg.CreatePartitionsRequest) func(kmsg.Response) kmsg.Response {
	var refused []kmsg.CreatePartitionsResponseTopic
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		if c.allowedTopic(auth.OpAlter, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic, rt.ErrorCode = t.Topic, topicRefused
		rt.ErrorMessage = kmsg.StringPtr("not authorized to alter the topic")
		refused = append(refused, rt)
	}
	req.Topics = kept
	if refused == nil {
		return nil
	}
	return func(r kmsg.Response) kmsg.Response {
		resp := r.(*kmsg.CreatePartitionsResponse)
		resp.Topics = append(resp.Topics, refused...)
		return resp
	}
}

func refuseAlterScram(req *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	seen := map[string]bool{}
	add := func(user string) {
		if seen[user] {
			return
		}
		seen[user] = true
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User, r.ErrorCode = user, clusterRefused
		resp.Results = append(resp.Results, r)
	}
	for _, d := range req.Deletions {
		add(d.Name)
	}
	for _, u := range req.Upsertions {
		add(u.Name)
	}
	return resp
}
