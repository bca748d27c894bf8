package broker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// The coordinator of a group reports its lag as Prometheus gauges.
func TestGroupLagMetrics(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 2, GroupLagInterval: 100 * time.Millisecond})
	post := func(path string, body any, out any) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(c.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, rb)
		}
		if out != nil {
			if err := json.Unmarshal(rb, out); err != nil {
				t.Fatalf("POST %s: %v in %s", path, err, rb)
			}
		}
	}
	post("/v1/topics", api.CreateTopicRequest{Name: "lagged", Partitions: 1}, nil)
	post("/v1/topics/lagged/records", map[string]any{"records": []map[string]any{{"value": 1}, {"value": 2}, {"value": 3}, {"value": 4}}}, nil)
	var j api.JoinGroupResponse
	post("/v1/groups/lg/members", api.JoinGroupRequest{Topics: []string{"lagged"}}, &j)
	post("/v1/groups/lg/offsets", api.CommitRequest{MemberID: j.MemberID, MemberEpoch: j.MemberEpoch,
		Offsets: []api.PartitionOffset{{Topic: "lagged", Partition: 0, Offset: 1}}}, nil)

	want := `sluice_group_lag_records{group="lg",partition="0",topic="lagged"} 3`
	testwait.Check(t, 10*time.Second, "a broker to report the group's lag", func() error {
		for _, b := range c.Brokers {
			resp, err := http.Get("http://" + b.Addr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), want) && strings.Contains(string(body), `sluice_group_members{group="lg"} 1`) {
				return nil
			}
		}
		return fmt.Errorf("no broker reports %s", want)
	})
}
