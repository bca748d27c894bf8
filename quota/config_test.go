package quota

import (
	"errors"
	"testing"
)

func TestResolve(t *testing.T) {
	q := func(p, c string, prod float64) Quota {
		return Quota{Entity: Entity{p, c}, ProducerByteRate: prod, RequestRate: prod / 100}
	}
	all := []Quota{
		q("User:alice", "app1", 1),
		q("User:alice", Default, 2),
		q("User:alice", "", 3),
		q(Default, "app1", 4),
		q(Default, Default, 5),
		q(Default, "", 6),
		q("", "app1", 7),
		q("", Default, 8),
	}
	tests := []struct {
		name      string
		quotas    []Quota
		principal string
		client    string
		wantRate  float64
		wantKey   Entity
	}{
		{"principal and client id", all, "User:alice", "app1", 1, Entity{"User:alice", "app1"}},
		{"principal, default client id: a bucket per client id", all, "User:alice", "app2", 2, Entity{"User:alice", "app2"}},
		{"principal without a client id", all, "User:alice", "", 2, Entity{"User:alice", ""}},
		{"principal alone: shared by its client ids", all[2:], "User:alice", "app2", 3, Entity{"User:alice", ""}},
		{"default principal, client id", all, "User:bob", "app1", 4, Entity{"User:bob", "app1"}},
		{"default principal and client id", all, "User:bob", "app2", 5, Entity{"User:bob", "app2"}},
		{"default principal: a bucket per principal", all[5:], "User:bob", "app2", 6, Entity{"User:bob", ""}},
		{"client id alone: shared by every principal", all[6:], "User:bob", "app1", 7, Entity{"", "app1"}},
		{"default client id alone: a bucket per client id", all[6:], "User:bob", "app2", 8, Entity{"", "app2"}},
		{"no client id skips client-only entities", all[6:7], "User:bob", "", 0, Entity{}},
		{"no client id takes the default client id", all[7:], "User:bob", "", 8, Entity{"", ""}},
		{"nothing matches", []Quota{q("User:alice", "", 3)}, "User:bob", "x", 0, Entity{}},
		{"no quotas", nil, "User:bob", "x", 0, Entity{}},
		{"a kind the specific entity does not set falls through", []Quota{
			{Entity: Entity{"User:alice", ""}, ConsumerByteRate: 99},
			q(Default, "", 6),
		}, "User:alice", "", 6, Entity{"User:alice", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, key := NewConfig(tt.quotas).Resolve(tt.principal, tt.client, Produce)
			if rate != tt.wantRate || key != tt.wantKey {
				t.Errorf("Resolve(%q, %q) = %v, %+v; want %v, %+v", tt.principal, tt.client, rate, key, tt.wantRate, tt.wantKey)
			}
		})
	}
}

func TestQuotaValidate(t *testing.T) {
	tests := []struct {
		name string
		q    Quota
		ok   bool
	}{
		{"principal", Quota{Entity: Entity{"User:alice", ""}, ProducerByteRate: 1}, true},
		{"principal and client", Quota{Entity: Entity{"User:alice", "app-1.x_y"}, ConsumerByteRate: 1}, true},
		{"defaults", Quota{Entity: Entity{Default, Default}, RequestRate: 0.5}, true},
		{"client only", Quota{Entity: Entity{"", "app"}, RequestRate: 3}, true},
		{"no entity", Quota{ProducerByteRate: 1}, false},
		{"bad principal", Quota{Entity: Entity{"alice", ""}, ProducerByteRate: 1}, false},
		{"bad client id", Quota{Entity: Entity{"User:a", "a b"}, ProducerByteRate: 1}, false},
		{"long client id", Quota{Entity: Entity{"User:a", string(make([]byte, 256))}, ProducerByteRate: 1}, false},
		{"no rate", Quota{Entity: Entity{"User:a", ""}}, false},
		{"negative rate", Quota{Entity: Entity{"User:a", ""}, ProducerByteRate: -1}, false},
		{"huge rate", Quota{Entity: Entity{"User:a", ""}, ProducerByteRate: 2e15}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.q.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %t", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}
