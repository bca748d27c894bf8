package gateway_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/api"
)

func TestIdempotentProduce(t *testing.T) {
	c := newCluster(t)
	c.createTopic("idem", 2)
	var id api.ProducerIdentity
	c.json("POST", "/v1/producers", map[string]any{}, &id)
	if id.ProducerID <= 0 || id.ProducerEpoch != 0 {
		t.Fatalf("new producer %+v", id)
	}
	produce := func(epoch int16, seq int32, values ...int) (int, api.ProduceResponse, api.ErrorBody) {
		t.Helper()
		recs := []map[string]any{}
		for _, v := range values {
			recs = append(recs, map[string]any{"value": v, "partition": 1})
		}
		body, _ := json.Marshal(map[string]any{"records": recs, "producer_id": id.ProducerID, "producer_epoch": epoch, "sequences": map[string]int32{"1": seq}})
		status, _, b := c.do("POST", "/v1/topics/idem/records", "application/json", body)
		var pr api.ProduceResponse
		var eb api.ErrorBody
		_ = json.Unmarshal(b, &pr)
		_ = json.Unmarshal(b, &eb)
		return status, pr, eb
	}
	offsets := func(pr api.ProduceResponse) string {
		var o []int64
		for _, x := range pr.Offsets {
			o = append(o, x.Offset)
		}
		return fmt.Sprint(o)
	}
	if status, pr, _ := produce(0, 0, 1, 2, 3); status != 200 || offsets(pr) != "[0 1 2]" {
		t.Fatalf("first: %d %v", status, pr)
	}
	// A retry of the same batch (same id, epoch, sequence) gets the same offsets
	// and writes nothing.
	if status, pr, _ := produce(0, 0, 1, 2, 3); status != 200 || offsets(pr) != "[0 1 2]" {
		t.Fatalf("retry: %d %v", status, pr)
	}
	if status, pr, _ := produce(0, 3, 4); status != 200 || offsets(pr) != "[3]" {
		t.Fatalf("next: %d %v", status, pr)
	}
	if status, _, eb := produce(0, 9, 5); status != 409 || eb.Error.Code != api.CodeOutOfOrderSequence {
		t.Fatalf("gap: %d %+v", status, eb)
	}
	if r := c.fetch("idem", 1, "offset=0"); len(r.Records) != 4 {
		t.Fatalf("partition holds %d records, want 4", len(r.Records))
	}

	// A new instance bumps the epoch: the old one is fenced.
	var bumped api.ProducerIdentity
	c.json("POST", "/v1/producers", map[string]any{"producer_id": id.ProducerID}, &bumped)
	if bumped.ProducerID != id.ProducerID || bumped.ProducerEpoch != 1 {
		t.Fatalf("bump %+v", bumped)
	}
	if status, _, eb := produce(0, 4, 6); status != 409 || eb.Error.Code != api.CodeProducerFenced {
		t.Fatalf("old epoch: %d %+v", status, eb)
	}
	if status, pr, _ := produce(1, 0, 7); status != 200 || offsets(pr) != "[4]" {
		t.Fatalf("new epoch: %d %v", status, pr)
	}

	tests := []struct {
		name   string
		body   string
		status int
		code   api.Code
	}{
		{"unknown producer", `{"records":[{"value":1}],"producer_id":999999,"producer_epoch":0,"sequences":{"0":0,"1":0}}`, 400, api.CodeUnknownProducer},
		{"no sequence for the partition", fmt.Sprintf(`{"records":[{"value":1,"partition":0}],"producer_id":%d,"producer_epoch":1,"sequences":{"1":5}}`, id.ProducerID), 400, api.CodeInvalidRequest},
		{"epoch without id", `{"records":[{"value":1}],"producer_epoch":0}`, 400, api.CodeInvalidRequest},
		{"id zero", `{"records":[{"value":1}],"producer_id":0,"producer_epoch":0}`, 400, api.CodeInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, b := c.do("POST", "/v1/topics/idem/records", "application/json", []byte(tt.body))
			var eb api.ErrorBody
			_ = json.Unmarshal(b, &eb)
			if status != tt.status || eb.Error.Code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, b, tt.status, tt.code)
			}
		})
	}
	status, _, b := c.do("POST", "/v1/producers", "application/json", []byte(`{"producer_id":424242}`))
	if status != 400 || !json.Valid(b) {
		t.Fatalf("bumping an unknown id: %d %s", status, b)
	}
}
