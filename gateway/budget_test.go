package gateway_test

import (
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
)

// A topic creation that would bring a broker past max.partitions.per.broker
// is refused whole, and nothing of it is created.
func TestPartitionsPerBrokerBudget(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 2, MaxPartitionsPerBroker: 6})
	c := client{t: t, base: tc.URL}
	// RF 2 on two brokers: every partition puts a replica on both.
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "fits", Partitions: 4, ReplicationFactor: 2}, nil)
	status, code := c.errCode("POST", "/v1/topics", api.CreateTopicRequest{Name: "too-many", Partitions: 3, ReplicationFactor: 2})
	if status != 400 || code != api.CodePolicyViolation {
		t.Fatalf("a creation past the budget: %d %s, want 400 POLICY_VIOLATION", status, code)
	}
	if status, code := c.errCode("GET", "/v1/topics/too-many", nil); status != 404 || code != api.CodeUnknownTopic {
		t.Fatalf("the refused topic: %d %s, want 404 UNKNOWN_TOPIC", status, code)
	}
	// What is left of the budget can still be used.
	c.json("POST", "/v1/topics", api.CreateTopicRequest{Name: "fills", Partitions: 2, ReplicationFactor: 2}, nil)
}
