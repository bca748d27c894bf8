package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A Kafka admin client creates a topic (defaults asked with -1), sees its
// configs, alters them, and deletes it; the HTTP API sees each step, and
// what Kafka refuses carries Kafka's error codes.
func TestKafkaTopicAdmin(t *testing.T) {
	cl, hc := kafkaCluster(t)
	kc := newKgo(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	create := kmsg.NewPtrCreateTopicsRequest()
	create.TimeoutMillis = 30_000
	for _, tc := range []struct {
		name       string
		partitions int32
		rf         int16
		configs    map[string]string
		assign     bool
	}{
		{name: "made-by-kafka", partitions: 3, rf: -1, configs: map[string]string{"retention.ms": "3600000"}},
		{name: "defaults", partitions: -1, rf: 1},
		{name: "bad config", partitions: 1, rf: 1},
		{name: "too-replicated", partitions: 1, rf: 9},
		{name: "placed", partitions: 1, rf: 1, assign: true},
		{name: "bad-config", partitions: 1, rf: 1, configs: map[string]string{"retention.ms": "soon"}},
	} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tc.name, tc.partitions, tc.rf
		for k, v := range tc.configs {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			rt.Configs = append(rt.Configs, c)
		}
		if tc.assign {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Replicas = []int32{1}
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		create.Topics = append(create.Topics, rt)
	}
	cresp, err := create.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]error{"made-by-kafka": nil, "defaults": nil, "bad config": kerr.InvalidTopicException,
		"too-replicated": kerr.InvalidReplicationFactor, "placed": kerr.InvalidRequest, "bad-config": kerr.InvalidConfig}
	for _, rt := range cresp.Topics {
		if got := kerr.ErrorForCode(rt.ErrorCode); !errors.Is(got, want[rt.Topic]) {
			t.Errorf("create %q: %v, want %v", rt.Topic, got, want[rt.Topic])
		}
	}
	top, err := hc.GetTopic(ctx, "made-by-kafka")
	if err != nil || len(top.Partitions) != 3 || top.ReplicationFactor != 3 || top.Configs["retention.ms"] != "3600000" {
		t.Fatalf("the HTTP API's view of the topic Kafka created: %+v, %v", top, err)
	}
	if top, err := hc.GetTopic(ctx, "defaults"); err != nil || len(top.Partitions) != 1 {
		t.Fatalf("the topic created with num_partitions -1: %+v, %v", top, err)
	}
	// Created again: TOPIC_ALREADY_EXISTS, and validate_only creates nothing.
	again := kmsg.NewPtrCreateTopicsRequest()
	again.ValidateOnly = true
	for _, name := range []string{"made-by-kafka", "only-checked"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		again.Topics = append(again.Topics, rt)
	}
	aresp, err := again.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if code := aresp.Topics[0].ErrorCode; code != kerr.TopicAlreadyExists.Code {
		t.Errorf("creating an existing topic: %v", kerr.ErrorForCode(code))
	}
	if code := aresp.Topics[1].ErrorCode; code != 0 {
		t.Errorf("validating a new topic: %v", kerr.ErrorForCode(code))
	}
	if _, err := hc.GetTopic(ctx, "only-checked"); err == nil {
		t.Error("validate_only created the topic")
	}

	// Alter: set one config, delete another; APPEND is refused.
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "made-by-kafka"
	for _, op := range []struct {
		name  string
		op    kmsg.IncrementalAlterConfigOp
		value *string
	}{{"retention.bytes", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("1048576")}, {"retention.ms", kmsg.IncrementalAlterConfigOpDelete, nil}} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = op.name, op.op, op.value
		res.Configs = append(res.Configs, c)
	}
	bad := kmsg.NewIncrementalAlterConfigsRequestResource()
	bad.ResourceType, bad.ResourceName = kmsg.ConfigResourceTypeTopic, "made-by-kafka"
	appendOp := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	appendOp.Name, appendOp.Op, appendOp.Value = "cleanup.policy", kmsg.IncrementalAlterConfigOpAppend, kmsg.StringPtr("compact")
	bad.Configs = append(bad.Configs, appendOp)
	alter.Resources = append(alter.Resources, res, bad)
	alresp, err := alter.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if code := alresp.Resources[0].ErrorCode; code != 0 {
		t.Fatalf("alter: %v %v", kerr.ErrorForCode(code), alresp.Resources[0].ErrorMessage)
	}
	if code := alresp.Resources[1].ErrorCode; code != kerr.InvalidRequest.Code {
		t.Errorf("APPEND: %v, want INVALID_REQUEST", kerr.ErrorForCode(code))
	}
	testwait.Check(t, 10*time.Second, "the altered configs through the HTTP API", func() error {
		top, err := hc.GetTopic(ctx, "made-by-kafka")
		if err != nil {
			return err
		}
		if _, still := top.Configs["retention.ms"]; still || top.Configs["retention.bytes"] != "1048576" {
			return fmt.Errorf("%v", top.Configs)
		}
		return nil
	})

	// Describe: what is set shows as the topic's, the rest as defaults.
	describe := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "made-by-kafka"
	describe.Resources = append(describe.Resources, dr)
	testwait.Check(t, 10*time.Second, "DescribeConfigs showing the altered configs", func() error {
		dresp, err := describe.RequestWith(ctx, kc)
		if err != nil {
			return err
		}
		got := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range dresp.Resources[0].Configs {
			got[c.Name] = c
		}
		rb, rm := got["retention.bytes"], got["retention.ms"]
		if rb.Value == nil || *rb.Value != "1048576" || rb.Source != kmsg.ConfigSourceDynamicTopicConfig {
			return fmt.Errorf("retention.bytes %+v", rb)
		}
		if def, _, _ := api.ConfigDoc("retention.ms"); rm.Value == nil || *rm.Value != def || rm.Source != kmsg.ConfigSourceDefaultConfig { // is_default is v0's
			return fmt.Errorf("retention.ms %+v, want the default %s", rm, def)
		}
		return nil
	})

	// Delete, by name and by topic ID.
	md := topicMetadata(t, ctx, kc, "defaults")
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version = 6
	byName := kmsg.NewDeleteTopicsRequestTopic()
	byName.Topic = kmsg.StringPtr("made-by-kafka")
	byID := kmsg.NewDeleteTopicsRequestTopic()
	byID.TopicID = md.TopicID
	del.Topics = append(del.Topics, byName, byID)
	dresp, err := del.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range dresp.Topics {
		if rt.ErrorCode != 0 {
			t.Fatalf("delete %v: %v", rt.Topic, kerr.ErrorForCode(rt.ErrorCode))
		}
	}
	for _, name := range []string{"made-by-kafka", "defaults"} {
		testwait.Check(t, 20*time.Second, name+" gone from the HTTP API", func() error {
			if _, err := hc.GetTopic(ctx, name); err == nil {
				return fmt.Errorf("%s still there", name)
			}
			return nil
		})
	}
}

// A cluster only Kafka clients use gets its group coordinators: the first
// FindCoordinator makes the broker create __consumer_offsets (with the
// broker's --offsets-topic-partitions), and a later one names the
// coordinator.
func TestKafkaOnlyClusterCreatesTheOffsetsTopic(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "only-kafka", Partitions: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := hc.GetTopic(ctx, api.OffsetsTopic); err == nil {
		t.Fatalf("%s exists before any group request", api.OffsetsTopic)
	}
	kc := newKgo(t, cl)
	testwait.Check(t, 30*time.Second, "a coordinator for group solo", func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "solo"
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			return err
		}
		if resp.ErrorCode != 0 {
			return kerr.ErrorForCode(resp.ErrorCode)
		}
		return nil
	})
	// The gateway learns of the topic from the cluster's metadata, which
	// reaches it after the coordinator answered.
	testwait.Check(t, 30*time.Second, api.OffsetsTopic+" with 4 partitions through the gateway", func() error {
		top, err := hc.GetTopic(ctx, api.OffsetsTopic)
		if err != nil {
			return err
		}
		if len(top.Partitions) != 4 {
			return fmt.Errorf("%d partitions", len(top.Partitions))
		}
		return nil
	})
}
