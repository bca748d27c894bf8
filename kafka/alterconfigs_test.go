package kafka_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// AlterConfigs (the non-incremental one) replaces a topic's configs whole:
// those named are set, those not named return to their defaults, as the
// HTTP API then shows; validate_only checks without writing, and what
// Kafka refuses carries Kafka's error codes.
func TestKafkaAlterConfigsReplaces(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 3,
		Configs: map[string]string{"retention.ms": "60000", "max.message.bytes": "2000000"}})
	kc := newKgo(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alter := func(validateOnly bool, typ kmsg.ConfigResourceType, name string, configs map[string]*string) kmsg.AlterConfigsResponseResource {
		t.Helper()
		req := kmsg.NewPtrAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		r := kmsg.NewAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = typ, name
		for k, v := range configs {
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = k, v
			r.Configs = append(r.Configs, c)
		}
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Resources) != 1 {
			t.Fatalf("%d resources answered", len(resp.Resources))
		}
		return resp.Resources[0]
	}
	configs := func(want map[string]string) {
		t.Helper()
		// The listener answers after the controller's write and a refresh
		// of its own broker's view; the HTTP API reads the same view.
		tp, err := hc.GetTopic(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(tp.Configs, want) {
			t.Fatalf("configs over HTTP %v, want %v", tp.Configs, want)
		}
	}
	s := kmsg.StringPtr

	// Named configs are set, max.message.bytes returns to its default.
	if r := alter(false, kmsg.ConfigResourceTypeTopic, "orders", map[string]*string{"retention.ms": s("120000"), "cleanup.policy": s("compact")}); r.ErrorCode != 0 {
		t.Fatalf("alter: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	configs(map[string]string{"retention.ms": "120000", "cleanup.policy": "compact"})

	// validate_only: a bad value is refused, a good replacement is not
	// written.
	if r := alter(true, kmsg.ConfigResourceTypeTopic, "orders", map[string]*string{"retention.ms": s("soon")}); r.ErrorCode != kerr.InvalidConfig.Code {
		t.Fatalf("bad value: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := alter(true, kmsg.ConfigResourceTypeTopic, "orders", map[string]*string{"segment.ms": s("1000")}); r.ErrorCode != 0 {
		t.Fatalf("validate_only: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	configs(map[string]string{"retention.ms": "120000", "cleanup.policy": "compact"})

	// Errors: an unknown config, an unknown topic, a broker resource.
	if r := alter(false, kmsg.ConfigResourceTypeTopic, "orders", map[string]*string{"no.such.config": s("1")}); r.ErrorCode != kerr.InvalidConfig.Code {
		t.Fatalf("unknown config: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := alter(false, kmsg.ConfigResourceTypeTopic, "missing", map[string]*string{"retention.ms": s("1000")}); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := alter(false, kmsg.ConfigResourceTypeBroker, "1", map[string]*string{"log.retention.ms": s("1000")}); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("broker resource: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	configs(map[string]string{"retention.ms": "120000", "cleanup.policy": "compact"})

	// No configs (or only null values): every config back to its default.
	if r := alter(false, kmsg.ConfigResourceTypeTopic, "orders", map[string]*string{"retention.ms": nil}); r.ErrorCode != 0 {
		t.Fatalf("reset: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	configs(map[string]string{})
}
