package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/faulttest"
)

// --limit reaches the process: a gateway limit set on sluice dev's command
// line refuses what the default would take.
func TestLimitFlags(t *testing.T) {
	p := faulttest.StartDev(t, t.TempDir(), "--limit", "max.records.per.request=3", "--limit", "max.partitions.per.broker=5")
	post := func(path string, body any) (int, api.Code) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(p.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error.Code
	}
	if status, _ := post("/v1/topics", api.CreateTopicRequest{Name: "small", Partitions: 1}); status != 201 {
		t.Fatalf("create: %d", status)
	}
	recs := []map[string]any{{"value": 1}, {"value": 2}, {"value": 3}, {"value": 4}}
	if status, code := post("/v1/topics/small/records", map[string]any{"records": recs}); status != 413 || code != api.CodeTooManyRecords {
		t.Fatalf("4 records with max.records.per.request=3: %d %s", status, code)
	}
	if status, _ := post("/v1/topics/small/records", map[string]any{"records": recs[:3]}); status != 200 {
		t.Fatalf("3 records: %d", status)
	}
	if status, code := post("/v1/topics", api.CreateTopicRequest{Name: "big", Partitions: 5}); status != 400 || code != api.CodePolicyViolation {
		t.Fatalf("5 more partitions with max.partitions.per.broker=5: %d %s", status, code)
	}
}
